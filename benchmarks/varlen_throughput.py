"""Forward throughput of varlen_attention against SDPA's flash backend and compiled flex_attention.

bf16, causal, a fixed number of tokens (16k) cut into equal sequences of 1k..16k (batch = tokens /
seqlen), model width 2048 (heads = 2048 / head dim). varlen gets the packed [tokens, H, D] layout,
SDPA and flex the dense [B, H, S, D] equivalent. Causal forward FLOPs = 4 * B * H * S * S * D / 2;
times are triton.testing.do_bench medians. Target: varlen >= 80% of SDPA flash at head dim 128,
seqlen >= 4k.

    python benchmarks/varlen_throughput.py [--tokens 16384] [--head-dims 64 128] [--no-flex]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.nn.functional import scaled_dot_product_attention

from attn_doctor.kernels.varlen_attention import _varlen_fwd_tuned, varlen_attention

TARGET = 0.80
WIDTH = 2048


def measure(
    head_dim: int, seqlen: int, tokens: int, flex: Callable[..., torch.Tensor] | None
) -> tuple[str, float]:
    """A table row (TFLOP/s of the three, largest difference from SDPA) and varlen's speed / SDPA's."""
    batch, heads = tokens // seqlen, WIDTH // head_dim
    q, k, v = (
        torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3)
    )
    packed = [t.transpose(1, 2).reshape(batch * seqlen, heads, head_dim).contiguous() for t in (q, k, v)]
    cu = torch.arange(0, batch + 1, device="cuda", dtype=torch.int32) * seqlen

    def run_varlen() -> torch.Tensor:
        return varlen_attention(*packed, cu, cu, seqlen, seqlen, causal=True)

    def run_sdpa() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return scaled_dot_product_attention(q, k, v, is_causal=True)

    def tflops(fn: Callable[[], torch.Tensor]) -> float:
        ms = float(triton.testing.do_bench(fn, return_mode="median"))
        return 4 * batch * heads * seqlen * seqlen * head_dim / 2 / (ms * 1e-3) / 1e12

    varlen, sdpa = tflops(run_varlen), tflops(run_sdpa)
    flex_cell = "-"
    if flex is not None:
        mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, seqlen, seqlen, device="cuda")
        flex_cell = f"{tflops(lambda: flex(q, k, v, block_mask=mask)):.1f}"
    expected = run_sdpa().transpose(1, 2).reshape(batch * seqlen, heads, head_dim)
    error = float((run_varlen().float() - expected.float()).abs().max())
    row = (
        f"{head_dim:>4} {seqlen:>6} {batch:>3} {heads:>3} | {varlen:7.1f} {sdpa:7.1f} {flex_cell:>7} | "
        f"{varlen / sdpa:11.0%}  {error:.3g}"
    )
    return row, varlen / sdpa


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--seqlens", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--no-flex", action="store_true", help="skip flex_attention (a compile per shape)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "varlen_throughput needs a CUDA GPU; this machine has none (torch.cuda.is_available() is False).",
            file=sys.stderr,
        )
        return 2

    torch._dynamo.config.cache_size_limit = 64  # a compile per shape; past the default 8 flex runs eagerly
    flex = None if args.no_flex else torch.compile(flex_attention, dynamic=False)
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}: "
        f"bf16 causal forward, {args.tokens} tokens, width {WIDTH}, TFLOP/s (do_bench median)"
    )
    header = (
        f"{'D':>4} {'S':>6} {'B':>3} {'H':>3} | {'varlen':>7} {'sdpa':>7} {'flex':>7} | varlen/sdpa  max|Δ|"
    )
    print(header)
    print("-" * len(header))
    ratios = []
    for head_dim in args.head_dims:
        for seqlen in args.seqlens:
            row, ratio = measure(head_dim, seqlen, args.tokens, flex)
            print(row, flush=True)
            if head_dim == 128 and seqlen >= 4096:
                ratios.append(ratio)
        print(f"  autotuned config for head dim {head_dim}: {_varlen_fwd_tuned.best_config}")
    if ratios:
        state = "met" if min(ratios) >= TARGET else "NOT met"
        print(f"target varlen >= {TARGET:.0%} of SDPA flash at head dim 128, seqlen >= 4k: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
