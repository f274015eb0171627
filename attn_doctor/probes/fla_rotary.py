"""Probe for fla-rotary-dim-exceeds-head-dim: fla's own RotaryEmbedding built with the model width.

``RotaryEmbedding(dim=H * D)`` on [B, T, H, D] heads asks fla's ``rotary_embedding_kernel`` for a
rotary width 2R above the head width D, so each program addresses 2R - D elements past its head
(past the tensor for the last one). On a GPU the stray accesses mostly land inside torch's cached
block: no error, not even from compute-sanitizer (seen on an H100 with fla 0.5.2), an illegal memory
access only when they reach past it; under the CPU interpreter a stray store can corrupt the heap
and kill the process without a word.
So the kernel never touches memory it does not own: the probe stands in for fla's launch, reads
what the kernel is asked to do (the decision), then runs fla's kernel on copies of the tensors
followed by guard regions and counts the stores that landed there (the confirmation).
fla >= 0.6.0 rejects the call with an AssertionError before any launch. A control call with
dim=head_dim comes first: fla before 0.5.1 cannot run the kernel on the CPU at all (its input_guard
enters ``torch.cpu.device``), and that is a reason to skip, not a verdict.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from attn_doctor.probes.observation import Observation, ProbeSkipped, ProbeVerdict

RULE = "fla-rotary-dim-exceeds-head-dim"
SHAPE = (2, 64, 4, 64)  # B, T, H, D
KERNEL = "rotary_embedding_kernel"


def overrun(head_dim: int, rotary_half: int) -> int:
    """How many elements past its head the kernel addresses with cos/sin tables of width
    ``rotary_half`` (it reads and writes x[..., :2R]); 0 when the rotary width fits the head."""
    return max(0, 2 * rotary_half - head_dim)


@dataclass(frozen=True)
class Launch:
    head_dim: int
    rotary_dim: int  # 2R, the width the kernel rotates
    stray_stores: int  # stores that landed in the guard region after the output

    @property
    def past_head(self) -> int:
        return overrun(self.head_dim, self.rotary_dim // 2)


class GuardedKernel:
    """Stands in for fla's kernel object: ``kernel[grid](...)`` runs the real kernel on guarded copies."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.attempts = 0
        self.launches: list[Launch] = []

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self._launch(
            grid, {**dict(zip(self.kernel.arg_names, args)), **kwargs}
        )

    def _launch(self, grid: Any, named: dict[str, Any]) -> None:
        self.attempts += 1
        x, y, head_dim, half = named["x"], named["y"], int(named["D"]), int(named["R"])
        guard = max(2 * half, head_dim)  # beyond the farthest element any program addresses
        x_view, _ = guarded_copy(x, guard, fill=0.0)
        y_view, y_buffer = guarded_copy(y, guard, fill=float("nan"))
        self._run(grid, {**named, "x": x_view, "y": y_view})
        y.copy_(y_view)
        stray = int((~y_buffer[y.numel() :].isnan()).sum())
        self.launches.append(Launch(head_dim, 2 * half, stray))

    def _run(self, grid: Any, named: dict[str, Any]) -> None:
        if hasattr(self.kernel, "configs"):
            # fla's first autotune config: benchmarking them all compiles each (seconds on a GPU) and
            # needs a GPU driver (none under the interpreter); the verdict depends on none of them
            self.kernel.fn[grid](**named, **self.kernel.configs[0].all_kwargs())
        else:
            self.kernel[grid](**named)


def guarded_copy(tensor: Any, guard: int, fill: float) -> tuple[Any, Any]:
    """A contiguous copy of ``tensor`` at the start of a buffer with ``guard`` ``fill`` elements after it."""
    import torch

    buffer = torch.full((tensor.numel() + guard,), fill, dtype=tensor.dtype, device=tensor.device)
    view = buffer[: tensor.numel()].view(tensor.shape)
    view.copy_(tensor)
    return view, buffer


class Rejected(Exception):
    """fla's own checks refused the call before any kernel launch."""


def run() -> list[Observation]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        _use_interpreter()
    modules = _import_fla()
    rotary = importlib.import_module(modules.RotaryEmbedding.__module__)
    kernel = getattr(rotary, KERNEL, None)
    if kernel is None:
        raise RuntimeError(f"{rotary.__name__} has no {KERNEL}: the code path moved")
    fla = f"fla {importlib.import_module('fla').__version__}"
    heads, head_dim = SHAPE[2:]
    q, k = (torch.randn(*SHAPE, device=device) for _ in range(2))
    try:  # control: the width fla expects; a failure here is the install, not the rule
        _apply(modules.RotaryEmbedding(dim=head_dim), rotary, kernel, q, k)
    except Exception as exc:  # noqa: BLE001 - said in full
        raise ProbeSkipped(
            f"{fla} cannot run RotaryEmbedding(dim=head_dim) on the {device}: {_said(exc)}"
        ) from exc
    call = f"RotaryEmbedding(dim={heads * head_dim}) on q, k {list(SHAPE)} (head_dim {head_dim}, {device})"
    try:
        guarded = _apply(modules.RotaryEmbedding(dim=heads * head_dim), rotary, kernel, q, k)
    except Rejected as rejected:
        return [
            Observation(
                RULE, ProbeVerdict.NOT_AFFECTED, f"{fla} rejected {call} with a clear error: {rejected}"
            )
        ]
    return [verdict(fla, call, guarded.launches)]


def _apply(rope: Any, rotary: Any, kernel: Any, q: Any, k: Any) -> GuardedKernel:
    guarded = GuardedKernel(kernel)
    setattr(rotary, KERNEL, guarded)
    try:
        rope.to(q.device)(q, k)
    except (AssertionError, ValueError) as error:
        if guarded.attempts:  # raised by the kernel launch, not by fla's checks
            raise
        raise Rejected(_said(error)) from error
    return guarded


def verdict(fla: str, call: str, launches: list[Launch]) -> Observation:
    """The host-side decision: a launch asked to rotate past the head means affected."""
    if not launches:
        raise RuntimeError(f"{call} launched no {KERNEL}: the code path moved")
    worst = max(launches, key=lambda launch: launch.past_head)
    if worst.past_head == 0:
        return Observation(
            RULE,
            ProbeVerdict.NOT_AFFECTED,
            f"{fla} accepted {call} and kept every "
            f"{KERNEL} launch within the head (rotary width {worst.rotary_dim})",
        )
    return Observation(
        RULE,
        ProbeVerdict.AFFECTED,
        f"{fla} accepted {call} and launched {KERNEL} with rotary width {worst.rotary_dim} > head_dim "
        f"{worst.head_dim}: it addresses {worst.past_head} elements past each head, and "
        f"{worst.stray_stores} stores landed past the end of the output (guard region)",
    )


def _use_interpreter() -> None:
    """No GPU: fla's kernel runs under the Triton interpreter, which must be on before triton is imported."""
    if importlib.util.find_spec("numpy") is None:
        raise ProbeSkipped(
            "no GPU, and the Triton interpreter that would run fla's kernel on the CPU needs numpy"
        )
    os.environ["TRITON_INTERPRET"] = "1"


def _import_fla() -> Any:
    try:
        return importlib.import_module("fla.modules")
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason to skip, said in full
        raise ProbeSkipped(f"fla does not import here: {_said(exc)}") from exc


def _said(exc: BaseException) -> str:
    """An exception in one line: its type and first sentence."""
    first = (str(exc).splitlines() or [""])[0].split(". ")[0]
    return f"{type(exc).__name__}: {first[:200]}"
