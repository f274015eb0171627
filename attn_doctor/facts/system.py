"""Python, operating system, C library and CUDA toolkit facts."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

TOOL_TIMEOUT_S = 5.0


def python_version() -> str:
    return platform.python_version()


def platform_family() -> str:
    if sys.platform.startswith("linux"):
        return "linux"
    if sys.platform.startswith(("win32", "cygwin")):
        return "windows"
    return sys.platform


def machine() -> str | None:
    return platform.machine() or None


def os_description() -> str:
    """``Linux 6.8.0-45-generic``: uname only (``platform.platform`` also reads the libc binary)."""
    uname = platform.uname()
    return f"{uname.system} {uname.release}"


def cpus() -> int | None:
    return os.cpu_count()


def memory_gb() -> float | None:
    """Physical memory in GiB (what a source build's parallel jobs share), from sysconf."""
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):
        return None


def libc() -> str | None:
    """``glibc 2.36`` from confstr, which costs nothing (``platform.libc_ver`` reads the binary)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None


class NvccProbe:
    """``nvcc --version`` started at once and read later, so it overlaps other work; its answer is
    cached by the binary's size and mtime (a toolkit does not change its version in place)."""

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._child: subprocess.Popen[str] | None = None
        self._known: str | None = None
        self._cache = None if cache_dir is None else cache_dir / "nvcc.json"
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            return
        self._key = _binary_key(nvcc)
        self._known = self._cached()
        if self._known is None:
            try:
                self._child = subprocess.Popen(
                    [nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
            except OSError:
                self._child = None

    def result(self) -> str | None:
        """The CUDA toolkit version; None when there is no nvcc (or it fails or hangs)."""
        if self._known is not None or self._child is None:
            return self._known
        try:
            out, _ = self._child.communicate(timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.communicate()
            return None
        match = re.search(r"release ([0-9]+\.[0-9]+)", out or "")  # ASCII, as an env file must hold it
        version = match.group(1) if match else None
        if version is not None:
            self._remember(version)
        return version

    def _cached(self) -> str | None:
        try:
            data = json.loads(self._cache.read_text(encoding="utf-8")) if self._cache else {}
            known = data.get(self._key) if isinstance(data, dict) else None
        except (OSError, ValueError, RecursionError):
            return None
        return known if isinstance(known, str) and re.fullmatch(r"[0-9]+\.[0-9]+", known) else None

    def _remember(self, version: str) -> None:
        if self._cache is None:
            return
        try:
            self._cache.parent.mkdir(parents=True, exist_ok=True)
            temporary = self._cache.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps({self._key: version}), encoding="utf-8")
            temporary.replace(self._cache)
        except OSError:
            pass  # a read-only cache folder: ask nvcc again next time


def _binary_key(path: str) -> str:
    try:
        stat = os.stat(path)
    except OSError:
        return path
    return f"{os.path.realpath(path)}:{stat.st_size}:{stat.st_mtime_ns}"


def start_nvcc_probe(cache_dir: Path | None = None) -> NvccProbe:
    return NvccProbe(cache_dir)
