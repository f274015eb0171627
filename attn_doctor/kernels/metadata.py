"""Host-side checks of the metadata attention kernels are driven by: cu_seqlens and gather indices.

Torch only, no triton: the kernels run these before a CPU (interpreter) launch, and the live probes
run them inside the stand-ins for flash_attn's functions, in venvs without triton.
"""

from __future__ import annotations

import torch


def layout_problems(cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor) -> list[str]:
    """What is wrong with the cu_seqlens tensors themselves: known on the host without reading them."""
    problems = []
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.dtype != torch.int32 or cu.dim() != 1:
            problems.append(f"{name} must be a 1-D int32 tensor, got {cu.dtype} of shape {list(cu.shape)}")
        elif cu.numel() < 2:
            problems.append(f"{name} has {cu.numel()} entry: it needs batch + 1 >= 2, from 0 to the total")
    if not problems and cu_seqlens_q.shape != cu_seqlens_k.shape:
        problems.append(
            f"cu_seqlens_q has {cu_seqlens_q.numel()} entries, cu_seqlens_k {cu_seqlens_k.numel()}"
        )
    return problems


def cu_seqlens_problems(name: str, cu: torch.Tensor, max_seqlen: int, total: int) -> list[str]:
    values = cu.tolist()
    shown = values if len(values) <= 8 else [*values[:4], "...", *values[-2:]]
    problems = []
    if values and values[0] != 0:
        problems.append(f"{name}={shown} starts at {values[0]}, not 0")
    drops = [i for i in range(1, len(values)) if values[i] < values[i - 1]]
    if drops:
        problems.append(
            f"{name} decreases at entry {drops[0]} ({values[drops[0] - 1]} -> {values[drops[0]]})"
        )
    if values and values[-1] != total:
        problems.append(f"{name}={shown} ends at {values[-1]}, not at the {total} packed tokens")
    outside = [x for x in values if not 0 <= x <= total]
    if outside:
        problems.append(f"{name} has entries outside [0, {total}]: {outside[:4]}")
    longest = max((b - a for a, b in zip(values, values[1:], strict=False)), default=None)
    if longest is not None and max_seqlen != longest:
        problems.append(f"max_seqlen for {name} is {max_seqlen} but the longest sequence is {longest}")
    return problems


def check_metadata(
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    total_q: int,
    total_k: int,
) -> list[str]:
    """Every way the metadata fails to describe the packed tensors, one line each (empty: consistent)."""
    problems = layout_problems(cu_seqlens_q, cu_seqlens_k)
    for name, cu, max_seqlen, total in (
        ("cu_seqlens_q", cu_seqlens_q, max_seqlen_q, total_q),
        ("cu_seqlens_k", cu_seqlens_k, max_seqlen_k, total_k),
    ):
        if cu.dtype == torch.int32 and cu.dim() == 1:
            problems += cu_seqlens_problems(name, cu, max_seqlen, total)
    return problems


def check_indices(indices: torch.Tensor, n_rows: int) -> list[str]:
    """Problems with gather indices for a tensor of n_rows rows, one line each (empty: fine)."""
    if indices.dim() != 1 or indices.dtype not in (torch.int32, torch.int64):
        return [f"indices must be a 1-D integer tensor, got {indices.dtype} of shape {list(indices.shape)}"]
    if indices.numel() == 0:
        return []
    low, high = int(indices.min()), int(indices.max())
    if low < 0 or high >= n_rows:
        bad = int(((indices < 0) | (indices >= n_rows)).sum())
        return [
            f"{bad} of {indices.numel()} indices fall outside [0, {n_rows}) (they span {low}..{high}): "
            f"a mask with more entries than batch*seq, e.g. 4-D [B, 1, T, T] where [B, T] belongs"
        ]
    return []
