"""xformers: the release whose wheel pins the target's torch, from the index of torch's CUDA
variant (xformers' wheels on download.pytorch.org are built per torch and CUDA variant)."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
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
        wants = {release: _torch_requirement(facts, release, marker_environment(env)) for release in releases}
        for release, wanted in wants.items():
            if wanted is not None and wanted.contains(target.torch):
                why = f"xformers {release}'s wheel requires torch{wanted} (its metadata); one build per CUDA"
                command = f"pip install xformers=={release} --index-url {index}"
                return Plan(PACKAGE, release, command, why, requirement=f"xformers=={release}", index=index)
        pins = {release: _pinned(wanted) for release, wanted in wants.items()}
        pinning = [(release, pinned) for release, pinned in pins.items() if pinned]
        if not pinning:
            return Plan(PACKAGE, version, None, f"xformers {version} pins no torch (the release facts)")
        release, pinned = pinning[0]  # the one asked for, else the newest
        way = _other_torch(release, pinned, target.variant, facts)
        who = f"xformers {version} pins torch=={pinned}, not" if version else "no xformers release pins"
        return Plan(PACKAGE, version, None, f"{who} the target's torch {target.torch}", ways_out=(way,))


def _torch_requirement(facts: ReleaseFacts, release: str, markers: dict[str, str]) -> SpecifierSet | None:
    """What the release's wheel requires of torch: a pin (``==2.7.0``, one build per torch) or,
    from 0.0.35, a floor (``>=2.10``: one wheel for every torch since)."""
    for requirement in facts.requirements(PACKAGE, release, markers) or []:
        if requirement.name == "torch":
            return requirement.specifier
    return None


def _pinned(wanted: SpecifierSet | None) -> str | None:
    exact = [spec.version for spec in wanted or () if spec.operator == "=="]
    return exact[0] if exact else None


def _other_torch(version: str, torch: str, variant: str, facts: ReleaseFacts) -> WayOut:
    """xformers ``version`` with the torch it pins, from the target's CUDA variant where that torch
    was built with it, else its newest variant of the same CUDA major."""
    variants = sorted(facts.torch_cuda_variant_names(torch))
    same_major = [v for v in variants if v[:-1] == variant[:-1]]
    chosen = variant if variant in variants else (same_major or variants or [variant])[-1]
    index = TORCH_INDEX.format(variant=chosen)
    return WayOut(
        title=f"torch {torch} ({chosen}), which xformers {version} is built for",
        commands=(f"pip install torch=={torch} xformers=={version} --index-url {index}",),
        why=f"xformers {version}'s wheel pins torch=={torch} (its metadata)",
    )
