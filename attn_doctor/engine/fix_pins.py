"""A rule's fix pins, checked against what the target's own releases require.

A rule may say ``triton>=3.5``; beside torch 2.7.1, whose metadata pins ``triton==3.3.1``, pip
would refuse that pin. The report then names the companion change the release facts allow
(``torch>=2.9.0``, the first release that pins a triton in range), or says that none is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from attn_doctor.facts.model import Environment, Package, marker_environment
from attn_doctor.facts.names import rule_name
from attn_doctor.releases.facts import ReleaseFacts, snapshot


@dataclass(frozen=True)
class FixPins:
    pins: tuple[str, ...]  # the rule's pins, then the companions they need
    conflicts: tuple[str, ...]  # "torch 2.7.1 requires triton==3.3.1", one per pin pip would refuse


def reconcile(pins: tuple[str, ...], env: Environment, facts: ReleaseFacts | None = None) -> FixPins:
    facts = facts or snapshot()
    markers = marker_environment(env)
    companions: list[str] = []
    conflicts: list[str] = []
    for pin in pins:
        try:
            wanted = Requirement(pin)
        except InvalidRequirement:
            continue
        name = rule_name(wanted.name)
        for holder in env.packages.values():
            if holder.version is None or rule_name(holder.name) == name:
                continue
            need = _requirement_on(facts, holder.distribution, holder.version, name, markers)
            if need is None or _meet(facts, name, need, wanted.specifier):
                continue
            conflicts.append(f"{holder.name} {holder.version} requires {need.name}{need.specifier}")
            first = _first_release_allowing(facts, holder, name, wanted.specifier, markers)
            if first is not None:
                companions.append(f"{holder.name}>={first}")
    return FixPins(tuple(dict.fromkeys([*pins, *companions])), tuple(conflicts))


def _requirement_on(
    facts: ReleaseFacts, distribution: str, version: str, name: str, markers: dict[str, str]
) -> Requirement | None:
    for requirement in facts.requirements(distribution, version, markers) or []:
        if rule_name(requirement.name) == name:
            return requirement
    return None


def _meet(facts: ReleaseFacts, name: str, need: Requirement, wanted: SpecifierSet) -> bool:
    """Whether some release of ``name`` satisfies both (unknown releases: assume they can)."""
    releases = facts.releases(name)
    if not releases:
        return True
    return any(
        need.specifier.contains(version, prereleases=True) and wanted.contains(version, prereleases=True)
        for version in releases
    )


def _first_release_allowing(
    facts: ReleaseFacts, holder: Package, name: str, wanted: SpecifierSet, markers: dict[str, str]
) -> str | None:
    """The oldest release of ``holder`` after the target's whose requirement on ``name`` meets ``wanted``."""
    assert holder.version is not None
    installed = Version(Version(holder.version).public)
    for version in sorted(facts.releases(holder.distribution), key=Version):
        if Version(version) <= installed or Version(version).is_prerelease:
            continue
        need = _requirement_on(facts, holder.distribution, version, name, markers)
        if need is not None and _meet(facts, name, need, wanted):
            return version
    return None
