"""Kernel tests: on the GPU where there is one, else on the CPU through Triton's interpreter.

Triton reads TRITON_INTERPRET when a kernel is decorated, so it is set here, before any test
module imports attn_doctor.kernels.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if CUDA else "cpu")


@pytest.fixture
def seed() -> int:
    """A fresh seed per test, passed to a torch.Generator; failure messages print it to replay."""
    return random.SystemRandom().randrange(2**31)


@pytest.fixture
def child():
    """Run Python code in a fresh process under CUDA_LAUNCH_BLOCKING=1: a device assert kills its context."""

    def run(code: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
        )

    return run
