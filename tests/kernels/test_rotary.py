"""apply_rotary against its float64 reference, and the checks that catch seed bug B (rotary_dim = H * D)."""

from __future__ import annotations

import itertools

import pytest
import torch

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.numerics import compare
from attn_doctor.kernels.rotary import apply_rotary, reference

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the host check runs for CPU tensors only")

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
HEADS, HEAD_DIM = 3, 40  # a head dim that is not a power of two: masked columns in every block
LENGTHS = [5, 0, 12, 3]  # packed: an empty sequence, one longer than a block of 16 tokens


def tables(positions: int, rotary_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [positions, rotary_dim / 2] as RotaryEmbedding(dim=rotary_dim) builds them."""
    inv_freq = 1.0 / 10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def cu(lengths: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def randn(*shape: int, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["dense", "packed"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [HEAD_DIM, 24], ids=["full", "partial"])
@pytest.mark.parametrize("offset", ["none", "int", "per-sequence"])
def test_matches_reference(device, seed, dtype, layout, interleaved, rotary_dim, offset):
    if layout == "dense":
        x = randn(2, 19, HEADS, HEAD_DIM, seed=seed, dtype=dtype, device=device)
        cu_seqlens, num_seqs = None, 2
    else:
        x = randn(1, sum(LENGTHS), HEADS, HEAD_DIM, seed=seed, dtype=dtype, device=device)
        cu_seqlens, num_seqs = cu(LENGTHS, device), len(LENGTHS)
    offsets = {
        "none": 0,
        "int": 7,
        "per-sequence": torch.arange(num_seqs, device=device) * 5 + 1,
    }[offset]
    cos, sin = tables(64, rotary_dim, device)
    options = {"interleaved": interleaved, "position_offset": offsets, "cu_seqlens": cu_seqlens}
    out = apply_rotary(x, cos, sin, rotary_dim=rotary_dim, **options)
    result = compare(out, reference(x, cos, sin, rotary_dim=rotary_dim, **options), dtype)
    assert result.ok, f"seed {seed}: {result.describe()}"
    assert torch.equal(out[..., rotary_dim:], x[..., rotary_dim:]), "pass-through columns changed"


def test_reference_rotates_pairs_by_the_position_angle():
    """The reference itself, on one pair: NeoX pairs (c, c + r/2), GPT-J pairs (2i, 2i + 1)."""
    cos, sin = tables(8, 4, torch.device("cpu"))
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)
    neox = reference(x, cos, sin, position_offset=3)[0, 0, 0]
    c, s = float(cos[3, 0]), float(sin[3, 0])
    assert neox[0].item() == pytest.approx(1 * c - 3 * s) and neox[2].item() == pytest.approx(1 * s + 3 * c)
    gptj = reference(x, cos, sin, position_offset=3, interleaved=True)[0, 0, 0]
    assert gptj[0].item() == pytest.approx(1 * c - 2 * s) and gptj[1].item() == pytest.approx(1 * s + 2 * c)


# seed B: fla's RotaryEmbedding(dim=model_dim) on [B, T, H, D] with H = 4, D = 64
SEED_B_HEADS, SEED_B_HEAD_DIM, SEED_B_TOKENS = 4, 64, 16


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@cpu_only
def test_seed_b_model_dim_refused_on_cpu(seed, interleaved):
    x = randn(2, SEED_B_TOKENS, SEED_B_HEADS, SEED_B_HEAD_DIM, seed=seed, dtype=torch.float16, device="cpu")
    cos, sin = tables(SEED_B_TOKENS, SEED_B_HEADS * SEED_B_HEAD_DIM, torch.device("cpu"))
    with pytest.raises(MetadataError, match=r"rotary_dim=256 exceeds head_dim=64 .*dim=model_dim"):
        apply_rotary(x, cos, sin, interleaved=interleaved, debug=True)
    with pytest.raises(MetadataError, match="rotary_dim=256 exceeds head_dim=64"):
        reference(x, cos, sin, interleaved=interleaved)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_seed_b_fixed_head_dim_matches(device, seed, dtype):
    x = randn(2, SEED_B_TOKENS, SEED_B_HEADS, SEED_B_HEAD_DIM, seed=seed, dtype=dtype, device=device)
    cos, sin = tables(SEED_B_TOKENS, SEED_B_HEAD_DIM, device)
    result = compare(apply_rotary(x, cos, sin, debug=True), reference(x, cos, sin), dtype)
    assert result.ok, f"seed {seed}: {result.describe()}"


@pytest.mark.parametrize(
    ("cu_values", "offset", "message"),
    [
        ([0, 8, 16], 9, r"positions 9\.\.16 fall outside the cos/sin table of 16 rows"),
        ([0, 8, 16], -1, r"positions -1\.\.6 fall outside"),
        ([3, 8, 16], 0, "cu_seqlens must rise from 0 to total=16"),
        ([0, 12, 8, 16], 0, "cu_seqlens must rise from 0 to total=16"),
        ([0, 8, 20], 0, "cu_seqlens must rise from 0 to total=16"),
    ],
)
@cpu_only
def test_host_check_refuses_bad_metadata(seed, cu_values, offset, message):
    x = randn(1, 16, 2, 32, seed=seed, dtype=torch.float32, device="cpu")
    cos, sin = tables(16, 32, torch.device("cpu"))
    with pytest.raises(MetadataError, match=message):
        apply_rotary(
            x, cos, sin, position_offset=offset, cu_seqlens=torch.tensor(cu_values, dtype=torch.int32)
        )


def test_cu_seqlens_without_a_sequence_is_refused(device, seed):
    """[16]: no leading 0, no sequence (what seed A's metadata looked like)."""
    x = randn(1, 16, 2, 32, seed=seed, dtype=torch.float32, device=device)
    cos, sin = tables(16, 32, device)
    with pytest.raises(ValueError, match="integer cu_seqlens"):
        apply_rotary(x, cos, sin, cu_seqlens=torch.tensor([16], dtype=torch.int32, device=device))


def test_rotary_dim_must_match_the_tables(device, seed):
    x = randn(1, 4, 2, 32, seed=seed, dtype=torch.float32, device=device)
    cos, sin = tables(4, 32, device)
    with pytest.raises(MetadataError, match="rotary_dim=31 but the cos/sin tables have 16 columns"):
        apply_rotary(x, cos, sin, rotary_dim=31)


@cpu_only
def test_per_sequence_offsets_past_the_table_refused(seed):
    x = randn(2, 8, 2, 32, seed=seed, dtype=torch.float32, device="cpu")
    cos, sin = tables(16, 32, torch.device("cpu"))
    with pytest.raises(MetadataError, match=r"positions 0\.\.16 fall outside"):
        apply_rotary(x, cos, sin, position_offset=torch.tensor([0, 9]))


_SEED_B_CHILD = """
import torch
from attn_doctor.kernels.rotary import apply_rotary
x = torch.randn(2, 16, 4, 64, device="cuda", dtype=torch.float16)
angles = torch.outer(torch.arange(16.0, device="cuda"), torch.rand(128, device="cuda"))
apply_rotary(x, angles.cos(), angles.sin(), interleaved={interleaved}, debug=True)
torch.cuda.synchronize()
"""


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.gpu
@needs_cuda
def test_gpu_seed_b_debug_mode_asserts_on_device(asserts_on_device, interleaved):
    asserts_on_device(
        _SEED_B_CHILD.format(interleaved=interleaved), "index out of bounds: rotary column >= head_dim"
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.gpu
@needs_cuda
def test_gpu_larger_packed_batch(device, seed, dtype, interleaved):
    lengths = [1, 300, 77, 1024, 513]
    x = randn(1, sum(lengths), 16, 128, seed=seed, dtype=dtype, device=device)
    cos, sin = tables(4096, 128, device)
    offsets = torch.tensor([0, 5, 100, 2000, 3000], device=device)
    options = {"interleaved": interleaved, "position_offset": offsets, "cu_seqlens": cu(lengths, device)}
    result = compare(apply_rotary(x, cos, sin, **options), reference(x, cos, sin, **options), dtype)
    assert result.ok, f"seed {seed}: {result.describe()}"
