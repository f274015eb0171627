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


def nvcc_version() -> str | None:
    """The CUDA toolkit version from ``nvcc --version``; None when there is no nvcc."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    try:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None
