"""The message sources, one module per upstream; build.py and fetch.py read them all."""

from __future__ import annotations

from tools.messages.interface import MessageSource
from tools.messages.sources.diffusers import DIFFUSERS
from tools.messages.sources.fla import FLA
from tools.messages.sources.flash_attn import FLASH_ATTN
from tools.messages.sources.kernels import KERNELS
from tools.messages.sources.sglang import SGLANG
from tools.messages.sources.torch import TORCH
from tools.messages.sources.torch_cpp import TORCH_CPP
from tools.messages.sources.transformers import TRANSFORMERS
from tools.messages.sources.triton import TRITON
from tools.messages.sources.vllm import VLLM
from tools.messages.sources.xformers import XFORMERS

SOURCES: list[MessageSource] = [
    TRANSFORMERS,
    TORCH,
    TORCH_CPP,
    FLASH_ATTN,
    XFORMERS,
    TRITON,
    FLA,
    KERNELS,
    VLLM,
    SGLANG,
    DIFFUSERS,
]
