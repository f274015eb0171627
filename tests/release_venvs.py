"""Real library releases in cached environments, for the tests that must meet the real thing.

Installing torch into every release's venv made the first run take about an hour and 38 GB, so:

- one **base** venv holds torch 2.13.0 (CPU, first and pinned) and the doctor's own dependencies;
- each set of releases gets a **thin** venv that sees the base through a ``.pth`` file and holds
  only what the releases add (pip, run for the thin venv, counts the base's packages as installed;
  one the releases need in another version is installed in the thin venv, which comes first);
- every file a thin venv installs is hard-linked to one copy in a content store, so numpy,
  tokenizers or a triton shared by several sets are on disk once;
- the cache keeps under a size budget (``ATTN_DOCTOR_RELEASE_CACHE_GB``, default 4): before a build
  it makes a gigabyte of room, after it comes back under the budget, by removing the thin venvs used
  longest ago (rebuilt when a test needs them again).

The doctor itself runs from this checkout through PYTHONPATH. Locks let concurrent test processes
share the cache: a build holds its venv's lock exclusively, a test using a venv holds it shared,
and eviction skips venvs in use. Builds are announced through ``announce`` (the conftest sends
those lines to the terminal, past pytest's capture), since a first run spends minutes in them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support import needs_package_index

from attn_doctor._compat import tomllib
from attn_doctor.isolation import run_child
from attn_doctor.probes.catalogue import Probe
from attn_doctor.probes.observation import Observation
from attn_doctor.probes.runner import interpret

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(
    os.environ.get("ATTN_DOCTOR_RELEASE_CACHE", Path.home() / ".cache" / "attn-doctor" / "release-envs")
)
BUDGET_BYTES = int(float(os.environ.get("ATTN_DOCTOR_RELEASE_CACHE_GB", "4")) * 1e9)
ROOM_BYTES = int(1e9)  # made before a build: a triton release's venv is most of a GB
OLD_LAYOUT = Path.home() / ".cache" / "attn-doctor" / "release-venvs"
TORCH = "torch==2.13.0"
BASE = CACHE / "base"
STORE = CACHE / "store"
THIN = CACHE / "envs"
STORE_LOCK = CACHE / "store.lock"  # one process at a time links into the store or removes from it
READY = ".ready"  # written last: a venv without it is a build that did not finish


def _silent(line: str) -> None:
    """Builds say nothing unless the conftest sets ``announce`` to a terminal writer."""


announce: Callable[[str], None] = _silent


def doctor_dependencies() -> list[str]:
    with (REPO / "pyproject.toml").open("rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


@contextmanager
def release_venv(*requirements: str) -> Iterator[Path]:
    """A venv with torch 2.13.0 and ``requirements`` installed, held (shared lock) while in use."""
    base = _base()
    name = "_".join(sorted(requirements)).replace("==", "-").replace("/", "-").replace("<", "-lt-")
    path = THIN / name
    THIN.mkdir(parents=True, exist_ok=True)
    with (THIN / f"{name}.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / READY).exists():
            _evict(keep=path, budget=BUDGET_BYTES - ROOM_BYTES)
            _build_thin(path, base, requirements)
            _evict(keep=path)
        (path / READY).touch()  # its mtime is the last use, for eviction
        fcntl.flock(lock, fcntl.LOCK_SH)  # a downgrade: builders and eviction wait, other users share
        yield path


def _base() -> Path:
    needs_package_index()
    if OLD_LAYOUT.is_dir():  # one full venv per release set: tens of GB that nothing reads any more
        announce(f"release venvs: removing {OLD_LAYOUT}, the earlier layout of this cache")
        shutil.rmtree(OLD_LAYOUT, ignore_errors=True)
    with _locked(CACHE / "base.lock"):
        if not (BASE / READY).exists():
            started = time.monotonic()
            announce(f"release venvs: building the base ({TORCH} and the doctor's dependencies) in {CACHE}")
            shutil.rmtree(BASE, ignore_errors=True)
            _quietly([sys.executable, "-m", "venv", str(BASE)])
            pip = [str(BASE / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
            _quietly([*pip, TORCH])  # first and alone: the CPU build on disk, never a CUDA one
            _quietly([*pip, TORCH, *doctor_dependencies()])
            deduplicate(BASE)  # a venv installed from the same wheels (the README's) shares its files
            (BASE / READY).write_text(TORCH + "\n")
            announce(f"release venvs: base ready in {time.monotonic() - started:.0f} s")
    return BASE


def _build_thin(path: Path, base: Path, requirements: tuple[str, ...]) -> None:
    started = time.monotonic()
    announce(f"release venvs: building {' '.join(requirements)}")
    shutil.rmtree(path, ignore_errors=True)
    _quietly([sys.executable, "-m", "venv", "--without-pip", str(path)])
    python, base_python = path / "bin" / "python", base / "bin" / "python"
    (_site_packages(python) / "_attn_doctor_release_base.pth").write_text(f"{_site_packages(base_python)}\n")
    # the base's pip installs for the thin venv's interpreter, which sees the base's packages
    pip = [str(base_python), "-m", "pip", "--python", str(python), "install", "-q", "--no-compile"]
    _quietly([*pip, TORCH, *requirements])
    deduplicate(path)
    (path / READY).write_text("\n".join(requirements) + "\n")
    announce(
        f"release venvs: built {' '.join(requirements)} in {time.monotonic() - started:.0f} s"
        f" (cache {_disk_bytes(CACHE) / 1e9:.1f} GB of {BUDGET_BYTES / 1e9:.1f})"
    )


def _site_packages(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    folder = Path(done.stdout.strip())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def deduplicate(path: Path) -> None:
    """Replace each regular file under ``path`` by a hard link to its one copy in the store (the
    base, the thin venvs and the README test's venv). A folder on another disk than the store
    (a cache moved by its variable) keeps its own copies."""
    STORE.mkdir(parents=True, exist_ok=True)
    if path.stat().st_dev != STORE.stat().st_dev:
        return
    with _locked(STORE_LOCK):
        _link_into_store(path)


def _link_into_store(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_symlink() or not file.is_file():
            continue
        digest = hashlib.sha256()
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        digest.update(oct(file.stat().st_mode & 0o777).encode())  # same bytes, other mode: another copy
        stored = STORE / digest.hexdigest()[:2] / digest.hexdigest()
        if stored.exists():
            staged = file.with_name(file.name + ".attn-doctor-link")
            os.link(stored, staged)
            os.replace(staged, file)
        else:
            stored.parent.mkdir(parents=True, exist_ok=True)
            os.link(file, stored)


def _evict(keep: Path, budget: int | None = None) -> None:
    """Remove the thin venvs used longest ago (not ``keep``, none in use) until under ``budget``
    (the cache's own by default)."""
    budget = BUDGET_BYTES if budget is None else budget
    with _locked(STORE_LOCK):
        if _disk_bytes(CACHE) > budget:
            _evict_locked(keep, budget)


def _evict_locked(keep: Path, budget: int) -> None:
    ready = sorted(THIN.glob(f"*/{READY}"), key=_mtime)
    for marker in ready:
        venv = marker.parent
        if venv == keep:
            continue
        with (THIN / f"{venv.name}.lock").open("a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another test process is using it
                continue
            shutil.rmtree(venv, ignore_errors=True)
        announce(f"release venvs: removed {venv.name} (least recently used; the cache's budget)")
        _drop_unlinked_store_files()
        if _disk_bytes(CACHE) <= budget:
            return


def _mtime(marker: Path) -> float:
    try:
        return marker.stat().st_mtime
    except FileNotFoundError:  # a venv being rebuilt: the newest, not a candidate
        return float("inf")


def _drop_unlinked_store_files() -> None:
    for stored in STORE.glob("*/*"):
        if stored.stat().st_nlink == 1:
            stored.unlink()


def _disk_bytes(folder: Path) -> int:
    """Disk used below ``folder``, each hard-linked file counted once."""
    seen: set[int] = set()
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                status = os.lstat(os.path.join(root, name))
            except FileNotFoundError:  # pip's own temporary files come and go during a build
                continue
            if status.st_ino not in seen:
                seen.add(status.st_ino)
                total += status.st_blocks * 512
    return total


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


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
    stderr: str


def probe_in(venv: Path, probe: Probe, timeout_s: float = 180) -> ProbeOutcome:
    """One probe's child with the venv's interpreter, read by the real runner (a child past
    ``timeout_s`` is a probe error; how long probes take is benchmarks/probe_wall_time.py's)."""
    command = [str(venv / "bin" / "python"), "-m", "attn_doctor.probes.child", probe.module]
    output = run_child(command, _environment(), timeout_s)
    found = {item.rule: item for item in interpret(probe, output, timeout_s)}
    return ProbeOutcome(found, output.stderr)
