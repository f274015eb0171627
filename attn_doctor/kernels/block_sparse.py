"""Block-sparse attention forward over the metadata torch's flex_attention ``BlockMask`` stores.

A program handles one query block: it visits the KV blocks listed for it, applying the mask
(causal, key padding) only on partial blocks, as flex's kernel does. The lengths the mask was
built for decide which blocks are listed: transformers 4.51.0 built its flex mask during cached
generation without the key length (seed E), so the mask covers the query length and the kernel
never visits the later keys; a mask built longer than the keys lists blocks past them, which the
debug device asserts and the CPU host check refuse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.interpreter import adopt_squeeze, launch_options
from attn_doctor.kernels.numerics import poisoned

adopt_squeeze()


@dataclass(frozen=True)
class BlockSparseMask:
    """The fields of flex's BlockMask; batch and head dims are 1 where the mask broadcasts."""

    kv_num_blocks: torch.Tensor  # [B, H, num_q_blocks] int32: partial blocks per query block
    kv_indices: torch.Tensor  # [B, H, num_q_blocks, max_kv_blocks] int32
    full_kv_num_blocks: torch.Tensor  # the same for blocks where every pair attends
    full_kv_indices: torch.Tensor
    block_size: int
    q_len: int  # the lengths the mask was built for: the causal diagonal is aligned on them
    kv_len: int
    causal: bool
    kv_lengths: torch.Tensor | None  # [B] int32: keys at or past kv_lengths[b] are padding


@triton.jit
def _attend(
    acc,
    m_i,
    l_i,
    b_q,
    k_head,
    v_head,
    kb,
    kv_len,
    offs_m,
    offs_n,
    offs_d,
    SKV,
    CAUSAL_SHIFT,
    sm_scale,
    D: tl.constexpr,
    BS: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_KV_LENGTHS: tl.constexpr,
    BF16_AS_FP32: tl.constexpr,
):
    """Online-softmax step over KV block kb; MASKED applies the mask_mod (partial blocks)."""
    offs_kv = kb * BS + offs_n
    in_kv = offs_kv < SKV  # the padded tail of the last block
    m_kd = in_kv[:, None] & (offs_d < D)[None, :]
    b_k = tl.load(k_head + offs_kv[:, None] * D + offs_d[None, :], mask=m_kd, other=0.0)
    b_v = tl.load(v_head + offs_kv[:, None] * D + offs_d[None, :], mask=m_kd, other=0.0)
    if BF16_AS_FP32:
        b_k, b_v = b_k.to(tl.float32), b_v.to(tl.float32)
    s = tl.dot(b_q, tl.trans(b_k), input_precision="ieee") * sm_scale
    valid = in_kv[None, :]
    if MASKED:
        if CAUSAL:
            valid = valid & (offs_m[:, None] + CAUSAL_SHIFT >= offs_kv[None, :])
        if HAS_KV_LENGTHS:
            valid = valid & (offs_kv < kv_len)[None, :]
    s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing to attend yet
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(b_v.dtype), b_v, input_precision="ieee")
    return acc, m_new, l_i


