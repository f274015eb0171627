"""What every case needs: a generator seeded by the parent, and its outcome as the child reports it."""

from __future__ import annotations

import os
from typing import Any

import torch

from attn_doctor.kernels.numerics import compare

DTYPE = torch.float16  # the same on the CPU interpreter and the GPU, so verdicts can agree
# Kernels run with their device asserts, except under compute-sanitizer: there the bad access
# itself must happen for memcheck to name it.
DEBUG = os.environ.get("ATTN_DOCTOR_KERNEL_DEBUG", "1") != "0"


def generator(device: str, seed: int) -> torch.Generator:
    """Random inputs, never zeros, from the seed the parent drew (fresh each run; the rerun
    command passes the same one, and the detail names it)."""
    return torch.Generator(device=device).manual_seed(seed)


def randn(*shape: int, gen: torch.Generator, device: str) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(DTYPE)


def compared(output: torch.Tensor, reference: torch.Tensor, seed: int, note: str = "") -> dict[str, Any]:
    result = compare(output, reference, DTYPE)
    return {
        "outcome": "match" if result.ok else "mismatch",
        "detail": f"{note}{result.describe()} (fp16, seed {seed})",
        "max_abs_error": result.max_abs_error,
        "max_rel_error": result.max_rel_error,
    }


def refused(error: Exception) -> dict[str, Any]:
    return {"outcome": "refused", "detail": str(error)}
