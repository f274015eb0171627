"""Seed A: the unpadding metadata transformers 4.44.0 hands to flash_attn_varlen_func.

offset-position-ids: a plain batch of 2x8 tokens whose position_ids run 3..10 (a continuation)
takes 4.44.0's packed-sequence branch, which builds cu_seqlens = [16] and max_seqlen 11.
4d-mask-unpad: a 4-D [B, 1, T, T] mask flattened by _get_unpad_data gives gather indices up to
B*T*T - 1 for B*T rows. fixed: a 2-D mask with left padding, unpadded as 4.44.1 does.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.unpad import gather_rows, unpad_indices
from attn_doctor.kernels.varlen_attention import reference, varlen_attention
from attn_doctor.repro.cases._harness import DEBUG, compared, generator, randn, refused

BATCH, TOKENS, HEADS_Q, HEADS_KV, HEAD_DIM = 2, 8, 4, 2, 64


def cu_seqlens_from_position_ids(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """transformers 4.44.0 prepare_fa2_from_position_ids: a sequence starts where position is 0."""
    flat = position_ids.flatten()
    indices = torch.arange(flat.numel(), device=flat.device, dtype=torch.int32)
    total = torch.tensor([flat.numel()], device=flat.device, dtype=torch.int32)
    cu_seqlens = torch.cat((indices[flat == 0], total))
    return cu_seqlens, int(flat.max()) + 1


def run_case(case: str, device: str, seed: int) -> dict[str, Any]:
    gen = generator(device, seed)
    try:
        if case == "offset-position-ids":
            return _offset_position_ids(gen, seed, device)
        if case == "4d-mask-unpad":
            return _four_d_mask(gen, seed, device)
        if case == "fixed":
            return _two_d_mask(gen, seed, device)
    except MetadataError as error:
        return refused(error)
    raise ValueError(f"unknown case {case!r}")


def _offset_position_ids(gen: torch.Generator, seed: int, device: str) -> dict[str, Any]:
    total = BATCH * TOKENS
    q = randn(total, HEADS_Q, HEAD_DIM, gen=gen, device=device)
    k, v = (randn(total, HEADS_KV, HEAD_DIM, gen=gen, device=device) for _ in range(2))
    position_ids = torch.arange(3, 3 + TOKENS, device=device).repeat(BATCH, 1)
    cu_seqlens, max_seqlen = cu_seqlens_from_position_ids(position_ids)
    out = varlen_attention(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True, debug=DEBUG)
    # what the dense path (4.44.1) computes: two causal sequences of 8 tokens
    intended = torch.arange(0, total + 1, TOKENS, device=device, dtype=torch.int32)
    expected = reference(q, k, v, intended, intended, causal=True, window=(-1, -1), softcap=0.0, scale=None)
    return compared(out, expected, seed, f"cu_seqlens={cu_seqlens.tolist()}, max_seqlen={max_seqlen}: ")


def _four_d_mask(gen: torch.Generator, seed: int, device: str) -> dict[str, Any]:
    causal = torch.tril(torch.ones(TOKENS, TOKENS, device=device, dtype=torch.int32))
    mask_4d = causal.expand(BATCH, 1, TOKENS, TOKENS)
    indices, _, _ = unpad_indices(mask_4d)
    hidden = randn(BATCH, TOKENS, HEADS_Q * HEAD_DIM, gen=gen, device=device)
    gathered = gather_rows(hidden, indices, debug=DEBUG)
    if device == "cuda":
        torch.cuda.synchronize()
    return {
        "outcome": "mismatch",
        "seed": seed,
        "detail": f"gathered {gathered.shape[0]} rows from {BATCH * TOKENS} with indices up to "
        f"{int(indices.max())} and no error: the rows past the end are garbage",
    }


def _two_d_mask(gen: torch.Generator, seed: int, device: str) -> dict[str, Any]:
    mask = torch.ones(BATCH, TOKENS, device=device, dtype=torch.int32)
    mask[1, :3] = 0  # left padding, as a tokenizer pads for generation
    indices, cu_seqlens, max_seqlen = unpad_indices(mask)
    q_padded = randn(BATCH, TOKENS, HEADS_Q, HEAD_DIM, gen=gen, device=device)
    k_padded, v_padded = (randn(BATCH, TOKENS, HEADS_KV, HEAD_DIM, gen=gen, device=device) for _ in range(2))
    q, k, v = (gather_rows(t, indices, debug=DEBUG) for t in (q_padded, k_padded, v_padded))
    out = varlen_attention(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True, debug=DEBUG)
    expected = reference(
        q, k, v, cu_seqlens, cu_seqlens, causal=True, window=(-1, -1), softcap=0.0, scale=None
    )
    return compared(out, expected, seed, f"cu_seqlens={cu_seqlens.tolist()}, max_seqlen={max_seqlen}: ")
