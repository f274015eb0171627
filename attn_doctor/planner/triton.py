"""triton: the release the target's torch pins (its wheel metadata: ``triton==3.2.0; platform_system
== "Linux"``); on Windows, where torch pins none, triton-windows of that release line."""

from __future__ import annotations

from packaging.version import Version

from attn_doctor.facts.model import Environment
from attn_doctor.planner.interface import Plan, WayOut
from attn_doctor.planner.target import torch_install, torch_release
from attn_doctor.releases.facts import ReleaseFacts

PACKAGE = "triton"
# torch pins triton only on Linux x86_64 (its metadata's marker); the pin is read there
_LINUX = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64"}
# triton-windows builds each 3.X.0.postN from triton's release/3.X.x branch (its README: "forked
# from `release/3.2.x` branch of the official repo"), so an upper bound keeps torch's line


class TritonPlanner:
    package = PACKAGE

    def plan(self, env: Environment, facts: ReleaseFacts, version: str | None = None) -> Plan:
        torch = torch_release(env)
        if torch is None:
            return Plan(PACKAGE, version, None, "torch's version is not known: triton follows torch's pin")
        build = env.torch_build
        if build is not None and build.cuda is None and build.hip is None:
            why = f"torch {torch} is a CPU build: its wheel requires no triton (its metadata)"
            return Plan(PACKAGE, version, None, why)
        pinned = torch_pins_triton(facts, torch)
        if pinned is None:
            why = f"torch {torch}'s metadata in the release facts pins no triton"
            return Plan(PACKAGE, version, None, why)
        if env.platform == "windows":
            return _windows(torch, Version(pinned))
        if version is not None and version != pinned:
            return _other_torch(version, torch, pinned, facts, env)
        why = f"torch {torch} pins triton=={pinned} (its wheel metadata): another triton breaks torch.compile"
        return Plan(PACKAGE, pinned, f"pip install triton=={pinned}", why, requirement=f"triton=={pinned}")


def _windows(torch: str, pinned: Version) -> Plan:
    requirement = f"triton-windows<{pinned.major}.{pinned.minor + 1}"
    why = (
        f"torch {torch} pins triton=={pinned} on Linux (none on Windows); triton-windows "
        f"{pinned.major}.{pinned.minor}.x is built from that release line"
    )
    return Plan(PACKAGE, None, f'pip install "{requirement}"', why, requirement=requirement)


def torch_pins_triton(facts: ReleaseFacts, torch: str) -> str | None:
    """The triton release torch ``torch``'s Linux wheel requires (``==``), or None."""
    for requirement in facts.requirements("torch", torch, _LINUX) or []:
        if requirement.name in ("triton", "pytorch-triton"):
            for spec in requirement.specifier:
                if spec.operator == "==":
                    return spec.version
    return None


def _other_torch(version: str, torch: str, pinned: str, facts: ReleaseFacts, env: Environment) -> Plan:
    """triton ``version`` is wanted: the torch releases that pin it."""
    pinning = sorted(
        (t for t in facts.releases("torch") if torch_pins_triton(facts, t) == version), key=Version
    )
    why = f"torch {torch} pins triton=={pinned}, not {version}"
    if not pinning:
        return Plan(PACKAGE, version, None, why + f"; no torch release in the release facts pins {version}")
    newest = pinning[-1]
    way = WayOut(
        title=f"torch {newest}, which pins triton=={version}",
        commands=(torch_install(newest, env),),
        why=f"torch {', '.join(pinning)} pin{'s' * (len(pinning) == 1)} triton=={version} (their metadata)",
    )
    return Plan(PACKAGE, version, None, why, ways_out=(way,))