@triton.jit
def _block_sparse_kernel(
    q,
    k,
    v,
    o,
    kv_num_blocks,
    kv_indices,
    full_kv_num_blocks,
    full_kv_indices,
    kv_lengths,
    SQ,
    SKV,
    NUM_Q_BLOCKS,
    NUM_KV_BLOCKS,
    MAX_KV_BLOCKS,
    MAX_FULL_KV_BLOCKS,
    CAUSAL_SHIFT,
    sm_scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    BD: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_KV_LENGTHS: tl.constexpr,
    BF16_AS_FP32: tl.constexpr,
):
    """One program: query block program_id(0) of (batch, head) program_id(1)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    tl.device_assert(pid_m < NUM_Q_BLOCKS, "index out of bounds: query block >= mask rows")
    row = pid_bh * NUM_Q_BLOCKS + pid_m  # the mask's row for this query block
    offs_m = pid_m * BS + tl.arange(0, BS)
    offs_n = tl.arange(0, BS)
    offs_d = tl.arange(0, BD)
    q_head = q + pid_bh * SQ * D
    k_head = k + pid_bh * SKV * D
    v_head = v + pid_bh * SKV * D
    m_qd = (offs_m < SQ)[:, None] & (offs_d < D)[None, :]
    b_q = tl.load(q_head + offs_m[:, None] * D + offs_d[None, :], mask=m_qd, other=0.0)
    if BF16_AS_FP32:
        b_q = b_q.to(tl.float32)
    kv_len = SKV
    if HAS_KV_LENGTHS:
        kv_len = tl.load(kv_lengths + pid_bh // H)

    m_i = tl.full([BS], float("-inf"), tl.float32)
    l_i = tl.zeros([BS], tl.float32)
    acc = tl.zeros([BS, BD], tl.float32)
    n = tl.load(kv_num_blocks + row)
    tl.device_assert((n >= 0) & (n <= MAX_KV_BLOCKS), "index out of bounds: kv_num_blocks > max")
    for j in range(0, n):
        kb = tl.load(kv_indices + row * MAX_KV_BLOCKS + j)
        tl.device_assert((kb >= 0) & (kb < NUM_KV_BLOCKS), "index out of bounds: kv_indices")
        acc, m_i, l_i = _attend(
            acc,
            m_i,
            l_i,
            b_q,
            k_head,
            v_head,
            kb,
            kv_len,
            offs_m,
            offs_n,
            offs_d,
            SKV,
            CAUSAL_SHIFT,
            sm_scale,
            D,
            BS,
            True,
            CAUSAL,
            HAS_KV_LENGTHS,
            BF16_AS_FP32,
        )
    n = tl.load(full_kv_num_blocks + row)
    tl.device_assert((n >= 0) & (n <= MAX_FULL_KV_BLOCKS), "index out of bounds: full_kv_num_blocks > max")
    for j in range(0, n):
        kb = tl.load(full_kv_indices + row * MAX_FULL_KV_BLOCKS + j)
        tl.device_assert((kb >= 0) & (kb < NUM_KV_BLOCKS), "index out of bounds: full_kv_indices")
        acc, m_i, l_i = _attend(
            acc,
            m_i,
            l_i,
            b_q,
            k_head,
            v_head,
            kb,
            kv_len,
            offs_m,
            offs_n,
            offs_d,
            SKV,
            CAUSAL_SHIFT,
            sm_scale,
            D,
            BS,
            False,
            CAUSAL,
            HAS_KV_LENGTHS,
            BF16_AS_FP32,
        )

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # a row that attends nothing gives 0, as flex
    tl.store(
        o + pid_bh * SQ * D + offs_m[:, None] * D + offs_d[None, :], out.to(o.dtype.element_ty), mask=m_qd
    )


def build_block_mask(
    q_len: int,
    kv_len: int,
    *,
    causal: bool,
    kv_lengths: torch.Tensor | None = None,
    block_size: int = 128,
    device: torch.device | str | None = None,
) -> BlockSparseMask:
    """The block mask create_block_mask builds for this mask_mod, blocks classified the same way.

    causal: query i sits at position kv_len - q_len + i (a cache before it). kv_lengths [B]: keys
    from kv_lengths[b] on are padding. Blocks over the padded tail are partial, never full.
    """
    device = device if device is not None else (kv_lengths.device if kv_lengths is not None else "cpu")
    dense = _dense_mask(q_len, kv_len, causal, kv_lengths, device)  # [B, q_len, kv_len]
    pad_q, pad_kv = -q_len % block_size, -kv_len % block_size
    dense = torch.nn.functional.pad(dense, (0, pad_kv, 0, pad_q))
    batch, rows, cols = dense.shape
    per_block = dense.view(batch, rows // block_size, block_size, cols // block_size, block_size)
    counts = per_block.sum(dim=(2, 4))
    full = counts == block_size * block_size
    partial = (counts > 0) & ~full
    kv_num_blocks, kv_indices = _ordered(partial)
    full_kv_num_blocks, full_kv_indices = _ordered(full)
    return BlockSparseMask(
        kv_num_blocks,
        kv_indices,
        full_kv_num_blocks,
        full_kv_indices,
        block_size,
        q_len,
        kv_len,
        causal,
        None if kv_lengths is None else kv_lengths.to(device, torch.int32),
    )


def block_sparse_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: BlockSparseMask, *, debug: bool = False
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v over the blocks the mask lists; q [B, H, Sq, D], k and v [B, H, Skv, D].

    On a GPU the mask is trusted, as flex's kernel trusts it: ``debug=True`` compiles the device asserts.
    """
    _check_shapes(q, k, v, block_mask)
    if q.device.type == "cpu":
        _check_metadata(q, k, block_mask)
    batch, heads, sq, head_dim = q.shape
    skv = k.shape[2]
    bs = block_mask.block_size
    fields = [
        block_mask.kv_num_blocks,
        block_mask.kv_indices,
        block_mask.full_kv_num_blocks,
        block_mask.full_kv_indices,
    ]
    num_blocks, indices, full_num_blocks, full_indices = (
        t.expand(batch, heads, *t.shape[2:]).to(q.device, torch.int32).contiguous() for t in fields
    )
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = poisoned(q.shape, q.dtype, q.device)
    grid = (triton.cdiv(sq, bs), batch * heads)
    _block_sparse_kernel[grid](
        q,
        k,
        v,
        o,
        num_blocks,
        indices,
        full_num_blocks,
        full_indices,
        None if block_mask.kv_lengths is None else block_mask.kv_lengths.to(q.device, torch.int32),
        sq,
        skv,
        num_blocks.shape[2],
        triton.cdiv(skv, bs),
        indices.shape[3],
        full_indices.shape[3],
        block_mask.kv_len - block_mask.q_len,
        1.0 / math.sqrt(head_dim),
        H=heads,
        D=head_dim,
        BS=bs,
        BD=max(16, triton.next_power_of_2(head_dim)),
        CAUSAL=block_mask.causal,
        HAS_KV_LENGTHS=block_mask.kv_lengths is not None,
        # the interpreter's bf16 tl.dot is wrong (numpy has no bfloat16): run those dots in float32
        BF16_AS_FP32=q.device.type == "cpu" and q.dtype == torch.bfloat16,
        num_warps=8 if bs >= 128 else 4,
        **launch_options(debug),
    )
    return o


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, kv_lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """Dense masked softmax in float64 from the intended mask (the tensors' own lengths), not a block mask.

    A query row with no key to attend gives 0, as flex_attention does.
    """
    sq, skv = q.shape[2], k.shape[2]
    allowed = _dense_mask(sq, skv, causal, kv_lengths, q.device).unsqueeze(1)  # [B|1, 1, Sq, Skv]
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return weights @ v.double()


