"""The message sources, one per upstream; build.py reads them all."""

from __future__ import annotations

from tools.messages.interface import MessageSource
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

SOURCES: list[MessageSource] = [TRANSFORMERS]

from tools.messages.sources.fla import FLA  # noqa: E402
from tools.messages.sources.flash_attn import FLASH_ATTN  # noqa: E402
from tools.messages.sources.kernels import KERNELS  # noqa: E402
from tools.messages.sources.triton import TRITON  # noqa: E402
from tools.messages.sources.xformers import XFORMERS  # noqa: E402

SOURCES += [FLASH_ATTN, XFORMERS, TRITON, FLA, KERNELS]

from tools.messages.sources.diffusers import DIFFUSERS  # noqa: E402
from tools.messages.sources.sglang import SGLANG  # noqa: E402
from tools.messages.sources.torch import TORCH  # noqa: E402
from tools.messages.sources.torch_cpp import TORCH_CPP  # noqa: E402
from tools.messages.sources.vllm import VLLM  # noqa: E402

SOURCES += [TORCH, TORCH_CPP, VLLM, SGLANG, DIFFUSERS]
