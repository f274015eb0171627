"""block_sparse_attention against its float64 reference and torch's flex_attention, and seed bug E."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from attn_doctor.kernels.block_sparse import (
    block_sparse_attention,
    build_block_mask,
    reference,
)
from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.numerics import compare

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the host check runs for CPU tensors only")

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
BLOCK = 32  # small blocks keep the interpreter fast; test_default_block_size_128 covers 128
LENGTHS = [(130, 200), (200, 130), (257, 257)]  # (q_len, kv_len), none a multiple of the block


def qkv(
    shape: tuple[int, int, int, int, int], seed: int, dtype: torch.dtype, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh random q [B, H, Sq, D], k and v [B, H, Skv, D] from shape (B, H, Sq, Skv, D)."""
    batch, heads, sq, skv, head_dim = shape
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, sq, head_dim, generator=gen)
    k, v = (torch.randn(batch, heads, skv, head_dim, generator=gen) for _ in range(2))
    return q.to(device, dtype), k.to(device, dtype), v.to(device, dtype)


def padded_lengths(kv_len: int, device: torch.device | str) -> torch.Tensor:
    """Per-batch key lengths for B = 2: one full, one padded mid-block."""
    return torch.tensor([kv_len, kv_len - 45], dtype=torch.int32, device=device)


def check(device, seed, dtype, sq, skv, *, causal, padding, block_size=BLOCK, head_dim=16, heads=1):
    q, k, v = qkv((2, heads, sq, skv, head_dim), seed, dtype, device)
    kv_lengths = padded_lengths(skv, device) if padding else None
    mask = build_block_mask(sq, skv, causal=causal, kv_lengths=kv_lengths, block_size=block_size)
    out = block_sparse_attention(q, k, v, mask)
    result = compare(out, reference(q, k, v, causal=causal, kv_lengths=kv_lengths), dtype)
    assert result.ok, f"seed {seed}: {result.describe()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("sq", "skv"), LENGTHS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padding", [False, True], ids=["", "padded"])
def test_matches_reference(device, seed, dtype, sq, skv, causal, padding):
    check(device, seed, dtype, sq, skv, causal=causal, padding=padding)


def test_default_block_size_128(device, seed):
    mask = build_block_mask(130, 257, causal=True)
    assert mask.block_size == 128 and mask.kv_indices.shape == (1, 1, 2, 3)
    check(device, seed, torch.float16, 130, 257, causal=True, padding=True, block_size=128, heads=2)


def test_rows_with_nothing_to_attend_give_zero(device, seed):
    """Causal with more queries than keys: the first queries see no key at all (flex returns 0)."""
    q, k, v = qkv((1, 1, 40, 20, 16), seed, torch.float32, device)
    out = block_sparse_attention(q, k, v, build_block_mask(40, 20, causal=True, block_size=16))
    assert torch.equal(out[0, 0, :20], torch.zeros_like(out[0, 0, :20]))
    result = compare(out, reference(q, k, v, causal=True), torch.float32)
    assert result.ok, f"seed {seed}: {result.describe()}"


def flex() -> tuple[Callable[..., torch.Tensor], Callable[..., object]]:
    """torch's flex_attention and create_block_mask, or a skip where torch has none (< 2.5)."""
    module = pytest.importorskip(
        "torch.nn.attention.flex_attention", reason="flex_attention needs torch >= 2.5"
    )
    return module.flex_attention, module.create_block_mask


def flex_mask_mod(sq: int, skv: int, causal: bool, kv_lengths: torch.Tensor | None):
    """The mask_mod that build_block_mask implements, written for create_block_mask."""

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = q_idx + (skv - sq) >= kv_idx if causal else q_idx >= 0
        return allowed & (kv_idx < kv_lengths[b]) if kv_lengths is not None else allowed

    return mask_mod


