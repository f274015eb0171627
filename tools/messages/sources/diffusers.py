"""diffusers' attention dispatch: the processors (xformers, SDPA, flash, NPU) and, from 0.35, the
attention_dispatch backends with their requirement checks."""

from __future__ import annotations

from tools.messages.sources.archives import ArchiveTrees

DIFFUSERS_INCLUDE = (
    "diffusers/models/attention_dispatch.py",  # 0.35+: backends, _check_attention_backend_requirements
    "diffusers/models/attention_processor.py",  # AttnProcessor*, set_use_memory_efficient_attention_xformers
    "diffusers/models/attention.py",
)

DIFFUSERS = ArchiveTrees("diffusers", "diffusers", DIFFUSERS_INCLUDE, floor="0.30.0")
