"""xformers: the release whose wheel pins the target's torch, from the index of torch's CUDA
variant (xformers' wheels on download.pytorch.org are built per torch and CUDA variant)."""

from __future__ import annotations

from packaging.version import Version

from attn_doctor.facts.model import Environment, marker_environment
from attn_doctor.planner.interface import Plan
from attn_doctor.planner.target import TORCH_INDEX, wheel_target
from attn_doctor.releases.facts import ReleaseFacts


class XformersPlanner:
    package = "xformers"

    def plan(self, env: Environment, facts: ReleaseFacts) -> Plan:
        target = wheel_target(env)
        if isinstance(target, str):
            return Plan(self.package, None, target)
        markers = marker_environment(env)
        for version in sorted(facts.releases("xformers"), key=Version, reverse=True):
            pins = [
                str(r.specifier)
                for r in facts.requirements("xformers", version, markers) or []
                if r.name == "torch"
            ]
            if any(spec == f"=={target.torch}" for spec in pins):
                index = TORCH_INDEX.format(variant=target.variant)
                why = (
                    f"xformers {version}'s wheel pins torch=={target.torch} (its metadata); "
                    "one build per CUDA variant"
                )
                return Plan(self.package, f"pip install xformers=={version} --index-url {index}", why)
        return Plan(self.package, None, f"no xformers release in the release facts pins torch {target.torch}")