def run_flex(q, k, v, block_mask) -> torch.Tensor:
    flex_attention, _ = flex()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention warns when it runs uncompiled
        try:
            return flex_attention(q, k, v, block_mask=block_mask)
        except (RuntimeError, NotImplementedError) as error:
            pytest.skip(f"flex_attention does not run on {q.device.type} here: {error}")


@pytest.mark.parametrize(("sq", "skv"), LENGTHS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padding", [False, True], ids=["", "padded"])
def test_metadata_is_create_block_mask(device, sq, skv, causal, padding):
    _, create_block_mask = flex()
    kv_lengths = padded_lengths(skv, device) if padding else None
    theirs = create_block_mask(
        flex_mask_mod(sq, skv, causal, kv_lengths),
        2 if padding else None,
        None,
        sq,
        skv,
        device=device,
        BLOCK_SIZE=BLOCK,
    )
    ours = build_block_mask(sq, skv, causal=causal, kv_lengths=kv_lengths, block_size=BLOCK, device=device)
    for field in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(ours, field), getattr(theirs, field)), field


@pytest.mark.parametrize("dtype", [torch.float32], ids=str)
@pytest.mark.parametrize(("sq", "skv"), [(130, 200), (1, 257)])
def test_matches_flex_attention(device, seed, dtype, sq, skv):
    _, create_block_mask = flex()
    kv_lengths = padded_lengths(skv, device)
    q, k, v = qkv((2, 2, sq, skv, 32), seed, dtype, device)
    flex_mask = create_block_mask(
        flex_mask_mod(sq, skv, True, kv_lengths), 2, None, sq, skv, device=device, BLOCK_SIZE=BLOCK
    )
    expected = run_flex(q, k, v, flex_mask)
    mask = build_block_mask(sq, skv, causal=True, kv_lengths=kv_lengths, block_size=BLOCK)
    result = compare(block_sparse_attention(q, k, v, mask), expected, dtype)
    assert result.ok, f"seed {seed}: {result.describe()}"


# seed E: transformers 4.51.0 builds the flex mask during cached generation without key_length;
# the mask then covers the query length while the keys (cache + new tokens) are longer
SEED_E_LENGTHS = [(1, 200), (130, 257)]  # decoding one token; a chunk after a cache


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("sq", "skv"), SEED_E_LENGTHS)
def test_seed_e_mask_without_key_length_is_wrong(device, seed, dtype, sq, skv):
    q, k, v = qkv((2, 1, sq, skv, 16), seed, dtype, device)
    kv_lengths = padded_lengths(skv, device)
    missing = build_block_mask(sq, sq, causal=True, kv_lengths=kv_lengths, block_size=BLOCK)
    assert missing.kv_indices.shape[-1] < -(-skv // BLOCK)  # too few KV blocks to reach the keys
    out = block_sparse_attention(q, k, v, missing)
    result = compare(out, reference(q, k, v, causal=True, kv_lengths=kv_lengths), dtype)
    assert not result.ok and result.unwritten == 0, result.describe()  # silently wrong numbers


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("sq", "skv"), SEED_E_LENGTHS)
def test_seed_e_fixed_with_key_length_matches(device, seed, dtype, sq, skv):
    check(device, seed, dtype, sq, skv, causal=True, padding=True)


def test_seed_e_flex_attention_refuses_or_mismatches(device, seed):
    """torch's own entry point, given create_block_mask's mask built without the key length."""
    _, create_block_mask = flex()
    sq, skv = 130, 257
    q, k, v = qkv((1, 1, sq, skv, 16), seed, torch.float32, device)
    missing = create_block_mask(flex_mask_mod(sq, sq, True, None), None, None, sq, sq, device=device)
    try:
        out = run_flex(q, k, v, missing)
    except ValueError as error:
        assert "block_mask was created for" in str(error)
    else:
        assert not compare(out, reference(q, k, v, causal=True), torch.float32).ok


