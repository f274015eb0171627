"""Package names: the projects of this stack that are published under more than one name."""

from __future__ import annotations

import re

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


def rule_name(distribution: str) -> str:
    """The name under which rules refer to ``distribution``."""
    canonical = re.sub(r"[-_.]+", "-", distribution).lower()  # PEP 503
    return ALIASES.get(canonical, canonical)


def installed_name(distribution: str, version: str | None) -> str:
    """``rule_name``, except that FA3's early builds installed as ``flash_attn`` 3.x (Dao-AILab/
    flash-attention#1481): those are FA3, not FA2."""
    name = rule_name(distribution)
    if name == "flash-attn" and version and version.split(".", 1)[0] == "3":
        return "flash-attn-3"
    return name
