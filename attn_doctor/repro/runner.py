"""Run repro cases in child processes and turn what they left behind into verdicts.

A child may print a result line, raise, trip a device-side assert, fault, be killed by a signal,
hang, or print megabytes of garbage: each becomes a verdict, and the next case still runs.
"""

from __future__ import annotations

import enum
import random
import re
import shlex
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from attn_doctor import isolation
from attn_doctor.forkserver import Launcher, fresh_command
from attn_doctor.isolation import ChildOutput, last_line, run_child, signal_name
from attn_doctor.progress import QUIET, Progress
from attn_doctor.repro.catalogue import Case, Repro

DEFAULT_TIMEOUT_S = 300.0

# the messages that say "the bug happened" when a kernel or the runtime stops a run
_SIGNATURES: tuple[tuple[str, str], ...] = (
    (r"device-side assert triggered|Assertion .index out of bounds. failed", "device-side assert"),
    (r"illegal memory access", "illegal memory access"),
    (r"index out of bounds|index \S+ is out of bounds|out of range in self", "index out of bounds"),
    (r"misaligned address", "misaligned address"),
)
_SANITIZER_ERROR = re.compile(
    r"^=+ (Invalid __\w+__ (?:read|write)[^\n]*|[A-Z][^\n]*(?:error|Error)[^\n]*)\n"
    r"(?:=+[^\n]*\n)*?=+\s+at (?P<kernel>[\w$.]+)",
    re.M,
)


# the start of a row's detail when the case could not run here at all (a missing module, no GPU):
# running it again, alone or not, cannot change that
CANNOT_RUN = "cannot run: "
NO_GPU = CANNOT_RUN + "no GPU for --device cuda: "
REPRO_EXTRA = "pip install 'attn-doctor[repro]'"
_REPRO_EXTRA_MODULES = ("torch", "triton", "numpy")  # numpy: triton's CPU interpreter imports it
# import name -> the distribution that provides it, where the two differ or a probe may need it
_DISTRIBUTIONS = {
    "fla": "flash-linear-attention",
    "flash_attn": "flash-attn",
    "transformers": "transformers",
    "einops": "einops",
}
_NO_MODULE = re.compile(r"(?P<type>ModuleNotFoundError|ImportError): No module named '(?P<name>[\w.]+)'")


def install_hint(error_type: str, module: str) -> str:
    """What to install when a child could not import ``module`` (``exc.name`` of its ImportError)."""
    top = module.split(".")[0]
    if error_type == "ModuleNotFoundError" and module == top:  # the package itself is absent
        if top in _REPRO_EXTRA_MODULES:
            return f"install the repro extra: {REPRO_EXTRA}"
        distribution = _DISTRIBUTIONS.get(top)
        if distribution:
            return f"install {distribution}: pip install {distribution}"
        return f"install the package that provides the module {top}"
    distribution = _DISTRIBUTIONS.get(top, top)  # a part of an installed package: another release has it
    return f"the installed {distribution} lacks it: upgrade it: pip install -U {distribution}"


def cannot_run(result: CaseResult) -> bool:
    return result.detail.startswith(CANNOT_RUN)


class Status(str, enum.Enum):
    REPRODUCED = "REPRODUCED"
    NOT_REPRODUCED = "NOT REPRODUCED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"  # the harness could not tell: hung, printed garbage, failed in another way


@dataclass
class CaseResult:
    repro: str
    case: str
    expect_bug: bool | None  # None: a live probe of this installation, which may go either way
    status: Status
    detail: str
    device: str
    versions: dict[str, str] = field(default_factory=dict)
    command: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    sanitizer: str | None = None
    seed: int | None = None  # of the case's random inputs (the rerun command passes it); None: a probe

    @property
    def as_expected(self) -> bool:
        if self.expect_bug is None:
            return self.status is not Status.ERROR
        wanted = Status.REPRODUCED if self.expect_bug else Status.NOT_REPRODUCED
        return self.status in (wanted, Status.SKIPPED)


@dataclass(frozen=True)
class RunOptions:
    device: str  # "cuda" or "cpu"
    timeout_s: float = DEFAULT_TIMEOUT_S
    sanitizer: bool = False
    jobs: int = 1
    fork: bool = True  # from one process that imported the stack (forkserver); False: fresh processes