@cpu_only
def test_mask_longer_than_the_keys_is_refused(seed):
    """The other way round: built for 257 keys, used on 130: kv_indices list blocks past the keys."""
    q, k, v = qkv((1, 1, 130, 130, 16), seed, torch.float32, "cpu")
    too_long = build_block_mask(130, 257, causal=False, block_size=BLOCK)
    with pytest.raises(MetadataError, match=r"list block 8 .* keys of length 130 have 5 blocks of 32"):
        block_sparse_attention(q, k, v, too_long)


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda m: replace(m, kv_num_blocks=m.kv_num_blocks + 9), r"kv_num_blocks range .* room for 7"),
        (lambda m: replace(m, full_kv_num_blocks=m.full_kv_num_blocks - 1), r"full_kv_num_blocks range -1"),
        (lambda m: replace(m, kv_indices=m.kv_indices - 1), r"kv_indices list block .*\(min -1\)"),
        (lambda m: replace(m, kv_num_blocks=m.kv_num_blocks[..., :3]), "cover 3/5 query blocks"),
    ],
    ids=["count-past-max", "negative-count", "negative-index", "too-few-query-blocks"],
)
@cpu_only
def test_host_check_refuses_bad_metadata(seed, corrupt, message):
    q, k, v = qkv((2, 1, 130, 200, 16), seed, torch.float32, "cpu")
    mask = build_block_mask(130, 200, causal=True, kv_lengths=padded_lengths(200, "cpu"), block_size=BLOCK)
    with pytest.raises(MetadataError, match=message):
        block_sparse_attention(q, k, v, corrupt(mask))


def test_block_size_must_be_a_power_of_two(device, seed):
    q, k, v = qkv((1, 1, 40, 40, 16), seed, torch.float32, device)
    with pytest.raises(ValueError, match="power of two >= 16, got 24"):
        block_sparse_attention(q, k, v, build_block_mask(40, 40, causal=False, block_size=24))


_INDEX_CHILD = """
import torch
from attn_doctor.kernels.block_sparse import block_sparse_attention, build_block_mask
q = torch.randn(1, 2, 130, 64, device="cuda", dtype=torch.float16)
mask = build_block_mask(130, 300, causal=False, device="cuda")  # built for 300 keys, used on 130
block_sparse_attention(q, q, q, mask, debug=True)
torch.cuda.synchronize()
"""


@pytest.mark.gpu
@needs_cuda
def test_gpu_debug_mode_asserts_on_device(asserts_on_device):
    asserts_on_device(_INDEX_CHILD, "index out of bounds: kv_indices")


@pytest.mark.parametrize(
    ("dtype", "head_dim", "sq", "skv", "causal"),
    [
        (torch.bfloat16, 64, 1000, 1500, True),
        (torch.float16, 128, 1, 4097, True),
        (torch.bfloat16, 128, 777, 777, False),
        (torch.float32, 64, 300, 513, True),
    ],
)
@pytest.mark.gpu
@needs_cuda
def test_gpu_larger_shapes_block_128(device, seed, dtype, head_dim, sq, skv, causal):
    check(
        device, seed, dtype, sq, skv, causal=causal, padding=True, block_size=128, head_dim=head_dim, heads=4
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.gpu
@needs_cuda
def test_gpu_matches_flex_attention_block_128(device, seed, dtype):
    _, create_block_mask = flex()
    sq, skv = 1000, 1500
    kv_lengths = padded_lengths(skv, device)
    q, k, v = qkv((2, 4, sq, skv, 64), seed, dtype, device)
    flex_mask = create_block_mask(flex_mask_mod(sq, skv, True, kv_lengths), 2, None, sq, skv, device=device)
    mask = build_block_mask(sq, skv, causal=True, kv_lengths=kv_lengths)
    out = block_sparse_attention(q, k, v, mask)
    exact = compare(out, reference(q, k, v, causal=True, kv_lengths=kv_lengths), dtype)
    assert exact.ok, f"seed {seed}: {exact.describe()}"
    with_flex = compare(out, run_flex(q, k, v, flex_mask), dtype)
    assert with_flex.ok, f"seed {seed}: against flex_attention, {with_flex.describe()}"
