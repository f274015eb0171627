"""Probe this machine into an ``Environment`` without importing torch, triton or flash_attn."""

from __future__ import annotations

import sys

from attn_doctor.facts import gpus, packages, system
from attn_doctor.facts.model import Environment


def probe_environment() -> tuple[Environment, list[str]]:
    """This machine's facts, and one line per problem met on the way (broken metadata, ...)."""
    installed, torch_build, problems = packages.find_installed(sys.path)
    gpu_list, gpu_source = gpus.probe_gpus()
    environment = Environment(
        packages=installed,
        torch_build=torch_build if "torch" in installed else None,
        gpus=gpu_list,
        gpu_source=gpu_source,
        nvcc=system.nvcc_version(),
        python=system.python_version(),
        platform=system.platform_family(),
        os=system.os_description(),
        libc=system.libc(),
        sources=["probe"],
    )
    return environment, problems