def _dense_mask(
    q_len: int, kv_len: int, causal: bool, kv_lengths: torch.Tensor | None, device: torch.device | str
) -> torch.Tensor:
    """[B|1, q_len, kv_len] bool: the mask_mod evaluated everywhere."""
    q_idx = torch.arange(q_len, device=device).view(1, -1, 1)
    kv_idx = torch.arange(kv_len, device=device).view(1, 1, -1)
    allowed = torch.ones(1, q_len, kv_len, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & (q_idx + (kv_len - q_len) >= kv_idx)
    if kv_lengths is not None:
        allowed = allowed & (kv_idx < kv_lengths.to(device).view(-1, 1, 1))
    return allowed


def _ordered(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, Q, KV] bool -> counts [B, 1, Q] and indices [B, 1, Q, KV], listed first, as flex orders them."""
    as_int = blocks.to(torch.int32).unsqueeze(1)
    indices = torch.argsort(as_int, dim=-1, descending=True, stable=True)
    return as_int.sum(dim=-1).to(torch.int32), indices.to(torch.int32)


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: BlockSparseMask) -> None:
    """Shapes the launcher relies on everywhere (a mask built for the wrong lengths is not one of them)."""
    if (
        q.dim() != 4
        or k.shape != v.shape
        or k.dim() != 4
        or k.shape[:2] != q.shape[:2]
        or k.shape[3] != q.shape[3]
    ):
        raise ValueError(
            f"q must be [B, H, Sq, D] and k, v [B, H, Skv, D], got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    bs = mask.block_size
    if bs < 16 or bs & (bs - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {bs}")
    for name in ("kv_num_blocks", "full_kv_num_blocks", "kv_indices", "full_kv_indices"):
        field = getattr(mask, name)
        expected = 3 if name.endswith("num_blocks") else 4
        if field.dim() != expected or any(m not in (1, n) for m, n in zip(field.shape[:2], q.shape[:2])):
            raise ValueError(
                f"block mask {name} of shape {tuple(field.shape)} does not broadcast over "
                f"batch and heads {tuple(q.shape[:2])}"
            )
    if mask.kv_lengths is not None and mask.kv_lengths.shape != (q.shape[0],):
        raise ValueError(f"kv_lengths must be [{q.shape[0]}], got {tuple(mask.kv_lengths.shape)}")


def _check_metadata(q: torch.Tensor, k: torch.Tensor, mask: BlockSparseMask) -> None:
    """Every block the kernel would visit exists: what the debug device asserts check on a GPU."""
    bs = mask.block_size
    num_q_blocks, num_kv_blocks = triton.cdiv(q.shape[2], bs), triton.cdiv(k.shape[2], bs)
    pairs = (
        (mask.kv_num_blocks, mask.kv_indices, "kv"),
        (mask.full_kv_num_blocks, mask.full_kv_indices, "full_kv"),
    )
    for counts, indices, name in pairs:
        if counts.shape[2] != num_q_blocks or indices.shape[2] != num_q_blocks:
            raise MetadataError(
                f"{name}_num_blocks/{name}_indices cover {counts.shape[2]}/{indices.shape[2]} "
                f"query blocks, q of length {q.shape[2]} has {num_q_blocks}"
            )
        counts = counts.cpu().long().expand(*q.shape[:2], num_q_blocks)
        indices = indices.cpu().long().expand(*q.shape[:2], num_q_blocks, indices.shape[3])
        if int(counts.min()) < 0 or int(counts.max()) > indices.shape[3]:
            raise MetadataError(
                f"{name}_num_blocks range {int(counts.min())}..{int(counts.max())} but "
                f"{name}_indices has room for {indices.shape[3]}"
            )
        used = indices[torch.arange(indices.shape[3]) < counts.unsqueeze(-1)]
        if used.numel() and (int(used.min()) < 0 or int(used.max()) >= num_kv_blocks):
            raise MetadataError(
                f"{name}_indices list block {int(used.max())} (min {int(used.min())}) but keys "
                f"of length {k.shape[2]} have {num_kv_blocks} blocks of {bs}: the mask was "
                f"built for kv_len={mask.kv_len}"
            )
