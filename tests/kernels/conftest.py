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
def asserts_on_device():
    """Run Python code in a fresh process under CUDA_LAUNCH_BLOCKING=1 (a device assert kills its
    context) and check that it died of a device-side assert whose message holds ``message``."""

    def run(code: str, message: str) -> None:
        env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
        )
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert "device-side assert triggered" in output, output
        assert message in output, output

    return run
