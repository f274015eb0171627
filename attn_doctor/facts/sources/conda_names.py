"""Conda's names for the stack and what conda package specs say: ``pytorch`` is torch,
``pytorch-cuda=12.1`` and ``cudatoolkit=11.8`` are the CUDA torch is built for, and a build string
such as ``py3.11_cuda12.1_cudnn9.1.0_0`` (pytorch channel) or ``cuda126_py311h...`` (conda-forge)
names it too."""

from __future__ import annotations

import re

from attn_doctor.errors import InputError
from attn_doctor.facts.model import NUMERIC_VERSION
from attn_doctor.facts.sources.common import Declared, shown

# conda package -> the distribution rules use
CONDA_NAMES = {
    "pytorch": "torch",
    "pytorch-gpu": "torch",
    "pytorch-cpu": "torch",
    "pytorch-triton": "triton",
    "pytorch-triton-rocm": "triton",
    "triton": "triton",
    "transformers": "transformers",
    "flash-attn": "flash-attn",
    "flash_attn": "flash-attn",
    "xformers": "xformers",
    "accelerate": "accelerate",
    "peft": "peft",
    "deepspeed": "deepspeed",
    "vllm": "vllm",
}
# conda packages whose version is the CUDA release torch is built for
CUDA_PACKAGES = ("pytorch-cuda", "cudatoolkit", "cuda-version")
# "pytorch=2.5.1=py3.11_cuda12.1_0", "pytorch==2.5.1", "pytorch>=2.4", "pytorch::pytorch=2.5.1",
# "pytorch 2.5.1 cuda126_py311h1234567_300" (conda list), "pytorch[version='>=2.4']"
_SPEC = re.compile(
    r"^(?:[A-Za-z0-9_.-]+::)?(?P<name>[A-Za-z0-9_.-]+)"
    r"(?:\s*(?P<operator>==|=|>=|<=|>|<|!=|~=|\s)\s*(?P<version>[^\s=,|*\[]+)(?P<wild>\*)?)?"
    r"(?:(?:=|\s+)(?P<build>\S+))?"
)
_PYTHON = re.compile(r"[0-9]+(?:\.[0-9]+)*[0-9A-Za-z+]*")  # python=3, =3.11, =3.13.0rc1; not =3.x
_BUILD_CUDA = re.compile(
    r"cuda_?(?P<major>[0-9]{2})\.?(?P<minor>[0-9])(?![0-9])|cuda(?P<dotted>[0-9]+\.[0-9]+)"
)


def add_spec(spec: str, origin: str, declared: Declared) -> None:
    """One conda spec as the facts it states; a spec that is not about the stack is ignored."""
    match = _SPEC.match(" ".join(spec.split())[:500])  # single spaces: the pattern splits no run
    if not match:
        return
    name = match["name"].lower()
    exact = match["operator"] in ("=", "==", " ") and not match["wild"]
    version = match["version"] if exact else None
    if name in CUDA_PACKAGES and version:
        _check_shape(version, NUMERIC_VERSION, origin, "a CUDA version such as 12.1")
        declared.torch_cuda = declared.torch_cuda or (".".join(version.split(".")[:2]), origin)
    elif name == "python" and version:
        _check_shape(version, _PYTHON, origin, "a Python version such as 3.11")
        declared.python = declared.python or (version, origin)
    elif name in CONDA_NAMES:
        declared.add(CONDA_NAMES[name], version, origin, distribution=name)
        cuda = _BUILD_CUDA.search(match["build"] or "") if CONDA_NAMES[name] == "torch" else None
        if cuda:
            found = cuda["dotted"] or f"{int(cuda['major'])}.{cuda['minor']}"
            declared.torch_cuda = declared.torch_cuda or (found, origin)


def _check_shape(version: str, shape: re.Pattern[str], origin: str, what: str) -> None:
    """A CUDA or Python version whose parts are read as numbers later (``12.x`` would crash there)."""
    if not shape.fullmatch(version):
        raise InputError(origin, f"{shown(repr(version))} is not {what}")
