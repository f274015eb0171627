"""Variable-length (packed) attention forward, FlashAttention-2 style, with its float64 reference.

Same contract as flash_attn_varlen_func: the batch is described by cu_seqlens (int32, batch + 1
entries starting at 0) and max_seqlen. Wrong metadata is seed bug A; this module detects it on the
host (check_metadata) and, with debug=True, on the device (tl.device_assert).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from attn_doctor.kernels.errors import MetadataError
from attn_doctor.kernels.interpreter import adopt_squeeze
from attn_doctor.kernels.metadata import check_metadata, layout_problems
from attn_doctor.kernels.numerics import poisoned

adopt_squeeze()

LOG2E = math.log2(math.e)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _attend(
    acc,
    l_i,
    m_i,
    q,
    k_ptrs,
    v_ptrs,
    stride_kt,
    stride_vt,
    k_start,
    total_k,
    seqlen_k,
    offs_m,
    offs_n,
    diag,
    lo,
    hi,
    qk_scale,
    softcap_log2,
    window_left,
    window_right,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    HAS_LEFT: tl.constexpr,
    HAS_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
    PRECISION: tl.constexpr,
    BF16_AS_FP32: tl.constexpr,
):
    """Online softmax over KV blocks [lo, hi); MASKED blocks are checked key by key, the rest are not."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        tl.device_assert((cols >= seqlen_k) | (k_start + cols < total_k), "index out of bounds: key row")
        if MASKED:
            k = tl.load(k_ptrs + start_n * stride_kt, mask=(cols < seqlen_k)[:, None], other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * stride_kt)
        if BF16_AS_FP32:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if SOFTCAP:  # softcap * tanh(s / softcap) in log2 units; tanh|x| = (1 - e^-2|x|) / (1 + e^-2|x|)
            e = tl.math.exp2(-tl.abs(qk * qk_scale))
            tanh = (1.0 - e) / (1.0 + e)
            qk = softcap_log2 * tl.where(qk < 0, -tanh, tanh)
            row_scale = 1.0
        else:  # scale after the row max: one fma per score below instead of a multiply and a subtract
            row_scale = qk_scale
        if MASKED:
            keep = cols[None, :] < seqlen_k
            if HAS_RIGHT:
                keep = keep & (cols[None, :] <= offs_m[:, None] + diag + window_right)
            if HAS_LEFT:
                keep = keep & (cols[None, :] >= offs_m[:, None] + diag - window_left)
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * row_scale)
        # a row with no key yet keeps m = -inf; subtract 0 instead, so exp2 gives 0 and not NaN
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new) if MASKED else m_new
        p = tl.math.exp2(qk * row_scale - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASKED:
            v = tl.load(v_ptrs + start_n * stride_vt, mask=(cols < seqlen_k)[:, None], other=0.0)
        else:
            v = tl.load(v_ptrs + start_n * stride_vt)
        if BF16_AS_FP32:
            v = v.to(tl.float32)
            p = p.to(tl.bfloat16).to(tl.float32)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _varlen_fwd(
    Q,
    K,
    V,
    Out,
    CU_Q,
    CU_K,
    total_q,
    total_k,
    max_seqlen_q,
    max_seqlen_k,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    qk_scale,
    softcap_log2,
    window_left,
    window_right,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_LEFT: tl.constexpr,
    HAS_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
    PRECISION: tl.constexpr,
    BF16_AS_FP32: tl.constexpr,
):
    # heaviest query blocks (causal) first, so the last wave holds the light ones
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)

    q_start = tl.load(CU_Q + seq)
    q_end = tl.load(CU_Q + seq + 1)
    k_start = tl.load(CU_K + seq)
    k_end = tl.load(CU_K + seq + 1)
    tl.device_assert(
        (q_start >= 0) & (q_start <= q_end) & (q_end <= total_q), "index out of bounds: cu_seqlens_q"
    )
    tl.device_assert(
        (k_start >= 0) & (k_start <= k_end) & (k_end <= total_k), "index out of bounds: cu_seqlens_k"
    )
    seqlen_q = q_end - q_start
    seqlen_k = k_end - k_start
    tl.device_assert(seqlen_q <= max_seqlen_q, "index out of bounds: seqlen_q > max_seqlen_q")
    tl.device_assert(seqlen_k <= max_seqlen_k, "index out of bounds: seqlen_k > max_seqlen_k")
    if start_m * BLOCK_M >= seqlen_q:
        return

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    tl.device_assert((offs_m >= seqlen_q) | (q_start + offs_m < total_q), "index out of bounds: query row")
    q_ptrs = (
        Q
        + q_start.to(tl.int64) * stride_qt
        + head * stride_qh
        + offs_m[:, None] * stride_qt
        + offs_d[None, :]
    )
    q = tl.load(q_ptrs, mask=(offs_m < seqlen_q)[:, None], other=0.0)
    if BF16_AS_FP32:  # the interpreter has no bf16 arithmetic: exact fp32 copies, products as on a GPU
        q = q.to(tl.float32)
    kv_head = head // GROUP
    k_ptrs = (
        K
        + k_start.to(tl.int64) * stride_kt
        + kv_head * stride_kh
        + offs_n[:, None] * stride_kt
        + offs_d[None, :]
    )
    v_ptrs = (
        V
        + k_start.to(tl.int64) * stride_vt
        + kv_head * stride_vh
        + offs_n[:, None] * stride_vt
        + offs_d[None, :]
    )

    # Key range of this query block, aligned bottom-right: row i sees keys
    # [i + diag - left, i + diag + right]. Blocks wholly inside for every row skip the mask.
    diag = seqlen_k - seqlen_q
    first_row = start_m * BLOCK_M
    last_row = first_row + BLOCK_M - 1
    lo = 0
    full_lo = 0
    hi = seqlen_k
    full_hi = seqlen_k // BLOCK_N * BLOCK_N
    if HAS_RIGHT:
        hi = tl.minimum(seqlen_k, tl.maximum(last_row + diag + window_right + 1, 0))
        full_hi = tl.minimum(full_hi, tl.maximum(first_row + diag + window_right + 1, 0) // BLOCK_N * BLOCK_N)
    if HAS_LEFT:
        lo = tl.maximum(first_row + diag - window_left, 0) // BLOCK_N * BLOCK_N
        full_lo = tl.cdiv(tl.maximum(last_row + diag - window_left, 0), BLOCK_N) * BLOCK_N
        full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
        full_hi = tl.maximum(full_hi, full_lo)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # fmt: off
    if HAS_LEFT:  # blocks cut by the window's left edge
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kt, stride_vt, k_start, total_k,
                                seqlen_k, offs_m, offs_n, diag, lo, full_lo, qk_scale, softcap_log2,
                                window_left, window_right, BLOCK_N, True, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                                PRECISION, BF16_AS_FP32)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kt, stride_vt, k_start, total_k,
                            seqlen_k, offs_m, offs_n, diag, full_lo, full_hi, qk_scale, softcap_log2,
                            window_left, window_right, BLOCK_N, False, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                            PRECISION, BF16_AS_FP32)
    # blocks cut by the causal diagonal, the window's right edge or the last key
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kt, stride_vt, k_start, total_k,
                            seqlen_k, offs_m, offs_n, diag, full_hi, hi, qk_scale, softcap_log2,
                            window_left, window_right, BLOCK_N, True, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                            PRECISION, BF16_AS_FP32)
    # fmt: on

    # a row that sees no key at all gives 0, as flash-attn does
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    o_ptrs = (
        Out
        + q_start.to(tl.int64) * stride_ot
        + head * stride_oh
        + offs_m[:, None] * stride_ot
        + offs_d[None, :]
    )
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=(offs_m < seqlen_q)[:, None])


AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [
        (128, 128, 8, 3),
        (128, 128, 8, 2),
        (128, 64, 8, 3),
        (128, 64, 4, 3),
        (128, 32, 4, 4),
        (64, 64, 4, 3),
        (64, 32, 4, 4),
        (64, 128, 4, 2),
    ]
]


# tried in order when no tuned config fits (head dim 256 in fp32, or a GPU with 99 KB of shared memory)
_FALLBACK_CONFIGS = [
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=2),
]
# Triton's own count ran 14 KiB above the tile estimate on an H100 (270 KB for a 256 KiB estimate)
SHARED_MEMORY_MARGIN = 16 * 1024


def shared_memory_estimate(config: triton.Config, head_dim: int, element_size: int) -> int:
    """Bytes of shared memory a config needs: the Q tile plus K and V tiles for each pipelined stage
    but one."""
    tiles = (config.num_stages - 1) * 2 * config.kwargs["BLOCK_N"] + config.kwargs["BLOCK_M"]
    return int(tiles * head_dim * element_size)


def configs_that_fit(
    configs: list[triton.Config], head_dim: int, element_size: int, shared_memory: int
) -> list[triton.Config]:
    """Tiles that fit the GPU's shared memory and the head dim: 128x256 fp32 tiles spill registers and
    take ptxas minutes per config, so large head dims (and fp32) get narrower tiles, as flash-attn
    picks for hdim 256. Never empty: the smallest fallback is the last resort."""

    def fits(config: triton.Config) -> bool:
        return (
            config.kwargs["BLOCK_M"] * head_dim <= 128 * 128
            and config.kwargs["BLOCK_N"] * head_dim <= (64 if element_size > 2 else 128) * 128
            and shared_memory_estimate(config, head_dim, element_size) <= shared_memory - SHARED_MEMORY_MARGIN
        )

    return [c for c in configs if fits(c)] or [next(filter(fits, _FALLBACK_CONFIGS), _FALLBACK_CONFIGS[-1])]


