"""Rotary position embedding (RoPE), addressed the way flash-linear-attention's kernel addresses it.

fla's ``rotary_embedding_kernel`` reads column c < rotary_dim of a head at
``x + token * H*D + head * D + c``: nothing ties c to the head dimension. With
``RotaryEmbedding(dim=model_dim)`` (seed B) rotary_dim is H*D, so every head reads and writes
into the heads after it and the last head runs past the tensor: an illegal memory access on a
GPU. This kernel keeps that addressing so the bug reproduces; in debug mode a device assert
names it, and before a CPU (interpreter) launch the host check refuses it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.interpreter import adopt_squeeze, launch_options
from attn_doctor.kernels.numerics import poisoned

adopt_squeeze()

BLOCK_T = 16  # tokens per program


@triton.jit
def _rotary_kernel(
    x,
    cos,
    sin,
    y,
    cu_seqlens,
    offsets,
    T,
    TABLE_LEN,
    OFFSET,
    H: tl.constexpr,
    D: tl.constexpr,
    R: tl.constexpr,
    BT: tl.constexpr,
    BR: tl.constexpr,
    BD: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    OFFSET_PER_SEQ: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):
    """One program: BT tokens of one head of one sequence. R is rotary_dim / 2."""
    i_t = tl.program_id(0)
    i_n = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        tl.device_assert((bos >= 0) & (bos <= eos) & (eos <= T), "index out of bounds: cu_seqlens")
        seq_len = eos - bos
    else:
        bos = i_n * T
        seq_len = T
    if OFFSET_PER_SEQ:
        offset = tl.load(offsets + i_n).to(tl.int64)
    else:
        offset = OFFSET

    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < seq_len
    pos = o_t + offset
    tl.device_assert(
        ((pos >= 0) & (pos < TABLE_LEN)) | (m_t == 0), "index out of bounds: position >= table length"
    )
    row = (bos + o_t) * (H * D) + i_h * D  # a head's row stride: what fla does

    if not INTERLEAVED:
        # NeoX: column c pairs with c + R
        o_r = tl.arange(0, BR)
        mask = m_t[:, None] & (o_r < R)[None, :]
        tl.device_assert(
            (o_r[None, :] + R < D) | (mask == 0), "index out of bounds: rotary column >= head_dim"
        )
        p_x = x + row[:, None] + o_r[None, :]
        p_cs = pos[:, None] * R + o_r[None, :]
        b_cos = tl.load(cos + p_cs, mask=mask, other=1.0).to(tl.float32)
        b_sin = tl.load(sin + p_cs, mask=mask, other=0.0).to(tl.float32)
        b_x0 = tl.load(p_x, mask=mask, other=0.0).to(tl.float32)
        b_x1 = tl.load(p_x + R, mask=mask, other=0.0).to(tl.float32)
        p_y = y + row[:, None] + o_r[None, :]
        tl.store(p_y, (b_x0 * b_cos - b_x1 * b_sin).to(y.dtype.element_ty), mask=mask)
        tl.store(p_y + R, (b_x0 * b_sin + b_x1 * b_cos).to(y.dtype.element_ty), mask=mask)
    else:
        # GPT-J: column 2i pairs with 2i + 1
        o_d = tl.arange(0, BR)
        o_swap = o_d ^ 1
        mask = m_t[:, None] & (o_d < 2 * R)[None, :]
        tl.device_assert(
            ((o_d[None, :] < D) & (o_swap[None, :] < D)) | (mask == 0),
            "index out of bounds: rotary column >= head_dim",
        )
        p_cs = pos[:, None] * R + (o_d // 2)[None, :]
        b_cos = tl.load(cos + p_cs, mask=mask, other=1.0).to(tl.float32)
        b_sin = tl.load(sin + p_cs, mask=mask, other=0.0).to(tl.float32)
        b_x0 = tl.load(x + row[:, None] + o_d[None, :], mask=mask, other=0.0).to(tl.float32)
        b_x1 = tl.load(x + row[:, None] + o_swap[None, :], mask=mask, other=0.0).to(tl.float32)
        b_y = tl.where((o_d % 2 == 0)[None, :], b_x0 * b_cos - b_x1 * b_sin, b_x0 * b_cos + b_x1 * b_sin)
        tl.store(y + row[:, None] + o_d[None, :], b_y.to(y.dtype.element_ty), mask=mask)

    # partial rotary: columns rotary_dim..D-1 pass through
    o_p = tl.arange(0, BD)
    m_p = m_t[:, None] & ((o_p >= 2 * R) & (o_p < D))[None, :]
    b_p = tl.load(x + row[:, None] + o_p[None, :], mask=m_p)
    tl.store(y + row[:, None] + o_p[None, :], b_p, mask=m_p)


def apply_rotary(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    rotary_dim: int | None = None,
    interleaved: bool = False,
    position_offset: int | torch.Tensor = 0,
    cu_seqlens: torch.Tensor | None = None,
    debug: bool = False,
) -> torch.Tensor:
    """RoPE on x [B, T, H, D] (or packed [1, total, H, D] with cu_seqlens [N + 1]).

    cos and sin are [max_pos, rotary_dim / 2]; token t of a sequence uses row t + offset
    (position_offset: an int, or one per sequence). Columns from rotary_dim on pass through.
    On a GPU the metadata is not checked, as in fla: ``debug=True`` compiles the device asserts.
    """
    _check_shapes(x, cos, sin, rotary_dim, position_offset, cu_seqlens)
    if x.device.type == "cpu":
        _check_metadata(x, cos, rotary_dim, position_offset, cu_seqlens)
    _, total, heads, head_dim = x.shape
    half = cos.shape[1]
    per_seq = isinstance(position_offset, torch.Tensor)
    num_seqs = x.shape[0] if cu_seqlens is None else cu_seqlens.numel() - 1
    x = x.contiguous()
    y = poisoned(x.shape, x.dtype, x.device)
    grid = (triton.cdiv(total, BLOCK_T), num_seqs, heads)
    _rotary_kernel[grid](
        x,
        cos.contiguous(),
        sin.contiguous(),
        y,
        cu_seqlens,
        position_offset if per_seq else None,
        total,
        cos.shape[0],
        0 if per_seq else int(position_offset),
        H=heads,
        D=head_dim,
        R=half,
        BT=BLOCK_T,
        BR=triton.next_power_of_2(2 * half if interleaved else half),
        BD=triton.next_power_of_2(head_dim),
        IS_VARLEN=cu_seqlens is not None,
        OFFSET_PER_SEQ=per_seq,
        INTERLEAVED=interleaved,
        **launch_options(debug),
    )
    return y


def reference(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    rotary_dim: int | None = None,
    interleaved: bool = False,
    position_offset: int | torch.Tensor = 0,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same rotation in float64 with PyTorch indexing; refuses what the host check refuses."""
    _check_shapes(x, cos, sin, rotary_dim, position_offset, cu_seqlens)
    _check_metadata(x, cos, rotary_dim, position_offset, cu_seqlens)
    half = cos.shape[1]
    pos = _positions(x, position_offset, cu_seqlens).to(x.device)
    c = cos.to(torch.float64)[pos].unsqueeze(2)  # [B, T, 1, R]
    s = sin.to(torch.float64)[pos].unsqueeze(2)
    xd = x.to(torch.float64)
    if interleaved:
        x0, x1 = xd[..., 0 : 2 * half : 2], xd[..., 1 : 2 * half : 2]
        rotated = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    else:
        x0, x1 = xd[..., :half], xd[..., half : 2 * half]
        rotated = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return torch.cat((rotated, xd[..., 2 * half :]), dim=-1)


