"""vLLM's attention-backend selection: the backends, the selector, the platform checks.

Read from the registry's Linux wheels (0.6.0 on; cp38-abi3, tagged manylinux1 to 0.11,
manylinux_2_24/2_28/2_31 later). Where the code lives moved between releases: vllm/attention/
(backends, selector, layer) to 0.11, vllm/v1/attention/ (backends, selector) from 0.8, the
attention layer under vllm/model_executor/layers/attention/ later; every one of these is read.

vLLM says why it did not pick a backend at INFO level (``Cannot use FlashAttention-2 backend
for Volta and Turing GPUs.``), and those are the lines users paste, so its ``logger.info``
messages are read too (kind ``log.info``), with the same templates and guards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tools.messages.build import extract_file
from tools.messages.python_source import WITH_INFO, RawMessage
from tools.messages.sources.archives import ArchiveTrees

VLLM_INCLUDE = (
    "vllm/attention/**/*.py",  # backends/, selector.py, layer.py, ops/ (to 0.11)
    "vllm/v1/attention/**/*.py",  # backends/ (FlashAttention, FlashInfer, FlexAttention, MLA), selector
    "vllm/platforms/*.py",  # cuda.py / rocm.py / cpu.py: get_attn_backend_cls and the device checks
    "vllm/model_executor/layers/attention/**/*.py",  # the attention layer in later releases
    "vllm/config/attention.py",
    "vllm/vllm_flash_attn/*.py",  # the bundled flash-attn interface ("FA3 is only supported on ...")
)
VLLM_TAGS = (
    "manylinux_2_35_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_24_x86_64",  # 0.21.0's wheel (build tag -1)
    "manylinux2014_x86_64",
)


def messages_with_info(files: Iterable[tuple[str, str]]) -> list[RawMessage]:
    return [message for path, text in files for message in extract_file(text, path, WITH_INFO)]


@dataclass(frozen=True)
class EngineTrees(ArchiveTrees):
    """ArchiveTrees whose releases' messages include INFO logs (the engines' backend choice)."""

    def messages(self, cache: Path, version: str) -> list[RawMessage]:
        return messages_with_info(self.files(cache, version))


VLLM = EngineTrees("vllm", "vllm", VLLM_INCLUDE, floor="0.6.0", platforms=VLLM_TAGS)
