"""Python, operating system, C library and CUDA toolkit facts."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys

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


def libc() -> str | None:
    """``glibc 2.36`` from confstr, which costs nothing (``platform.libc_ver`` reads the binary)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None


class NvccProbe:
    """``nvcc --version`` started at once and read later, so its 10-20 ms overlap other work."""

    def __init__(self) -> None:
        nvcc = shutil.which("nvcc")
        self._child: subprocess.Popen[str] | None = None
        if nvcc is not None:
            try:
                self._child = subprocess.Popen(
                    [nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
            except OSError:
                self._child = None

    def result(self) -> str | None:
        """The CUDA toolkit version; None when there is no nvcc (or it fails or hangs)."""
        if self._child is None:
            return None
        try:
            out, _ = self._child.communicate(timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.communicate()
            return None
        match = re.search(r"release (\d+\.\d+)", out or "")
        return match.group(1) if match else None


def start_nvcc_probe() -> NvccProbe:
    return NvccProbe()
