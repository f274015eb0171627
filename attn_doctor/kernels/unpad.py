"""Unpadding: the row gather before flash_attn_varlen_func, and the metadata that drives it.

transformers' `_get_unpad_data` turns a 2-D [batch, seq] mask into gather indices and cu_seqlens.
Handed a 4-D [batch, 1, seq, seq] mask instead (seed bug A), it flattens batch*seq*seq entries, so
the indices run far past the batch*seq rows being gathered: flash-attn's index_first_axis then
trips `index out of bounds`. gather_rows is that gather, with the bound checked.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.interpreter import adopt_squeeze
from attn_doctor.kernels.metadata import check_indices
from attn_doctor.kernels.numerics import poisoned
from attn_doctor.kernels.varlen_attention import INTERPRETED, require_launchable

adopt_squeeze()


@triton.jit
def _gather(
    X, IDX, OUT, n_idx, n_rows, n_cols, stride_x, stride_out, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_r = offs_r < n_idx
    idx = tl.load(IDX + offs_r, mask=in_r, other=0)
    tl.device_assert((in_r == 0) | ((idx >= 0) & (idx < n_rows)), "index out of bounds")
    mask = in_r[:, None] & (offs_c < n_cols)[None, :]
    row = tl.load(X + idx[:, None] * stride_x + offs_c[None, :], mask=mask)
    tl.store(OUT + offs_r[:, None].to(tl.int64) * stride_out + offs_c[None, :], row, mask=mask)


_gather_debug = triton.jit(debug=True)(_gather.fn)


def gather_rows(x: torch.Tensor, indices: torch.Tensor, debug: bool = False) -> torch.Tensor:
    """x [batch, seq, ...] -> x.flatten(0, 1)[indices], flash-attn's index_first_axis.

    On CPU tensors (the interpreter) check_indices runs first and MetadataError replaces the launch.
    On a GPU the host does not read the indices (a device sync); debug=True asserts each one there.
    """
    if x.dim() < 2:
        raise ValueError(f"x must be [batch, seq, ...], got shape {list(x.shape)}")
    if indices.device != x.device:
        raise ValueError(f"indices on {indices.device}, x on {x.device}")
    require_launchable(x.device)
    rows = x.reshape(x.shape[0] * x.shape[1], -1)
    if rows.stride(1) != 1:
        rows = rows.contiguous()
    if x.device.type == "cpu":
        problems = check_indices(indices, rows.shape[0])
        if problems:
            raise MetadataError("; ".join(problems))
    out = poisoned((indices.numel(), rows.shape[1]), x.dtype, x.device)
    block_r, block_c = (16, 64) if INTERPRETED else (32, 128)
    grid = (triton.cdiv(indices.numel(), block_r), triton.cdiv(rows.shape[1], block_c))
    if out.numel():
        kernel = _gather_debug if debug else _gather
        kernel[grid](
            rows,
            indices,
            out,
            indices.numel(),
            rows.shape[0],
            rows.shape[1],
            rows.stride(0),
            out.stride(0),
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
    return out.reshape(indices.numel(), *x.shape[2:])


def unpad_indices(mask_2d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """transformers' `_get_unpad_data`, kept as it is (no shape check) so a 4-D mask misbehaves the same.

    Returns (indices of kept tokens in the flattened mask, cu_seqlens with a leading 0, max_seqlen).
    """
    seqlens = mask_2d.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask_2d.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    return indices, cu_seqlens, max_seqlen


def reference(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The gather in float64 on the CPU, by PyTorch indexing."""
    return x.detach().to("cpu", torch.float64).flatten(0, 1)[indices.cpu()]
