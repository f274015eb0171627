"""Shared test helpers: fake installed environments (dist-info folders), the CLI, rule files.

A fake site-packages folder is what cannot exist here (a CUDA torch, a flash-attn build): the
code under test reads it exactly as it reads a real one.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Site:
    path: Path

    def install(
        self,
        distribution: str,
        version: str | None,
        *,
        torch_cuda: str | None = "missing",
        metadata: str | None = None,
    ) -> Path:
        """A dist-info folder as pip leaves it; ``metadata`` overrides the METADATA text."""
        folder = self.path / f"{distribution.replace('-', '_')}-{version or 'x'}.dist-info"
        folder.mkdir(parents=True)
        text = (
            metadata
            if metadata is not None
            else f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
        )
        (folder / "METADATA").write_text(text)
        if torch_cuda != "missing":
            (self.path / "torch").mkdir(exist_ok=True)
            value = "None" if torch_cuda is None else repr(torch_cuda)
            (self.path / "torch" / "version.py").write_text(
                f"from typing import Optional\n__version__ = {version!r}\n"
                f"cuda: Optional[str] = {value}\nhip: Optional[str] = None\n"
            )
        return folder


def pytest_configure(config: pytest.Config) -> None:
    """Reports wrap at ``COLUMNS``: a test that wants a width sets it, none inherits one (a shell
    may export it, pytest-xdist sets 80 in its workers). Release venvs take minutes to build on a
    first run: say so on the terminal as it happens, past pytest's capture."""
    from tests import release_venvs

    os.environ.pop("COLUMNS", None)

    def to_terminal(line: str) -> None:
        capture = config.pluginmanager.getplugin("capturemanager")
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if capture is None:
            return
        with capture.global_and_fixture_disabled():
            if reporter is not None and not hasattr(config, "workerinput"):
                reporter.write_line(line)
            else:  # a pytest-xdist worker: its stderr is the terminal's
                print(line, file=sys.stderr, flush=True)

    release_venvs.announce = to_terminal


@pytest.fixture(autouse=True, scope="session")
def _scan_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The project-scan cache goes to a temporary folder, never the developer's home."""
    os.environ["ATTN_DOCTOR_CACHE"] = str(tmp_path_factory.mktemp("attn-doctor-cache"))


@pytest.fixture
def site(tmp_path: Path) -> Site:
    path = tmp_path / "site-packages"
    path.mkdir()
    return Site(path)


@pytest.fixture
def no_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No NVIDIA driver library for the probe in this process (the CLI runs in-process), as on a
    machine without the driver: a GPU workstation has one, found before nvidia-smi is asked."""
    monkeypatch.setattr(
        "attn_doctor.facts.gpus.NVML_LIBRARY", str(tmp_path / "no-driver" / "libnvidia-ml.so.1")
    )


@pytest.fixture
def no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_nvml: None) -> None:
    """No NVML and a PATH without nvidia-smi: the probe must find no GPU, on any machine."""
    bin_dir = tmp_path / "empty-bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_nvml: None):
    """Install an nvidia-smi script that prints ``rows`` (CSV) for the compute_cap query; with no
    NVML, so that it is what the probe reads."""

    def install(rows: str, *, knows_compute_cap: bool = True) -> None:
        bin_dir = tmp_path / "smi-bin"
        bin_dir.mkdir(exist_ok=True)
        script = bin_dir / "nvidia-smi"
        old_driver = 'case "$1" in *compute_cap*) echo "Field is not valid" >&2; exit 2;; esac\n'
        reject = "" if knows_compute_cap else old_driver
        script.write_text(f"#!/bin/sh\n{reject}cat <<'CSV'\n{rows}\nCSV\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")

    return install
