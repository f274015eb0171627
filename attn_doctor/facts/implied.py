"""Implied facts: what a declared target's releases require, from the release-facts snapshot.

A requirements file that states ``torch==2.5.1`` also installs ``triton==3.1.0`` on Linux x86_64
(torch's own metadata pins it) and, without a local label, the CUDA 12.4 build. The target is
completed with exact pins only (a range names no version), until nothing new follows; stated
packages are never replaced. Each implied fact names the release and the requirement behind it.
"""

from __future__ import annotations

from dataclasses import replace

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from attn_doctor.facts.model import MAYBE, Environment, Package, TorchBuild, marker_environment
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
    """``env`` with the packages (and torch build) its stated releases imply: a pin names the version,
    a range names the releases it admits (the version unknown, the package there), and a stated
    package without a version takes the version another release pins, where its range admits it."""
    markers = marker_environment(env)
    packages = dict(env.packages)
    # the releases the snapshot knows, each read once (a requirements file may name 500,000 others)
    newest = [package for package in packages.values() if facts.knows(package.distribution)]
    for _ in range(MAX_ROUNDS):
        added: dict[str, Package] = {}
        for package in newest:
            if package.version is None:
                added.update(_from_every_release(package, packages, added, env, markers, facts))
            for requirement in _requirements(package, markers, facts):
                name, version = rule_name(requirement.name), _pinned(requirement, facts)
                if package.name == "torch" and not _same_variant(package, requirement):
                    continue
                origin = f"implied by {package.name} {package.version} (Requires-Dist: {requirement})"
                stated = packages.get(name)
                if name in _STACK and name not in packages and name not in added:
                    spec = None if version else str(requirement.specifier)
                    added[name] = Package(name, version, requirement.name, origin, specifier=spec)
                elif version and stated is not None and _narrows(stated, version):
                    # a range (triton>=3.4.0) does not hide the exact release torch's pin installs
                    packages[name] = replace(
                        stated, version=version, origin=f"{origin}, within {stated.origin}", specifier=None
                    )
                elif version and _disagrees(stated, version):
                    pin = f"{package.name} {package.version} pins {requirement.name}{requirement.specifier}"
                    packages[name] = replace(packages[name], pinned_by=pin)
        if not added:
            break
        packages.update(added)
        newest = list(added.values())
    env.packages = packages
    _unread_requirements(env, facts)
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


_BUILT_FROM_SOURCE = frozenset({"flash-attn", "flash-attn-3"})


def _unread_requirements(env: Environment, facts: ReleaseFacts) -> None:
    """A stack package whose releases the release database does not hold (vllm, deepspeed) installs
    what it requires, which nothing here has read: a stack package it may require is unknown, not
    absent."""
    unread = [
        p
        for p in env.packages.values()
        if p.name in _STACK
        and not p.name.startswith("nvidia-")  # CUDA libraries: they install no Python package
        and not p.origin.startswith("implied by")
        and not facts.knows(p.distribution)
    ]
    if not unread:
        return
    first = unread[0]
    listed = f"{first.name} {first.version or '(no version)'} ({first.origin})"
    # flash-attn and FA3 are not taken to come with an unread package: the index has no binary wheel
    # of either (a source build), so a target that needs one lists it itself (issue 37: LLaVA and
    # Open-Sora list deepspeed, not flash-attn, and their code requires flash_attn)
    for name in sorted(_STACK - set(env.packages) - _BUILT_FROM_SOURCE):
        if name != first.name and MAYBE + name not in env.origins:
            env.origins[MAYBE + name] = (
                f"{listed} is listed and its requirements are not in the release database: "
                f"it may install {name}"
            )


def _narrows(stated: Package, pinned: str) -> bool:
    """A package stated without a version (a range, or unpinned) whose range admits ``pinned``."""
    if stated.version is not None or stated.releases:
        return False
    try:
        return SpecifierSet(stated.specifier or "").contains(pinned, prereleases=True)
    except ValueError:  # InvalidSpecifier, InvalidVersion
        return False


def _from_every_release(
    package: Package,
    packages: dict[str, Package],
    added: dict[str, Package],
    env: Environment,
    markers: dict[str, str],
    facts: ReleaseFacts,
) -> dict[str, Package]:
    """A package stated without a version (``torch`` unpinned, ``torch>=2.4``) is one of the releases
    its range admits: a stack package that each of them pins is there, at one of the versions they
    pin (triton of torch 2.x); one that only some of them pin may be there (``Environment.maybe``)."""
    from attn_doctor.engine.matcher import admitted_releases

    candidates = package.releases or admitted_releases(package, env.python)  # a log's: those it can be
    admitted = [v for v in candidates if facts.release(package.distribution, v)]
    if not admitted:
        return {}
    pins: dict[str, set[str]] = {}
    distributions: dict[str, str] = {}
    for version in admitted:
        release = replace(package, version=version)
        for requirement in _requirements(release, markers, facts):
            name, pinned = rule_name(requirement.name), _pinned(requirement, facts)
            stated = packages.get(name)
            open_range = stated is not None and stated.version is None and not stated.releases
            if name in _STACK and (name not in packages or open_range) and name not in added and pinned:
                if package.name == "torch" and not _same_variant(release, requirement):
                    continue
                pins.setdefault(name, set()).add(pinned)
                distributions.setdefault(name, requirement.name)
    found: dict[str, Package] = {}
    span = f"{admitted[0]}–{admitted[-1]}" if len(admitted) > 1 else admitted[0]
    for name, versions in pins.items():
        ordered = tuple(sorted(versions, key=Version))
        shown = ordered[0] if len(ordered) == 1 else f"{ordered[0]}–{ordered[-1]}"
        requiring = sum(
            1
            for version in admitted
            if any(
                rule_name(r.name) == name and _pinned(r, facts)
                for r in _requirements(replace(package, version=version), markers, facts)
            )
        )
        origin = (
            f"implied by {package.name} without a version ({package.origin}): "
            f"{requiring} of the {len(admitted)} releases it admits ({span}) pin {name} {shown}"
        )
        stated = packages.get(name)
        if stated is not None:  # a range of its own (triton>=3.4.0): the releases both admit
            within = _within(stated, ordered) if requiring == len(admitted) else ()
            if within:
                packages[name] = replace(stated, releases=within, origin=f"{origin}, within {stated.origin}")
        elif requiring == len(admitted):
            found[name] = Package(name, None, distributions[name], origin, releases=ordered)
        else:
            env.origins[MAYBE + name] = origin
    return found


def _within(stated: Package, versions: tuple[str, ...]) -> tuple[str, ...]:
    """Of ``versions``, those the stated package's own range admits."""
    try:
        spec = SpecifierSet(stated.specifier or "")
    except ValueError:
        return ()
    return tuple(version for version in versions if spec.contains(version, prereleases=True))


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