CHILD_ENTRY = "attn_doctor.repro.child"  # main([MODULE, CASE, DEVICE, SEED])


def fresh_seed() -> int:
    """Fresh random inputs every run; the seed goes into the rerun command, which replays them."""
    return random.SystemRandom().randrange(2**31)


def child_arguments(repro: Repro, case: Case, device: str, seed: int) -> list[str]:
    return [repro.module, case.name, device, str(seed)]


def child_command(repro: Repro, case: Case, device: str, seed: int) -> list[str]:
    return fresh_command(CHILD_ENTRY, child_arguments(repro, case, device, seed))


def child_environment(device: str, sanitizer: bool = False) -> dict[str, str]:
    env = isolation.child_environment(TRITON_DEBUG="1")
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    if sanitizer:  # memcheck must see the bad access itself, not a device assert in front of it,
        env["ATTN_DOCTOR_KERNEL_DEBUG"] = env["TRITON_DEBUG"] = "0"
        # nor a read past a tensor that lands inside the caching allocator's larger block
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    return env


def rerun_command(repro: Repro, case: Case, device: str, seed: int, sanitizer: bool = False) -> str:
    """The child's exact command line, with the environment it ran under and its seed."""
    debug = "0" if sanitizer else "1"
    settings = f"CUDA_LAUNCH_BLOCKING=1 TRITON_DEBUG={debug}" + (
        " TRITON_INTERPRET=1" if device == "cpu" else ""
    )
    if sanitizer:
        settings += (
            " ATTN_DOCTOR_KERNEL_DEBUG=0 PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck"
        )
    return f"{settings} python -m {CHILD_ENTRY} {shlex.join(child_arguments(repro, case, device, seed))}"


Work = tuple[Repro, Case, tuple[str, ...]]  # a case and its rule's symptom patterns


def run_cases(work: list[Work], options: RunOptions, progress: Progress = QUIET) -> list[CaseResult]:
    """Every case in its own child, up to ``options.jobs`` at a time; results in input order.

    Children fork from one process that imported torch, triton and the cases (compute-sanitizer
    runs fresh processes: it must start the process it watches). GPU cases share the GPU; one that
    comes out other than expected while others ran beside it is run again alone, and that verdict
    stands, so a faulting neighbour cannot decide another case's verdict. Each case draws its
    seed once: a run alone gets the same inputs as the run it checks.
    """
    sanitizer = shutil.which("compute-sanitizer") if options.sanitizer and options.device == "cuda" else None
    preload = ["torch", "triton", CHILD_ENTRY, *dict.fromkeys(repro.module for repro, _, _ in work)]
    env = child_environment(options.device, sanitizer=sanitizer is not None)
    jobs = max(1, min(options.jobs, len(work)))
    seeds = [fresh_seed() for _ in work]
    with Launcher(
        env, preload, fork=options.fork and sanitizer is None, timeout_s=options.timeout_s
    ) as launcher:

        def one(index: int) -> CaseResult:
            repro, case, symptoms = work[index]
            label = f"{repro.id} / {case.name}"
            progress.started(label)
            result = run_case(repro, case, symptoms, options, launcher, seeds[index], sanitizer)
            progress.finished(
                label, f"{result.status.value}" + ("" if result.as_expected else " (not as expected)")
            )
            return result

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(one, range(len(work))))
        if options.device == "cuda" and jobs > 1:
            for index, result in enumerate(results):
                if not result.as_expected and not cannot_run(result):
                    alone = one(index)
                    alone.detail += " (run again alone: the first run shared the GPU with other cases)"
                    results[index] = alone
        progress.note(f"repro: {launcher.note}")
    return results


