"""Implied facts: what a declared target's releases require, from the release-facts snapshot.

A requirements file that states ``torch==2.5.1`` also installs ``triton==3.1.0`` on Linux x86_64
(torch's own metadata pins it) and, without a local label, the CUDA 12.4 build. The target is
completed with exact pins only (a range names no version), until nothing new follows; stated
packages are never replaced. Each implied fact names the release and the requirement behind it.
"""

from __future__ import annotations

from dataclasses import replace

from packaging.requirements import Requirement
from packaging.version import Version

from attn_doctor.facts.model import Environment, Package, TorchBuild, marker_environment
from attn_doctor.facts.names import WATCHED, rule_name
from attn_doctor.releases.facts import ReleaseFacts

MAX_ROUNDS = 5
_STACK = {rule_name(name) for name in WATCHED}
# torch's metadata names its CUDA runtime: nvidia-cuda-runtime-cu12==12.4.127, cuda-toolkit[...]==13.2.2
_CUDA_RUNTIMES = {
    "nvidia-cuda-runtime-cu11",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime-cu13",
    "cuda-toolkit",
}


def complete(env: Environment, facts: ReleaseFacts) -> Environment:
    """``env`` with the packages (and torch build) its stated releases imply."""
    markers = marker_environment(env)
    packages = dict(env.packages)
    # the releases the snapshot knows, each read once (a requirements file may name 500,000 others)
    newest = [package for package in packages.values() if facts.knows(package.distribution)]
    for _ in range(MAX_ROUNDS):
        added: dict[str, Package] = {}
        for package in newest:
            for requirement in _requirements(package, markers, facts):
                name, version = rule_name(requirement.name), _pinned(requirement, facts)
                if package.name == "torch" and not _same_variant(package, requirement):
                    continue
                if name in _STACK and name not in packages and name not in added and version:
                    origin = f"implied by {package.name} {package.version} (Requires-Dist: {requirement})"
                    added[name] = Package(name, version, requirement.name, origin)
                elif version and _disagrees(packages.get(name), version):
                    pin = f"{package.name} {package.version} pins {requirement.name}{requirement.specifier}"
                    packages[name] = replace(packages[name], pinned_by=pin)
        if not added:
            break
        packages.update(added)
        newest = list(added.values())
    env.packages = packages
    torch = packages.get("torch")
    if torch is not None and env.torch_build is None and torch.version and "+" not in torch.version:
        for requirement in _requirements(torch, markers, facts):
            version = _pinned(requirement, facts)
            if requirement.name in _CUDA_RUNTIMES and version:
                env.torch_build = TorchBuild(cuda=".".join(version.split(".")[:2]))
                env.origins["torch_build"] = (
                    f"implied by torch {torch.version} (Requires-Dist: {requirement})"
                )
                break
    return env


def _disagrees(stated: Package | None, pinned: str) -> bool:
    """A stated version (not itself implied) that is not the release another package pins."""
    if stated is None or stated.version is None or stated.origin.startswith("implied by"):
        return False
    try:
        return Version(stated.version).release != Version(pinned).release
    except ValueError:
        return False


def _same_variant(torch: Package, requirement: Requirement) -> bool:
    """The snapshot has the registry's default torch wheel (a CUDA build). A ``+cu121`` build pins
    the same triton but its own CUDA libraries; a ``+cpu`` or ``+rocm`` build pins neither."""
    label = (torch.version or "").partition("+")[2]
    if not label:
        return True
    if not label.startswith("cu"):
        return False
    return not requirement.name.startswith(("nvidia-", "cuda-"))


def _requirements(package: Package, markers: dict[str, str], facts: ReleaseFacts) -> list[Requirement]:
    if package.version is None:
        return []
    return facts.requirements(package.distribution, package.version, markers) or []


def _pinned(requirement: Requirement, facts: ReleaseFacts) -> str | None:
    """What pip installs for a pin: ``==X`` is X; ``~=X.Y.Z`` the newest X.Y.* release in the
    snapshot (X.Y.Z where the snapshot does not know the package). A range names no version."""
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or "*" in specifiers[0].version:
        return None
    operator, version = specifiers[0].operator, specifiers[0].version
    if operator in ("==", "==="):
        return version
    if operator != "~=":
        return None
    matching = [v for v in facts.releases(requirement.name) if requirement.specifier.contains(v)]
    return max(matching, key=Version) if matching else version
