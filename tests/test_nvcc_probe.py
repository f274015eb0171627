"""The CUDA toolkit fact: `nvcc --version` read from a real child process, cached by the binary."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from attn_doctor.facts.system import start_nvcc_probe


@pytest.fixture
def fake_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An nvcc on PATH that prints a release line and counts its runs."""
    bin_dir, runs = tmp_path / "bin", tmp_path / "runs"
    bin_dir.mkdir()

    def install(release: str) -> Path:
        script = bin_dir / "nvcc"
        script.write_text(
            f"#!/bin/sh\necho x >> {runs}\necho 'Cuda compilation tools, release {release}, V{release}.41'\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        return script

    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return install, (lambda: len(runs.read_text().splitlines()) if runs.exists() else 0)


def test_version_is_read_then_cached_by_the_binary(fake_nvcc, tmp_path: Path):
    install, runs = fake_nvcc
    install("12.4")
    cache = tmp_path / "cache"
    assert start_nvcc_probe(cache).result() == "12.4" and runs() == 1
    assert start_nvcc_probe(cache).result() == "12.4" and runs() == 1  # from the cache
    install("12.8.1")  # another toolkit at the same path: size and mtime change
    assert start_nvcc_probe(cache).result() == "12.8" and runs() == 2


def test_without_a_cache_folder_nvcc_runs_each_time(fake_nvcc):
    install, runs = fake_nvcc
    install("13.0")
    assert start_nvcc_probe(None).result() == "13.0"
    assert start_nvcc_probe(None).result() == "13.0" and runs() == 2


def test_a_corrupt_cache_is_ignored(fake_nvcc, tmp_path: Path):
    install, _ = fake_nvcc
    install("12.1")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "nvcc.json").write_text("[" * 10000)
    assert start_nvcc_probe(cache).result() == "12.1"
