"""Probe this machine into an ``Environment`` without importing torch, triton or flash_attn."""

from __future__ import annotations

import sys

from attn_doctor.facts import gpus, packages, system
from attn_doctor.facts.model import Environment


def probe_environment(site_paths: list[str] | None = None) -> tuple[Environment, list[str]]:
    """This machine's facts, and one line per problem met on the way (broken metadata, ...).

    ``site_paths`` replaces ``sys.path`` as the place to look for installed packages (another
    virtual environment's site-packages, say).
    """
    installed, torch_build, problems = packages.find_installed(site_paths or sys.path)
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
        sources=["probe" if not site_paths else "probe of " + ", ".join(site_paths)],
    )
    return environment, problems
