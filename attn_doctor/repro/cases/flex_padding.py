"""Seed E: a flex_attention block mask built without the key length during cached generation.

transformers 4.51.0's make_flex_block_causal_mask padded the mask to ``key_length``, which a
dynamic cache left as None; with the length taken from the queries instead, the mask covers the
new tokens only. missing-key-length: 44 new queries over 300 keys (256 cached), mask built for 44
keys. fixed: the mask built for the 300 keys, also checked against torch's own flex_attention.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_doctor.kernels.block_sparse import block_sparse_attention, build_block_mask, reference
from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.numerics import compare
from attn_doctor.repro.cases._harness import DEBUG, DTYPE, compared, generator, randn, refused

BATCH, HEADS, HEAD_DIM, CACHED, NEW = 1, 4, 64, 256, 44


def run_case(case: str, device: str, seed: int) -> dict[str, Any]:
    kv_len = CACHED + NEW
    mask_kv_len = {"missing-key-length": NEW, "fixed": kv_len}.get(case)
    if mask_kv_len is None:
        raise ValueError(f"unknown case {case!r}")
    gen = generator(device, seed)
    q = randn(BATCH, HEADS, NEW, HEAD_DIM, gen=gen, device=device)
    k, v = (randn(BATCH, HEADS, kv_len, HEAD_DIM, gen=gen, device=device) for _ in range(2))
    mask = build_block_mask(NEW, mask_kv_len, causal=True, device=device)
    try:
        out = block_sparse_attention(q, k, v, mask, debug=DEBUG)
        if device == "cuda":
            torch.cuda.synchronize()
    except MetadataError as error:
        return refused(error)
    expected = reference(q, k, v, causal=True)
    result = compared(out, expected, seed, f"mask for {mask_kv_len} keys, {kv_len} keys in the cache: ")
    if case == "fixed" and result["outcome"] == "match":
        result["detail"] += "; " + _against_flex_attention(q, k, v, out)
    return result


def _against_flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> str:
    """torch's own flex_attention on the same inputs, where this torch has it (2.5 and later)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return "torch has no flex_attention to compare with"
    offset = k.shape[2] - q.shape[2]

    def causal_with_cache(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return kv_idx <= q_idx + offset

    block_mask = create_block_mask(
        causal_with_cache, None, None, q.shape[2], k.shape[2], device=str(q.device)
    )
    with torch.no_grad():
        theirs = flex_attention(q, k, v, block_mask=block_mask)
    agreement = compare(out, theirs.to(torch.float64), DTYPE)
    if not agreement.ok:
        raise AssertionError(f"block-sparse kernel and torch flex_attention disagree: {agreement.describe()}")
    return f"torch flex_attention agrees: {agreement.describe()}"
