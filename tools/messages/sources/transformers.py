"""transformers: the modules where attention is chosen and run, and every model's modeling file."""

from __future__ import annotations

from tools.messages.sources.cached_trees import CachedTrees

TRANSFORMERS = CachedTrees(
    "transformers",
    "transformers",
    (
        "modeling_utils.py",
        "integrations/*.py",
        "masking_utils.py",
        "cache_utils.py",
        "modeling_flash_attention_utils.py",
        "generation/*.py",
        "utils/import_utils.py",
        "models/*/modeling_*.py",
    ),
    floor="4.36.0",
)
