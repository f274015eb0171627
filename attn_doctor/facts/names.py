"""Package names: the projects of this stack that are published under more than one name."""

from __future__ import annotations

import re

_SEPARATORS = re.compile(r"[-_.]+")
# distribution name (PEP 503 normalised) -> the name rules use
ALIASES: dict[str, str] = {
    "flash-attn": "flash-attn",
    "flash-attn-3": "flash-attn-3",
    "flashattn-hopper": "flash-attn-3",
    "fla-core": "flash-linear-attention",
    "flash-linear-attention": "flash-linear-attention",
    "pytorch-triton": "triton",
    "pytorch-triton-rocm": "triton",
    "triton": "triton",
    "triton-windows": "triton",  # woct0rdho/triton-windows: triton's releases built for Windows
}

# the distributions `check` looks up; anything else installed is irrelevant to the rules
WATCHED: tuple[str, ...] = (
    "torch",
    "triton",
    "pytorch-triton",
    "pytorch-triton-rocm",
    "triton-windows",
    "transformers",
    "flash-attn",
    "flash-attn-3",
    "flashattn-hopper",
    "flash-linear-attention",
    "fla-core",
    "xformers",
    "accelerate",
    "peft",
    "vllm",
    "deepspeed",
    "liger-kernel",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cudnn-cu12",
)


def canonical_name(distribution: str) -> str:
    """PEP 503's normal form of a distribution name (packaging's ``canonicalize_name``, without
    importing packaging.utils and its platform tags). Most names are already in it: three scans
    in C tell, three times faster than the substitution (a lock file may hold 500,000 names)."""
    lowered = distribution.lower()
    if "_" in lowered or "." in lowered or "--" in lowered:
        return _SEPARATORS.sub("-", lowered)
    return lowered


def rule_name(distribution: str) -> str:
    """The name under which rules refer to ``distribution``."""
    canonical = canonical_name(distribution)
    return ALIASES.get(canonical, canonical)


def installed_name(distribution: str, version: str | None) -> str:
    """``rule_name``, except that FA3's early builds installed as ``flash_attn`` 3.x (Dao-AILab/
    flash-attention#1481): those are FA3, not FA2."""
    name = rule_name(distribution)
    if name == "flash-attn" and version and version.split(".", 1)[0] == "3":
        return "flash-attn-3"
    return name
