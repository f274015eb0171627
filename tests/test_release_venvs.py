"""The release-venv cache keeps one copy of each file and stays under its budget (the first run of
the suite used 38 GB when every release venv held its own torch)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tests import release_venvs


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(release_venvs, "CACHE", tmp_path)
    monkeypatch.setattr(release_venvs, "STORE", tmp_path / "store")
    monkeypatch.setattr(release_venvs, "THIN", tmp_path / "envs")
    monkeypatch.setattr(release_venvs, "STORE_LOCK", tmp_path / "store.lock")
    return tmp_path


def thin_venv(cache: Path, name: str, files: dict[str, bytes], last_used: float) -> Path:
    venv = cache / "envs" / name
    for relative, content in files.items():
        (venv / relative).parent.mkdir(parents=True, exist_ok=True)
        (venv / relative).write_bytes(content)
    release_venvs.deduplicate(venv)
    (venv / release_venvs.READY).write_text(name)
    os.utime(venv / release_venvs.READY, (last_used, last_used))
    return venv


def test_identical_files_of_two_venvs_are_one_file_on_disk(cache: Path) -> None:
    payload = os.urandom(64 * 1024)
    first = thin_venv(cache, "a", {"site/numpy/core.so": payload, "site/a.py": b"a"}, 1)
    second = thin_venv(cache, "b", {"site/numpy/core.so": payload, "site/b.py": b"b"}, 2)
    assert (first / "site/numpy/core.so").stat().st_ino == (second / "site/numpy/core.so").stat().st_ino
    assert (second / "site/numpy/core.so").read_bytes() == payload
    assert (first / "site/a.py").stat().st_ino != (second / "site/b.py").stat().st_ino
    # the store and both venvs hold the payload once: 64 KiB, not 192
    assert release_venvs._disk_bytes(cache) < 2 * len(payload)


def test_same_bytes_with_another_mode_stay_apart(cache: Path) -> None:
    first = thin_venv(cache, "a", {"bin/tool": b"#!/bin/sh\n"}, 1)
    (cache / "envs" / "b" / "bin").mkdir(parents=True)
    (cache / "envs" / "b" / "bin" / "tool").write_bytes(b"#!/bin/sh\n")
    (cache / "envs" / "b" / "bin" / "tool").chmod(0o755)
    release_venvs.deduplicate(cache / "envs" / "b")
    assert (first / "bin/tool").stat().st_mode & 0o111 == 0
    assert (cache / "envs" / "b" / "bin" / "tool").stat().st_mode & 0o111


def test_over_budget_the_least_recently_used_venv_goes_and_its_files_with_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    oldest = thin_venv(cache, "old", {"lib.so": os.urandom(200_000)}, 1)
    middle = thin_venv(cache, "mid", {"lib.so": os.urandom(200_000)}, 2)
    newest = thin_venv(cache, "new", {"lib.so": os.urandom(200_000)}, 3)
    monkeypatch.setattr(release_venvs, "BUDGET_BYTES", 500_000)  # the three take about 600 kB
    release_venvs._evict(keep=newest)
    assert not oldest.exists() and middle.exists() and newest.exists()
    assert release_venvs._disk_bytes(cache) <= 500_000
    assert all(stored.stat().st_nlink == 2 for stored in (cache / "store").glob("*/*"))


def test_eviction_spares_the_venv_just_built_and_those_in_use(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_use = thin_venv(cache, "in-use", {"lib.so": os.urandom(200_000)}, 1)
    idle = thin_venv(cache, "idle", {"lib.so": os.urandom(200_000)}, 2)
    built = thin_venv(cache, "built", {"lib.so": os.urandom(200_000)}, 0)  # oldest mtime, just built
    monkeypatch.setattr(release_venvs, "BUDGET_BYTES", 100_000)
    with (cache / "envs" / "in-use.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # another test process holds it
        release_venvs._evict(keep=built)
    assert in_use.exists() and built.exists() and not idle.exists()
