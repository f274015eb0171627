"""The unpadding gather and its metadata, including the 4-D mask of seed bug A."""

from __future__ import annotations

import pytest
import torch

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.metadata import check_indices, check_metadata
from attn_doctor.kernels.numerics import compare
from attn_doctor.kernels.unpad import gather_rows, reference, unpad_indices
from attn_doctor.kernels.varlen_attention import reference as attention_reference
from attn_doctor.kernels.varlen_attention import varlen_attention

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the host reads indices only for CPU tensors")


def padding_mask(lengths: list[int], seq: int, device: torch.device, left: bool = False) -> torch.Tensor:
    """[batch, seq] attention mask, 1 for the tokens kept (right padding, or left as in generation)."""
    positions = torch.arange(seq, device=device)
    lengths_t = torch.tensor(lengths, device=device)[:, None]
    keep = positions >= seq - lengths_t if left else positions < lengths_t
    return keep.to(torch.int64)


@pytest.mark.parametrize("left", [False, True])
def test_unpad_indices_mirrors_get_unpad_data(device, left):
    mask = padding_mask([3, 8, 0, 5], 8, device, left)
    indices, cu_seqlens, max_seqlen = unpad_indices(mask)
    assert indices.tolist() == [i for i, kept in enumerate(mask.flatten().tolist()) if kept]
    assert cu_seqlens.dtype == torch.int32 and cu_seqlens.tolist() == [0, 3, 11, 11, 16]
    assert max_seqlen == 8
    assert check_metadata(cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, 16, 16) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("features", [(4, 32), (3, 7), ()])
def test_gather_rows(device, seed, dtype, features):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 9, *features, generator=gen).to(device, dtype)
    indices, _, _ = unpad_indices(padding_mask([9, 2, 0, 6], 9, device, left=True))
    out = gather_rows(x, indices)
    assert out.shape == (17, *features)
    assert torch.equal(out, x.flatten(0, 1)[indices])
    result = compare(out, reference(x, indices), dtype)
    assert result.ok, f"seed {seed}: {result.describe()}"


def test_unpad_then_varlen_attention_matches_padded_attention(device, seed):
    """The FA2 path of transformers: unpad q, k, v with a 2-D mask, attend, compare per sequence."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [5, 17, 1, 12]
    mask = padding_mask(lengths, 17, device)
    q, k, v = (torch.randn(4, 17, 4, 32, generator=gen).to(device, torch.float16) for _ in range(3))
    indices, cu_seqlens, max_seqlen = unpad_indices(mask)
    q_u, k_u, v_u = (gather_rows(t, indices) for t in (q, k, v))
    out = varlen_attention(q_u, k_u, v_u, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True)
    ref = attention_reference(
        q_u, k_u, v_u, cu_seqlens, cu_seqlens, causal=True, window=(-1, -1), softcap=0.0, scale=None
    )
    result = compare(out, ref, torch.float16)
    assert result.ok, f"seed {seed}: {result.describe()}"


def test_seed_a_4d_mask_indices_run_past_the_rows(device):
    """A [B, 1, T, T] mask flattened by _get_unpad_data: indices up to B*T*T for B*T rows."""
    batch, seq = 2, 8
    mask = torch.ones(batch, 1, seq, seq, dtype=torch.int64, device=device).tril()
    indices, _, _ = unpad_indices(mask)
    assert int(indices.max()) == batch * seq * seq - 1
    problems = check_indices(indices.cpu(), batch * seq)
    assert len(problems) == 1 and "outside [0, 16)" in problems[0] and "4-D" in problems[0]


@cpu_only
def test_cpu_gather_refuses_4d_mask_indices():
    mask = torch.ones(2, 1, 8, 8, dtype=torch.int64).tril()
    indices, _, _ = unpad_indices(mask)
    with pytest.raises(MetadataError, match=r"69 of 72 indices fall outside \[0, 16\)"):
        gather_rows(torch.randn(2, 8, 4, 32), indices)


def test_check_indices():
    assert check_indices(torch.tensor([0, 15, 3]), 16) == []
    assert "outside [0, 16)" in check_indices(torch.tensor([-1, 3]), 16)[0]
    assert "1-D integer tensor" in check_indices(torch.tensor([[0, 1]]), 16)[0]


# --- GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
def test_gpu_larger_gather(device, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 1024, 16, 128, generator=gen).to(device, torch.bfloat16)
    lengths = torch.randint(0, 1025, (8,), generator=gen).tolist()
    indices, _, _ = unpad_indices(padding_mask(lengths, 1024, device, left=True))
    assert torch.equal(gather_rows(x, indices), x.flatten(0, 1)[indices])


_ASSERT_CHILD = """
import torch
from attn_doctor.kernels.unpad import gather_rows, unpad_indices
indices, _, _ = unpad_indices(torch.ones(2, 1, 8, 8, dtype=torch.int64, device="cuda").tril())
gather_rows(torch.randn(2, 8, 4, 32, device="cuda"), indices, debug=True)
torch.cuda.synchronize()
"""


@pytest.mark.gpu
@needs_cuda
def test_gpu_debug_gather_asserts_on_4d_mask_indices(asserts_on_device):
    asserts_on_device(_ASSERT_CHILD, "index out of bounds")
