"""Seed B: RotaryEmbedding(dim=model_dim) applied to [B, T, H, D] heads (fla issue #180).

rotary-dim-is-model-dim: cos/sin tables for rotary_dim = H * D = 256 on heads of D = 64: the
kernel addresses 4x past each head (past the tensor for the last one). fixed: rotary_dim = D.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.rotary import apply_rotary, reference
from attn_doctor.repro.cases._harness import DEBUG, compared, generator, randn, refused

BATCH, TOKENS, HEADS, HEAD_DIM = 2, 16, 4, 64


def tables(rotary_dim: int, positions: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [positions, rotary_dim / 2], as RotaryEmbedding(dim=rotary_dim) builds them."""
    inv_freq = 1.0 / (
        10000 ** (torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float32) / rotary_dim)
    )
    angles = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def run_case(case: str, device: str, seed: int) -> dict[str, Any]:
    rotary_dim = {"rotary-dim-is-model-dim": HEADS * HEAD_DIM, "fixed": HEAD_DIM}.get(case)
    if rotary_dim is None:
        raise ValueError(f"unknown case {case!r}")
    gen = generator(device, seed)
    x = randn(BATCH, TOKENS, HEADS, HEAD_DIM, gen=gen, device=device)
    cos, sin = tables(rotary_dim, TOKENS, device)
    try:
        out = apply_rotary(x, cos, sin, rotary_dim=rotary_dim, debug=DEBUG)
        if device == "cuda":
            torch.cuda.synchronize()
    except MetadataError as error:
        return refused(error)
    # what the model meant: rotate each head over its own dimension
    head_cos, head_sin = tables(HEAD_DIM, TOKENS, device)
    expected = reference(x, head_cos, head_sin, rotary_dim=HEAD_DIM)
    return compared(out, expected, seed, f"rotary_dim={rotary_dim}, head_dim={HEAD_DIM}: ")