def run_case(
    repro: Repro,
    case: Case,
    symptoms: tuple[str, ...],
    options: RunOptions,
    launcher: Launcher,
    seed: int,
    sanitizer: str | None = None,
) -> CaseResult:
    """One case on inputs drawn from ``seed``; ``symptoms`` (the rule's own message patterns) also
    count as the bug showing."""
    if sanitizer:
        command = [
            sanitizer,
            "--tool",
            "memcheck",
            "--print-limit",
            "20",
            *child_command(repro, case, options.device, seed),
        ]
        output = run_child(command, child_environment(options.device, sanitizer=True), options.timeout_s)
    else:
        arguments = child_arguments(repro, case, options.device, seed)
        output = launcher.run(CHILD_ENTRY, arguments, options.timeout_s)
    result = classify(output, options, symptoms)
    result.repro, result.case, result.expect_bug, result.seed = repro.id, case.name, case.expect_bug, seed
    result.command = rerun_command(repro, case, options.device, seed, sanitizer=sanitizer is not None)
    if sanitizer:
        found = first_sanitizer_error(output.stdout + output.stderr)
        result.sanitizer = found or "no memcheck errors"
        if found and result.status is not Status.REPRODUCED:
            result.status, result.detail = Status.REPRODUCED, f"compute-sanitizer: {found}; {result.detail}"
    return result


def classify(output: ChildOutput, options: RunOptions, symptoms: tuple[str, ...] = ()) -> CaseResult:
    """What the child left behind -> a verdict. Public for tests: it is the heart of the runner."""

    def result(status: Status, detail: str, data: dict[str, Any] | None = None) -> CaseResult:
        data = data or {}
        return CaseResult(
            repro="",
            case="",
            expect_bug=False,
            status=status,
            detail=detail,
            device=str(data.get("device", options.device)),
            versions={str(k): str(v) for k, v in dict(data.get("versions") or {}).items()},
            max_abs_error=data.get("max_abs_error"),
            max_rel_error=data.get("max_rel_error"),
        )

    if output.timed_out:
        return result(Status.ERROR, f"hung: no result within {options.timeout_s:g} s (killed)")
    stderr, returncode = output.stderr, output.returncode
    data = output.result()
    if data is not None:
        outcome, detail = data.get("outcome"), " ".join(str(data.get("detail", "")).split())
        if outcome == "match":
            return result(Status.NOT_REPRODUCED, f"numbers match the float64 reference: {detail}", data)
        if outcome == "mismatch":
            return result(Status.REPRODUCED, f"numeric mismatch: {detail}", data)
        if outcome == "refused":
            return result(Status.REPRODUCED, f"index out of bounds (host-side check): {detail}", data)
        if outcome == "skipped":
            return result(Status.SKIPPED, detail, data)
        if outcome == "no-gpu":
            return result(Status.ERROR, f"{NO_GPU}{detail}", data)
        if outcome == "exception" and data.get("missing"):
            error_type = detail.split(":", 1)[0]
            hint = install_hint(error_type, str(data["missing"]))
            return result(Status.ERROR, f"{CANNOT_RUN}{detail}: {hint}", data)
        if outcome == "exception":
            signature = _signature(f"{detail}\n{stderr}", symptoms)
            if signature:
                return result(Status.REPRODUCED, f"{signature}: {detail}", data)
            return result(Status.ERROR, f"failed in another way: {detail}", data)
        return result(Status.ERROR, f"unreadable result line: outcome {outcome!r}", data)
    signature = _signature(stderr, symptoms)
    if signature:
        return result(
            Status.REPRODUCED, f"{signature} (the child died before reporting): {last_line(stderr)}"
        )
    if returncode is not None and returncode < 0:
        return result(
            Status.REPRODUCED, f"the child was killed by {signal_name(returncode)}: {last_line(stderr)}"
        )
    missing = next(reversed(list(_NO_MODULE.finditer(stderr))), None)  # the import that stopped it
    if missing is not None:
        hint = install_hint(missing["type"], missing["name"])
        return result(Status.ERROR, f"{CANNOT_RUN}{missing.group(0)}: {hint}")
    return result(Status.ERROR, f"no result (exit code {returncode}): {last_line(stderr) or 'no output'}")


def first_sanitizer_error(output: str) -> str | None:
    match = _SANITIZER_ERROR.search(output)
    if match is None:
        return None
    return f"{match.group(1).strip()} in {match['kernel']}"


def _signature(text: str, symptoms: tuple[str, ...]) -> str | None:
    for pattern, name in _SIGNATURES:
        if re.search(pattern, text):
            return name
    for pattern in symptoms:
        if re.search(pattern, text):
            return "the rule's symptom"
    return None
