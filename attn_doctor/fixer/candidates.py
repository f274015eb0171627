"""Candidate versions: the releases the rules name for a package, one per class of versions the
rules cannot tell apart, nearest to the installed version first."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from attn_doctor.engine.matcher import Finding
from attn_doctor.engine.schema import Rule
from attn_doctor.facts.names import rule_name


@dataclass(frozen=True)
class Candidate:
    package: str  # the rules' name for it
    version: str  # as a rule spells it
    rank: int  # 1 is the nearest to the installed version
    downgrade: bool


def named_versions(package: str, rules: Iterable[Rule]) -> dict[Version, str]:
    """Every final release a rule names for ``package``: the boundaries of its ``affects``
    specifiers (``<4.52.1`` names 4.52.1) and its fix pins (``>=4.44.1`` names 4.44.1).

    Where a version is spelled twice (``2.4`` and ``2.4.0``) the longer spelling is kept.
    """
    spellings: dict[Version, str] = {}
    for rule in rules:
        for specifiers in _specifier_sets(package, rule):
            for specifier in specifiers:
                text = specifier.version.removesuffix(".*")
                try:
                    version = Version(text)
                except ValueError:  # InvalidVersion, or a number past the int-string limit
                    continue
                if version.is_prerelease or version.local:
                    continue  # a nightly or a local build is no release to propose
                if len(text) > len(spellings.get(version, "")):
                    spellings[version] = text
    return spellings


def suggested_versions(package: str, findings: Iterable[Finding]) -> dict[Version, str]:
    """The releases the release facts propose for ``package`` (each a real release in the
    snapshot: xformers 0.0.30 for torch 2.7.0), from the findings' computed fixes."""
    found: dict[Version, str] = {}
    for finding in findings:
        for reason in finding.reasons:
            for pin in reason.suggested_pins:
                name, _, version = pin.partition("==")
                if rule_name(name) == package:
                    found[Version(version)] = version
    return found


def _specifier_sets(package: str, rule: Rule) -> list[SpecifierSet]:
    sets = [rule.affects.packages[package]] if package in rule.affects.packages else []
    for pin in rule.fix_pins:
        try:
            requirement = Requirement(pin)
        except InvalidRequirement:
            continue  # the schema's pin syntax is looser than PEP 508 names; such a pin names nothing
        if rule_name(requirement.name) == package:
            sets.append(requirement.specifier)
    return sets


def candidates(
    package: str,
    installed: Version,
    named: dict[Version, str],
    specifiers: list[SpecifierSet],
    distinct: Iterable[Version] = (),
) -> list[Candidate]:
    """One version per class that ``specifiers`` (the rules that can fail) tell apart, leaving out
    the installed version's class (it changes no verdict): the lowest of each class above the
    installed version (the smallest upgrade), then the highest of each class below it. A
    ``distinct`` version (proposed by the release facts, which no range describes) is a class of
    its own."""
    own = set(distinct)

    def signature(version: Version) -> tuple[object, ...]:
        return (
            *(spec.contains(version, prereleases=True) for spec in specifiers),
            version in own and version,
        )

    upgrades = sorted(v for v in named if v > installed)
    downgrades = sorted((v for v in named if v < installed), reverse=True)
    seen = {signature(installed)}
    chosen: list[Candidate] = []
    for version in [*upgrades, *downgrades]:
        if signature(version) in seen:
            continue
        seen.add(signature(version))
        chosen.append(Candidate(package, named[version], len(chosen) + 1, version < installed))
    return chosen
