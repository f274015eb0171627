"""Exact pins between the target's packages, from their releases' metadata: torch 2.6.0 requires
triton==3.2.0, xformers 0.0.30 torch==2.7.0. A plan that changes one side of a pin and not the
other installs a pair the release was never built for (pip warns and goes on), so the planners
and ``fix`` move both or neither."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from attn_doctor.facts.model import Environment, marker_environment
from attn_doctor.facts.names import rule_name
from attn_doctor.releases.facts import ReleaseFacts


def exact_pins(env: Environment, facts: ReleaseFacts, package: str, version: str) -> dict[str, str]:
    """The target's packages (the rules' names) that ``package`` ``version`` pins with ``==``."""
    try:
        public = Version(version).public
    except InvalidVersion:
        return {}
    pins = {}
    for requirement in facts.requirements(package, public, marker_environment(env)) or []:
        name = rule_name(canonicalize_name(requirement.name))
        if name == package or name not in env.packages:
            continue
        for spec in requirement.specifier:
            if spec.operator == "==" and not spec.version.endswith(".*"):
                pins[name] = spec.version
    return pins


def pinned_alongside(
    env: Environment, facts: ReleaseFacts, versions: Mapping[str, Iterable[str]]
) -> dict[str, dict[Version, str]]:
    """For each package's candidate versions, the versions they pin of the others: the ones a plan
    must be able to choose beside them (torch 2.7.1 brings triton 3.3.1)."""
    found: dict[str, dict[Version, str]] = {}
    for package, candidates in versions.items():
        for version in candidates:
            for name, pinned in exact_pins(env, facts, package, version).items():
                found.setdefault(name, {})[Version(pinned)] = pinned
    return found


def broken_pins(env: Environment, facts: ReleaseFacts, changed: Iterable[str]) -> list[str]:
    """Each exact pin between a ``changed`` package and another that ``env`` breaks, in words."""
    broken = []
    changed = set(changed)
    for name, package in env.packages.items():
        if package.version is None:
            continue
        for pinned_name, pinned in exact_pins(env, facts, name, package.version).items():
            if name not in changed and pinned_name not in changed:
                continue  # neither side moves: check reports it, the plan does not make it
            other = env.packages[pinned_name].version
            if other is not None and not _same(other, pinned):
                broken.append(f"{name} {package.version} pins {pinned_name}=={pinned}, not {other}")
    return broken


def _same(version: str, pinned: str) -> bool:
    try:
        return Version(version).public == Version(pinned).public
    except InvalidVersion:
        return version == pinned
