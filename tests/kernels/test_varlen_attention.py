"""varlen_attention against its float64 reference, and the metadata checks that catch seed bug A."""

from __future__ import annotations

import itertools

import pytest
import torch

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.metadata import check_metadata
from attn_doctor.kernels.numerics import compare
from attn_doctor.kernels.unpad import unpad_indices
from attn_doctor.kernels.varlen_attention import (
    AUTOTUNE_CONFIGS,
    SHARED_MEMORY_MARGIN,
    configs_that_fit,
    reference,
    shared_memory_estimate,
    varlen_attention,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the host reads cu_seqlens only for CPU tensors"
)

# ragged packed batches; in "cross" the key lengths differ (shorter, longer, equal, one sequence of one)
LENGTHS = {
    "self": ([1, 7, 16, 33], [1, 7, 16, 33]),
    "cross": ([1, 7, 16, 33], [1, 12, 9, 40]),
}
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def cu(lengths: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def check(
    device: torch.device,
    seed: int,
    *,
    dtype: torch.dtype = torch.float16,
    head_dim: int = 32,
    group: int = 2,
    heads_kv: int = 2,
    lengths: str = "cross",
    causal: bool = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    scale: float | None = None,
) -> None:
    """Fresh random q, k, v (never zeros) for the packed batch; kernel vs float64 reference."""
    lengths_q, lengths_k = LENGTHS[lengths] if isinstance(lengths, str) else lengths
    gen = torch.Generator().manual_seed(seed)

    def packed(tokens: int, heads: int) -> torch.Tensor:
        return torch.randn(tokens, heads, head_dim, generator=gen).to(device, dtype)

    q = packed(sum(lengths_q), heads_kv * group)
    k, v = packed(sum(lengths_k), heads_kv), packed(sum(lengths_k), heads_kv)
    cu_q, cu_k = cu(lengths_q, device), cu(lengths_k, device)
    options = {"causal": causal, "window": window, "softcap": softcap, "scale": scale}
    out = varlen_attention(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), **options)
    result = compare(out, reference(q, k, v, cu_q, cu_k, **options), dtype)
    assert result.ok, f"seed {seed}: {result.describe()}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_dtypes_and_head_dims(device, seed, dtype, head_dim):
    check(device, seed, dtype=dtype, head_dim=head_dim, causal=True)


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lengths", ["self", "cross"])
def test_grouped_query_heads_and_causal(device, seed, group, causal, lengths):
    check(device, seed, group=group, causal=causal, lengths=lengths)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("window", "causal"),
    [((4, -1), True), ((3, 5), False), ((0, 0), False), ((-1, 2), False), ((6, 100), True)],
)
def test_sliding_window(device, seed, dtype, window, causal):
    check(device, seed, dtype=dtype, window=window, causal=causal)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("softcap", [1.0, 30.0])
def test_softcap(device, seed, dtype, softcap):
    check(device, seed, dtype=dtype, softcap=softcap, causal=True, window=(8, -1), scale=0.3)


@pytest.mark.parametrize("head_dim", [16, 256])
def test_smallest_and_largest_head_dims(device, seed, head_dim):
    check(device, seed, dtype=torch.float32, head_dim=head_dim, group=1, heads_kv=1, causal=True)


# shared memory per block (opt-in), bytes, from NVIDIA's CUDA programming guide
SHARED_MEMORY = {"H100": 232448, "A100": 166912, "RTX 4090": 101376, "T4": 65536}