def _shared_memory_of(device: torch.device) -> int:
    return int(triton.runtime.driver.active.utils.get_device_properties(device.index)["max_shared_mem"])


def _prune_to_device(configs: list[triton.Config], named_args: dict, **kwargs: object) -> list[triton.Config]:
    """The autotuner's early_config_prune hook."""
    head_dim = int(kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM", 128)))  # type: ignore[call-overload]
    q = named_args["Q"]
    return configs_that_fit(configs, head_dim, q.element_size(), _shared_memory_of(q.device))


INTERPRETED = not isinstance(_varlen_fwd, triton.runtime.JITFunction)
# dtypes are part of the autotuner's key already; causal/window/softcap reuse the head dim's winner.
# The interpreter never autotunes (and triton 3.2's autotuner asks a GPU driver for a benchmarker
# as soon as it is made, which fails on a machine without one).
_varlen_fwd_tuned = (
    _varlen_fwd
    if INTERPRETED
    else triton.autotune(
        configs=AUTOTUNE_CONFIGS, key=["HEAD_DIM"], prune_configs_by={"early_config_prune": _prune_to_device}
    )(_varlen_fwd)
)
_varlen_fwd_debug = triton.jit(debug=True)(_varlen_fwd.fn)
_DEBUG_CONFIG = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2)
# the interpreter runs one program at a time in numpy: small tiles, several KV blocks per sequence
_INTERPRETER_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16}