def _positions(x: torch.Tensor, offset: int | torch.Tensor, cu_seqlens: torch.Tensor | None) -> torch.Tensor:
    """Table row of every token, [B, T] (int64, CPU)."""
    batch, total = x.shape[0], x.shape[1]
    if cu_seqlens is None:
        starts = offset.cpu().long().view(-1, 1) if isinstance(offset, torch.Tensor) else offset
        return (torch.arange(total).view(1, -1) + starts).expand(batch, total)
    bounds = cu_seqlens.cpu().long().tolist()
    offsets = (
        offset.cpu().long().tolist() if isinstance(offset, torch.Tensor) else [offset] * (len(bounds) - 1)
    )
    rows = [torch.arange(end - start) + off for start, end, off in zip(bounds[:-1], bounds[1:], offsets)]
    return torch.cat(rows).view(1, total)


def _check_shapes(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rotary_dim: int | None,
    offset: int | torch.Tensor,
    cu_seqlens: torch.Tensor | None,
) -> None:
    """Shapes the launcher relies on everywhere (seed B's rotary_dim > head_dim is not one of them)."""
    if x.dim() != 4:
        raise ValueError(f"x must be [B, T, H, D], got shape {tuple(x.shape)}")
    if cos.dim() != 2 or cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must both be [max_pos, rotary_dim / 2], got {tuple(cos.shape)} "
            f"and {tuple(sin.shape)}"
        )
    if rotary_dim is not None and rotary_dim != 2 * cos.shape[1]:
        raise MetadataError(
            f"rotary_dim={rotary_dim} but the cos/sin tables have {cos.shape[1]} columns "
            f"(rotary_dim / 2 expected)"
        )
    if cu_seqlens is not None and (
        x.shape[0] != 1 or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.is_floating_point()
    ):
        raise ValueError(
            f"packed input needs x [1, total, H, D] and integer cu_seqlens [N + 1], got x "
            f"{tuple(x.shape)} and cu_seqlens {tuple(cu_seqlens.shape)}"
        )
    num_seqs = x.shape[0] if cu_seqlens is None else cu_seqlens.numel() - 1
    if isinstance(offset, torch.Tensor) and (offset.shape != (num_seqs,) or offset.is_floating_point()):
        raise ValueError(
            f"a per-sequence position_offset must be an integer tensor [{num_seqs}], "
            f"got {offset.dtype} {tuple(offset.shape)}"
        )


