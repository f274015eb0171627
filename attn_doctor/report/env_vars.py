"""Which environment variables an issue report shows: those that steer this stack, never a secret.

Only variables that change how CUDA, torch, Triton, the Hugging Face libraries or the attention
kernels behave or build are listed; ``PATH`` is not (long, personal, and the facts already say
which nvcc it finds). Of those, any whose name says it holds a secret is left out, name and all:
the report only counts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from attn_doctor.redact import secret_name

RELEVANT_PREFIXES = (
    "CUDA_",
    "CUDNN_",
    "CUBLAS_",
    "NVIDIA_",
    "NVCC_",
    "NCCL_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "TORCHDYNAMO_",
    "PYTORCH_",
    "TRITON_",
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "XFORMERS_",
    "FLASH_ATTENTION_",
    "FLA_",
    "ROCM_",
    "HIP_",
    "ATTN_DOCTOR_",
)
RELEVANT_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "MAX_JOBS", "CC", "CXX")


@dataclass(frozen=True)
class Variables:
    shown: list[tuple[str, str]]  # (name, value), sorted by name
    withheld: int  # relevant by name, but the name says it holds a secret


def relevant_variables(environ: Mapping[str, str]) -> Variables:
    relevant = sorted(
        (name, value)
        for name, value in environ.items()
        if name.upper() in RELEVANT_NAMES or name.upper().startswith(RELEVANT_PREFIXES)
    )
    shown = [(name, value) for name, value in relevant if not secret_name(name)]
    return Variables(shown=shown, withheld=len(relevant) - len(shown))
