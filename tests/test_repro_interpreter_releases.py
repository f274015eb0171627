"""The CPU path (TRITON_INTERPRET=1) gives the same verdicts under other triton releases (cached
venvs): triton 3.6's interpreter made every kernel with a loaded loop bound fail under numpy 2
("only 0-dimensional arrays can be converted to Python scalars") until kernels/interpreter.py, and
triton 3.2's cannot invert an int1 mask (its builder has no get_int1_ty), so kernels write
``mask == 0`` for "not in the mask"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.release_venvs import REPO, release_venv, run_doctor


def verdicts(output: str) -> dict[tuple[str, str], str]:
    return {(row["repro"], row["case"]): row["status"] for row in json.loads(output)["results"]}


# every triton minor release from 3.2 (the newest patch of each) with the newest numpy they install
# beside; and 3.2 with numpy 1, the other numpy line a release of its time met
RELEASES = [
    (f"triton=={t}", "numpy") for t in ("3.2.0", "3.3.1", "3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0")
]
RELEASES.append(("triton==3.2.0", "numpy<2"))


@pytest.fixture(scope="module")
def verdicts_here() -> dict[tuple[str, str], str]:
    """The verdicts under this environment's triton: run once, compared with every release."""
    here = subprocess.run(
        [sys.executable, "-m", "attn_doctor", "repro", "--all", "--device", "cpu", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    return verdicts(here.stdout)


@pytest.mark.releases
@pytest.mark.parametrize(("triton", "numpy"), RELEASES, ids=[" ".join(pair) for pair in RELEASES])
def test_cpu_repro_verdicts_match_across_triton_releases(
    triton: str, numpy: str, verdicts_here: dict[tuple[str, str], str]
) -> None:
    with release_venv(triton, numpy) as venv:
        there = run_doctor(venv, "repro", "--all", "--device", "cpu", "--format", "json")
    assert there.returncode == 0, there.stdout[-2000:] + there.stderr[-2000:]
    assert "ERROR" not in set(verdicts(there.stdout).values())
    assert verdicts(there.stdout) == verdicts_here