def _check_metadata(
    x: torch.Tensor,
    cos: torch.Tensor,
    rotary_dim: int | None,
    offset: int | torch.Tensor,
    cu_seqlens: torch.Tensor | None,
) -> None:
    """Every index the kernel derives stays in bounds: what the debug device asserts check on a GPU."""
    _, total, heads, head_dim = x.shape
    rotary = 2 * cos.shape[1] if rotary_dim is None else rotary_dim
    if rotary > head_dim:
        hint = (
            f" (= heads * head_dim: the rotary embedding was built with dim=model_dim instead of "
            f"dim=head_dim={head_dim})"
            if rotary == heads * head_dim
            else ""
        )
        raise MetadataError(
            f"rotary_dim={rotary} exceeds head_dim={head_dim}{hint}: columns up to "
            f"{rotary - 1} of a head would be addressed past the head, and past the "
            f"tensor for the last head"
        )
    if cu_seqlens is not None:
        bounds = cu_seqlens.cpu().long()
        if bounds[0] != 0 or bounds[-1] != total or bool((bounds.diff() < 0).any()):
            raise MetadataError(
                f"cu_seqlens must rise from 0 to total={total} without decreasing, got {bounds.tolist()}"
            )
    pos = _positions(x, offset, cu_seqlens)
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= cos.shape[0]):
        raise MetadataError(
            f"positions {int(pos.min())}..{int(pos.max())} fall outside the cos/sin "
            f"table of {cos.shape[0]} rows"
        )
