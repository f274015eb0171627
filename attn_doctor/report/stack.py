"""The stack of a target in a few named strings, as the fleet formats show it: the labels of
`--format prometheus`'s ``attn_doctor_stack_info`` and `--format verdict`'s ``stack``."""

from __future__ import annotations

from collections.abc import Iterable

from attn_doctor.facts.model import Environment

# the key (a Prometheus label name: letters, digits, underscores) -> the package's name in rules
PACKAGES = {
    "torch": "torch",
    "triton": "triton",
    "transformers": "transformers",
    "flash_attn": "flash-attn",
    "flash_attn_3": "flash-attn-3",
    "fla": "flash-linear-attention",
    "xformers": "xformers",
}
KEYS = (
    "torch", "cuda", "hip", "driver", "triton", "transformers", "flash_attn", "flash_attn_3", "xformers",
    "fla", "gpu", "gpus", "arch", "python",
)  # fmt: skip


def stack(env: Environment) -> dict[str, str | None]:
    """Every key of KEYS, always: the version or name, or None where unknown or not installed.
    ``cuda``/``hip``: torch's build; ``gpu``, ``arch``, ``driver``: each distinct value over the
    GPUs, joined by ``,`` (one for a node of one model); ``gpus``: how many."""
    versions: dict[str, str | None] = {}
    for key, name in PACKAGES.items():
        package = env.packages.get(name)
        versions[key] = None if package is None else package.version
    build = env.torch_build
    versions["cuda"] = None if build is None else build.cuda
    versions["hip"] = None if build is None else build.hip
    versions["driver"] = _distinct(gpu.driver for gpu in env.gpus)
    versions["gpu"] = _distinct(gpu.name for gpu in env.gpus)
    known_count = env.gpus or env.gpu_source in ("none", "nvml", "nvidia-smi")
    versions["gpus"] = str(len(env.gpus)) if known_count else None
    versions["arch"] = _distinct(_arch(gpu.compute_capability, gpu.gfx) for gpu in env.gpus)
    versions["python"] = env.python
    return {key: versions[key] for key in KEYS}


def _arch(capability: str | None, gfx: str | None) -> str | None:
    if gfx:
        return gfx
    return None if capability is None else "sm_" + capability.replace(".", "")


def _distinct(values: Iterable[str | None]) -> str | None:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return ",".join(seen) or None
