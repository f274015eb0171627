"""Probe this machine into an ``Environment`` without importing torch, triton or flash_attn."""

from __future__ import annotations

import sys

from attn_doctor.facts import gpus, packages, system
from attn_doctor.facts.cache import cache_folder
from attn_doctor.facts.model import THIS_MACHINE, Environment


def probe_environment(site_paths: list[str] | None = None) -> tuple[Environment, list[str]]:
    """This machine's facts, and one line per problem met on the way (broken metadata, ...).

    ``site_paths`` replaces ``sys.path`` as the place to look for installed packages (another
    virtual environment's site-packages, say).
    """
    nvcc = system.start_nvcc_probe(cache_folder())  # a child process: runs while the rest is read
    installed, torch_build, problems = packages.find_installed(site_paths or sys.path)
    gpu_list, gpu_source = gpus.probe_gpus()
    where = THIS_MACHINE if not site_paths else f"{THIS_MACHINE} ({', '.join(site_paths)})"
    origins = {
        key: THIS_MACHINE
        for key in ("nvcc", "python", "platform", "machine", "os", "libc", "cpus", "memory_gb")
    }
    if "torch" in installed and torch_build is not None:
        origins["torch_build"] = "torch/version.py"
    environment = Environment(
        packages=installed,
        torch_build=torch_build if "torch" in installed else None,
        gpus=gpu_list,
        gpu_source=gpu_source,
        nvcc=nvcc.result(),
        python=system.python_version(),
        platform=system.platform_family(),
        machine=system.machine(),
        os=system.os_description(),
        libc=system.libc(),
        cpus=system.cpus(),
        memory_gb=system.memory_gb(),
        sources=[where],
        target=where,
        origins=origins,
    )
    return environment, problems
