"""The runner against children that segfault, hang, assert, abort, or print garbage: each becomes
a verdict, none takes the runner down, and the next case still runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from attn_doctor.repro.catalogue import Case, Repro
from attn_doctor.repro.runner import (
    RunOptions,
    Status,
    child_environment,
    first_sanitizer_error,
    rerun_command,
    run_cases,
)

CHILDREN = Path(__file__).parent / "repro_children"
CASES = [
    "match",
    "mismatch",
    "device-assert",
    "library-error",
    "symptom",
    "segfault",
    "abort-after-assert-text",
    "hang",
    "garbage",
    "silent-exit",
]
REPRO = Repro(
    id="misbehaving",
    title="test",
    module="misbehaving",
    cases=tuple(Case(name, True, name) for name in CASES),
)


@pytest.fixture(scope="module", params=[True, False], ids=["forked", "fresh"])
def results(request):
    os.environ["PYTHONPATH"] = os.pathsep.join([str(CHILDREN), os.environ.get("PYTHONPATH", "")])
    options = RunOptions(device="cpu", timeout_s=20, jobs=4, fork=request.param)
    start = time.monotonic()
    work = [(REPRO, case, (r"failed to unpack the object at pos 2",)) for case in REPRO.cases]
    found = {r.case: r for r in run_cases(work, options)}
    return found, time.monotonic() - start


@pytest.mark.parametrize(
    ("case", "status", "needle"),
    [
        ("match", Status.NOT_REPRODUCED, "match the float64 reference"),
        ("mismatch", Status.REPRODUCED, "numeric mismatch"),
        ("device-assert", Status.REPRODUCED, "device-side assert"),
        ("library-error", Status.ERROR, "ValueError: some unrelated failure"),
        ("symptom", Status.REPRODUCED, "the rule's symptom"),
        ("segfault", Status.REPRODUCED, "SIGSEGV"),
        ("abort-after-assert-text", Status.REPRODUCED, "illegal memory access"),
        ("hang", Status.ERROR, "hung"),
        ("garbage", Status.ERROR, "no result"),
        ("silent-exit", Status.ERROR, "exit code 3"),
    ],
)
def test_each_misbehaviour_becomes_a_verdict(results, case, status, needle):
    found, _ = results
    assert found[case].status is status, found[case]
    assert needle in found[case].detail


def test_all_cases_ran_and_the_hang_was_cut_off(results):
    found, elapsed = results
    assert set(found) == set(CASES)
    assert elapsed < 60  # the 20 s timeout, not the child's hour of sleep
    assert "python -m attn_doctor.repro.child misbehaving hang cpu" in found["hang"].command


def test_mismatch_numbers_are_kept(results):
    found, _ = results
    assert found["mismatch"].max_abs_error == pytest.approx(3.2)


def test_sanitizer_first_error_names_the_kernel():
    report = (
        "========= COMPUTE-SANITIZER\n"
        "========= Invalid __global__ read of size 2 bytes\n"
        "=========     at rotary_kernel+0x1b0 in /tmp/rotary.py:40\n"
        "=========     by thread (3,0,0) in block (0,0,0)\n"
        "========= Invalid __global__ read of size 2 bytes\n"
        "=========     at other_kernel+0x10\n"
    )
    assert first_sanitizer_error(report) == "Invalid __global__ read of size 2 bytes in rotary_kernel"
    assert first_sanitizer_error("========= ERROR SUMMARY: 0 errors\n") is None


@pytest.mark.parametrize("sanitizer", [False, True])
def test_rerun_command_states_the_environment_the_child_ran_under(sanitizer):
    """Under compute-sanitizer no device assert may stand in front of the bad access memcheck must
    see: neither the kernels' own debug variants nor TRITON_DEBUG's asserts in every kernel."""
    env = child_environment("cuda", sanitizer=sanitizer)
    command = rerun_command(REPRO, REPRO.cases[0], "cuda", 7, sanitizer=sanitizer)
    for name in (
        "CUDA_LAUNCH_BLOCKING",
        "TRITON_DEBUG",
        "ATTN_DOCTOR_KERNEL_DEBUG",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
    ):
        if name in env:
            assert f"{name}={env[name]}" in command
    assert env["TRITON_DEBUG"] == ("0" if sanitizer else "1")
    assert ("compute-sanitizer" in command) is sanitizer