@pytest.mark.parametrize("gpu", SHARED_MEMORY)
@pytest.mark.parametrize("head_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("element_size", [2, 4])
def test_autotune_configs_fit_every_gpu(gpu, head_dim, element_size):
    """Every config the autotuner may try fits: one that does not fails the launch (an fp32 config
    at head dim 256 asked an H100 for 270 KB)."""
    kept = configs_that_fit(AUTOTUNE_CONFIGS, head_dim, element_size, SHARED_MEMORY[gpu])
    assert kept
    for config in kept:
        assert (
            shared_memory_estimate(config, head_dim, element_size) + SHARED_MEMORY_MARGIN
            <= SHARED_MEMORY[gpu]
        )


@pytest.mark.parametrize("head_dim", [64, 128])
def test_pruning_keeps_every_bf16_config_on_an_h100(head_dim):
    """The throughput in docs/performance.md was tuned over all of them."""
    assert configs_that_fit(AUTOTUNE_CONFIGS, head_dim, 2, SHARED_MEMORY["H100"]) == AUTOTUNE_CONFIGS


@pytest.mark.parametrize("causal", [False, True])
def test_empty_sequences(device, seed, causal):
    """A sequence with no keys gives zeros, as flash-attn does; one with no queries writes nothing."""
    check(device, seed, lengths=([0, 5, 3, 17], [4, 0, 3, 17]), causal=causal)


def test_strided_inputs(device, seed):
    """q, k, v as views into one packed qkv tensor, as models that project qkv at once pass them."""
    gen = torch.Generator().manual_seed(seed)
    lengths = LENGTHS["self"][0]
    qkv = torch.randn(sum(lengths), 3, 4, 64, generator=gen).to(device, torch.float16)
    q, k, v = qkv.unbind(1)
    cu_seqlens = cu(lengths, device)
    out = varlen_attention(q, k, v, cu_seqlens, cu_seqlens, max(lengths), max(lengths), causal=True)
    ref = reference(q, k, v, cu_seqlens, cu_seqlens, causal=True, window=(-1, -1), softcap=0.0, scale=None)
    result = compare(out, ref, torch.float16)
    assert result.ok, f"seed {seed}: {result.describe()}"


# --- metadata: seed bug A -------------------------------------------------------------------


def test_seed_a_cu_seqlens_without_leading_zero(device):
    """transformers 4.44.0 on 2x8 tokens at positions 3..10: cu_seqlens_q=[16], max_seqlen 11."""
    cu_seqlens = torch.tensor([16], dtype=torch.int32, device=device)
    problems = check_metadata(cu_seqlens, cu_seqlens, 11, 11, 16, 16)
    assert any("starts at 16, not 0" in p for p in problems)
    assert any("1 entry" in p for p in problems)
    q = torch.randn(16, 4, 32, device=device, dtype=torch.float16)
    with pytest.raises(MetadataError, match="cu_seqlens_q has 1 entry"):
        varlen_attention(q, q, q, cu_seqlens, cu_seqlens, 11, 11, causal=True)


@pytest.mark.parametrize(
    ("values", "max_seqlen", "expected"),
    [
        ([3, 8, 16], 8, "starts at 3, not 0"),
        ([0, 9, 5, 16], 11, "decreases at entry 2 (9 -> 5)"),
        ([0, 5, 12], 7, "ends at 12, not at the 16 packed tokens"),
        ([0, 8, 24], 16, "entries outside [0, 16]: [24]"),
        ([0, 16], 11, "max_seqlen for cu_seqlens_q is 11 but the longest sequence is 16"),
        ([0, 8, 16], 11, "max_seqlen for cu_seqlens_q is 11 but the longest sequence is 8"),
    ],
)
def test_check_metadata_names_each_problem(values, max_seqlen, expected):
    cu_seqlens = torch.tensor(values, dtype=torch.int32)
    problems = check_metadata(cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, 16, 16)
    assert any(expected in p for p in problems), problems


def test_check_metadata_accepts_consistent_metadata():
    cu_q, cu_k = cu([1, 7, 16, 33], torch.device("cpu")), cu([1, 12, 9, 40], torch.device("cpu"))
    assert check_metadata(cu_q, cu_k, 33, 40, 57, 62) == []


def test_check_metadata_layout():
    int64 = torch.tensor([0, 16])
    assert "must be a 1-D int32 tensor" in check_metadata(int64, int64.int(), 16, 16, 16, 16)[0]
    three = torch.tensor([0, 8, 16], dtype=torch.int32)
    assert check_metadata(three, three[:2], 8, 8, 16, 8) == ["cu_seqlens_q has 3 entries, cu_seqlens_k 2"]


def test_4d_mask_metadata(device):
    """A [B, 1, T, T] mask through _get_unpad_data gives cu_seqlens of shape [B, 1, T + 1]."""
    mask = torch.ones(2, 1, 8, 8, dtype=torch.int32, device=device).tril()
    _, cu_seqlens, max_seqlen = unpad_indices(mask)
    assert any(
        "must be a 1-D int32 tensor" in p
        for p in check_metadata(cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, 16, 16)
    )
    q = torch.randn(16, 2, 32, device=device, dtype=torch.float16)
    with pytest.raises(MetadataError, match=r"of shape \[2, 1, 9\]"):
        varlen_attention(q, q, q, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)


@cpu_only
def test_cpu_launch_refuses_inconsistent_metadata():
    q = torch.randn(16, 2, 32, dtype=torch.float16)
    cu_seqlens = torch.tensor([0, 16], dtype=torch.int32)
    with pytest.raises(MetadataError, match="longest sequence is 16"):
        varlen_attention(q, q, q, cu_seqlens, cu_seqlens, 11, 11)


def test_bad_shapes(device):
    cu_seqlens = torch.tensor([0, 16], dtype=torch.int32, device=device)
    q = torch.randn(16, 3, 32, device=device)
    with pytest.raises(ValueError, match="not a multiple"):
        varlen_attention(q, q[:, :2], q[:, :2], cu_seqlens, cu_seqlens, 16, 16)
    q = torch.randn(16, 2, 48, device=device)
    with pytest.raises(ValueError, match="power of two"):
        varlen_attention(q, q, q, cu_seqlens, cu_seqlens, 16, 16)


# --- GPU ------------------------------------------------------------------------------------

BIG = ([1, 127, 128, 129, 1000, 2051], [1, 200, 128, 64, 1000, 2100])


@pytest.mark.parametrize(
    ("dtype", "head_dim", "options"),
    [
        (torch.bfloat16, 64, {"causal": True}),
        (torch.bfloat16, 128, {"causal": True}),
        (torch.bfloat16, 128, {"causal": False}),
        (torch.float16, 128, {"causal": True, "window": (256, -1), "softcap": 50.0}),
        (torch.float16, 128, {"window": (100, 30)}),
        (torch.float32, 64, {"causal": True}),
        (torch.float16, 32, {"causal": True, "window": (64, -1)}),
        (torch.bfloat16, 256, {"causal": True}),
    ],
)
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.gpu
@needs_cuda
def test_gpu_larger_ragged_batches(device, seed, dtype, head_dim, options, group):
    check(device, seed, dtype=dtype, head_dim=head_dim, group=group, heads_kv=2, lengths=BIG, **options)


_ASSERT_CHILD = """
import torch
from attn_doctor.kernels.varlen_attention import varlen_attention
q = torch.randn(16, 4, 64, device="cuda", dtype=torch.float16)
cu = torch.tensor({values}, dtype=torch.int32, device="cuda")
varlen_attention(q, q, q, cu, cu, {max_seqlen}, {max_seqlen}, causal=True, debug=True)
torch.cuda.synchronize()
"""


@pytest.mark.parametrize(
    ("values", "max_seqlen", "message"),
    [([0, 8, 24], 16, "cu_seqlens_q"), ([0, 16], 11, "seqlen_q > max_seqlen_q")],
)
@pytest.mark.gpu
@needs_cuda
def test_gpu_debug_mode_asserts_on_device(asserts_on_device, values, max_seqlen, message):
    asserts_on_device(
        _ASSERT_CHILD.format(values=values, max_seqlen=max_seqlen), f"index out of bounds: {message}"
    )
