"""Comparing a kernel's output with its float64 reference: per-dtype tolerances and poison.

Outputs are filled with NaN before a kernel runs, so an element the kernel never wrote cannot
pass as a number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attn_doctor.words import counted

# (atol, rtol) against a float64 reference, for attention-sized reductions (head dim <= 256)
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-4, 2e-4),  # kernels run float32 dots in IEEE mode: tf32 would not meet this
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def poisoned(
    shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """An output buffer full of NaN."""
    return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)


@dataclass(frozen=True)
class Comparison:
    max_abs_error: float
    max_rel_error: float
    unwritten: int  # elements still NaN where the reference is finite
    mismatched: int  # elements outside atol + rtol * |ref| (unwritten ones included)
    atol: float
    rtol: float

    @property
    def ok(self) -> bool:
        return self.mismatched == 0

    def describe(self) -> str:
        state = "within" if self.ok else f"{counted(self.mismatched, 'element')} outside"
        unwritten = f", {self.unwritten} never written" if self.unwritten else ""
        return (
            f"max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g} "
            f"({state} atol {self.atol:g} + rtol {self.rtol:g} * |ref|{unwritten})"
        )


def compare(output: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> Comparison:
    """Elementwise |out - ref| <= atol + rtol * |ref|, evaluated in float64 on the CPU."""
    atol, rtol = TOLERANCES[dtype]
    out = output.detach().to("cpu", torch.float64)
    ref = reference.detach().to("cpu", torch.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    unwritten = int((torch.isnan(out) & torch.isfinite(ref)).sum())
    diff = (out - ref).abs().nan_to_num(nan=float("inf"))
    mismatched = int((diff > atol + rtol * ref.abs()).sum())
    if diff.numel() == 0:
        return Comparison(0.0, 0.0, 0, 0, atol, rtol)
    max_rel = float((diff / ref.abs().clamp_min(atol)).max())  # near-zero references: relative to atol
    return Comparison(float(diff.max()), max_rel, unwritten, mismatched, atol, rtol)