def require_launchable(device: torch.device) -> None:
    """Triton runs CPU tensors only through its interpreter, chosen when triton is first imported."""
    if device.type == "cpu" and not INTERPRETED:
        raise RuntimeError("CPU tensors need TRITON_INTERPRET=1 in the environment before triton is imported")


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape:
        raise ValueError(
            f"q [total_q, Hq, D], k and v [total_k, Hkv, D] expected, got {list(q.shape)}, "
            f"{list(k.shape)}, {list(v.shape)}"
        )
    head_dim = q.shape[2]
    if k.shape[2] != head_dim or head_dim < 16 or head_dim > 256 or head_dim & (head_dim - 1):
        raise ValueError(
            f"head dims {head_dim} (q) and {k.shape[2]} (k, v): need one power of two in [16, 256]"
        )
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} key/value heads")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"dtypes {q.dtype}, {k.dtype}, {v.dtype}: need one of float16, bfloat16, float32")


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    scale: float | None = None,
    debug: bool = False,
) -> torch.Tensor:
    """flash_attn_varlen_func's forward: q [total_q, Hq, D], k and v [total_k, Hkv, D] -> [total_q, Hq, D].

    Metadata is validated where it is cheap. On CPU tensors (the interpreter, where device asserts
    are no-ops and a wild load can kill the process) check_metadata runs first and MetadataError is
    raised instead of launching. On a GPU the host never reads cu_seqlens: that would be a device
    sync per call, which flash-attn does not do either and CUDA graphs forbid. There debug=True is
    the check (device asserts on every index derived from the metadata); without it the metadata is
    trusted, as flash-attn trusts it. Shapes and dtypes are checked everywhere, since that is free.
    """
    _check_shapes(q, k, v)
    if len({t.device for t in (q, k, v, cu_seqlens_q, cu_seqlens_k)}) != 1:
        raise ValueError("q, k, v and both cu_seqlens must be on one device")
    require_launchable(q.device)
    if q.device.type == "cpu":
        problems = check_metadata(
            cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q.shape[0], k.shape[0]
        )
    else:
        problems = layout_problems(cu_seqlens_q, cu_seqlens_k)
    if problems:
        raise MetadataError("; ".join(problems))
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = poisoned(q.shape, q.dtype, q.device)
    if max_seqlen_q <= 0:  # nothing to launch; rows the metadata does not cover stay NaN
        return out
    batch, heads, head_dim = cu_seqlens_q.numel() - 1, q.shape[1], q.shape[2]
    left, right = window
    if causal:
        right = 0
    scale = head_dim**-0.5 if scale is None else scale
    # exp2 instead of exp: log2(e) folds into the scale (for softcap, into tanh's argument and the cap)
    qk_scale = 2.0 * scale * LOG2E / softcap if softcap > 0 else scale * LOG2E
    args = (
        q,
        k,
        v,
        out,
        cu_seqlens_q,
        cu_seqlens_k,
        q.shape[0],
        k.shape[0],
        max_seqlen_q,
        max_seqlen_k,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        qk_scale,
        softcap * LOG2E,
        left,
        right,
    )
    flags = {
        "GROUP": heads // k.shape[1],
        "HEAD_DIM": head_dim,
        "HAS_LEFT": left >= 0,
        "HAS_RIGHT": right >= 0,
        "SOFTCAP": softcap > 0,
        "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",
        "BF16_AS_FP32": INTERPRETED and q.dtype == torch.bfloat16,
    }

    def grid(meta: dict[str, int]) -> tuple[int, int, int]:
        return (triton.cdiv(max_seqlen_q, meta["BLOCK_M"]), batch, heads)

    if INTERPRETED:  # device asserts are no-ops there; check_metadata ran above instead
        _varlen_fwd[grid](*args, **flags, **_INTERPRETER_CONFIG)
    elif debug:
        config = configs_that_fit([_DEBUG_CONFIG], head_dim, q.element_size(), _shared_memory_of(q.device))[0]
        _varlen_fwd_debug[grid](
            *args, **flags, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages
        )
    else:
        _varlen_fwd_tuned[grid](*args, **flags)
    return out


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    *,
    causal: bool,
    window: tuple[int, int],
    softcap: float,
    scale: float | None,
) -> torch.Tensor:
    """The same attention in float64 on the CPU, one sequence at a time, without tiling."""
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    scale = q.shape[2] ** -0.5 if scale is None else scale
    left, right = window
    if causal:
        right = 0
    group = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for q0, q1, k0, k1 in zip(bounds_q, bounds_q[1:], bounds_k, bounds_k[1:], strict=False):
        qs = q[q0:q1]
        ks = k[k0:k1].repeat_interleave(group, dim=1)
        vs = v[k0:k1].repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        rows = torch.arange(q1 - q0)[:, None] + (k1 - k0) - (q1 - q0)  # bottom-right aligned diagonal
        cols = torch.arange(k1 - k0)[None, :]
        keep = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool)
        if right >= 0:
            keep &= cols <= rows + right
        if left >= 0:
            keep &= cols >= rows - left
        probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1).nan_to_num(0.0)
        out[q0:q1] = torch.einsum("hqk,khd->qhd", probs, vs)
    return out
