"""xformers: the release whose wheel pins the target's torch, from the index of torch's CUDA
variant (xformers' wheels on download.pytorch.org are built per torch and CUDA variant)."""

from __future__ import annotations

from packaging.version import Version

from attn_doctor.facts.model import Environment, marker_environment
from attn_doctor.planner.interface import Plan, WayOut
from attn_doctor.planner.target import TORCH_INDEX, wheel_target
from attn_doctor.releases.facts import ReleaseFacts

PACKAGE = "xformers"


class XformersPlanner:
    package = PACKAGE

    def plan(self, env: Environment, facts: ReleaseFacts, version: str | None = None) -> Plan:
        target = wheel_target(env)
        if isinstance(target, str):
            return Plan(PACKAGE, version, None, target)
        index = TORCH_INDEX.format(variant=target.variant)
        releases = [version] if version else sorted(facts.releases(PACKAGE), key=Version, reverse=True)
        for release in releases:
            pinned = _torch_pin(facts, release, marker_environment(env))
            if pinned == target.torch:
                why = f"xformers {release}'s wheel pins torch=={pinned} (its metadata); one build per CUDA"
                command = f"pip install xformers=={release} --index-url {index}"
                return Plan(PACKAGE, release, command, why, requirement=f"xformers=={release}", index=index)
            if version and pinned:
                return _other_torch(version, pinned, target.variant, facts)
        why = f"no xformers release in the release facts pins torch {target.torch}"
        return Plan(PACKAGE, version, None, why)


def _torch_pin(facts: ReleaseFacts, release: str, markers: dict[str, str]) -> str | None:
    for requirement in facts.requirements(PACKAGE, release, markers) or []:
        if requirement.name == "torch":
            for spec in requirement.specifier:
                if spec.operator == "==":
                    return spec.version
    return None


def _other_torch(version: str, torch: str, variant: str, facts: ReleaseFacts) -> Plan:
    """xformers ``version`` with the torch it pins, from the target's CUDA variant where that torch
    was built with it, else its newest variant of the same CUDA major."""
    variants = sorted(facts.torch_cuda_variant_names(torch))
    same_major = [v for v in variants if v[:-1] == variant[:-1]]
    chosen = variant if variant in variants else (same_major or variants or [variant])[-1]
    index = TORCH_INDEX.format(variant=chosen)
    way = WayOut(
        title=f"torch {torch} ({chosen}), which xformers {version} is built for",
        commands=(f"pip install torch=={torch} xformers=={version} --index-url {index}",),
        why=f"xformers {version}'s wheel pins torch=={torch} (its metadata)",
    )
    why = f"xformers {version} pins torch=={torch}, not the target's torch"
    return Plan(PACKAGE, version, None, why, ways_out=(way,))
