"""Real library releases in cached venvs, for the tests that must meet the real thing.

Each venv holds torch 2.13.0 (CPU, first and pinned), the requested releases and the doctor's own
dependencies; the doctor itself runs from this checkout through PYTHONPATH. Venvs are built once
and reused (``ATTN_DOCTOR_RELEASE_CACHE``, default ~/.cache/attn-doctor/release-venvs); a lock
file makes concurrent test processes wait for one build instead of racing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from attn_doctor._compat import tomllib
from attn_doctor.isolation import run_child
from attn_doctor.probes.catalogue import Probe
from attn_doctor.probes.observation import Observation
from attn_doctor.probes.runner import interpret

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(
    os.environ.get("ATTN_DOCTOR_RELEASE_CACHE", Path.home() / ".cache" / "attn-doctor" / "release-venvs")
)
TORCH = "torch==2.13.0"


def doctor_dependencies() -> list[str]:
    with (REPO / "pyproject.toml").open("rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def release_venv(*requirements: str) -> Path:
    """A venv with torch 2.13.0 and ``requirements`` installed; built on first use, then cached."""
    name = "_".join(sorted(requirements)).replace("==", "-").replace("/", "-")
    path = CACHE / name
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / ".ready").exists():
            shutil.rmtree(path, ignore_errors=True)
            _quietly([sys.executable, "-m", "venv", str(path)])
            pip = [str(path / "bin" / "python"), "-m", "pip", "install", "-q"]
            _quietly([*pip, TORCH])
            _quietly([*pip, TORCH, *requirements, *doctor_dependencies()])
            (path / ".ready").write_text("\n".join(requirements) + "\n")
    return path


def _quietly(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")


def _environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("VIRTUAL_ENV", None)
    return env


def run_doctor(
    venv: Path, *args: str, timeout_s: float = 600, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m attn_doctor ARGS`` with the venv's interpreter and this checkout's code."""
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "attn_doctor", *args],
        capture_output=True,
        text=True,
        env={**_environment(), **(extra_env or {})},
        timeout=timeout_s,
        cwd=REPO,
    )


def run_python(venv: Path, code: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """A snippet in the venv, with this checkout importable."""
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=timeout_s,
    )


@dataclass
class ProbeOutcome:
    observations: dict[str, Observation]  # by rule id
    wall_s: float
    stderr: str


def probe_in(venv: Path, probe: Probe, timeout_s: float = 180) -> ProbeOutcome:
    """One probe's child with the venv's interpreter, read by the real runner."""
    command = [str(venv / "bin" / "python"), "-m", "attn_doctor.probes.child", probe.module]
    started = time.perf_counter()
    output = run_child(command, _environment(), timeout_s)
    wall_s = time.perf_counter() - started
    found = {item.rule: item for item in interpret(probe, output, timeout_s)}
    return ProbeOutcome(found, wall_s, output.stderr)
