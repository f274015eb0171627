"""Which rules fail when some package versions change: the real matcher on the what-if
environment, memoized per rule and the versions that rule reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from attn_doctor.engine.matcher import Verdict, match
from attn_doctor.engine.schema import Rule
from attn_doctor.facts.model import Environment

IMPLIED = "implied by "  # the origin of a package a requirements target implies (facts/implied.py)
Versions = Mapping[str, str]  # package (the rules' name) -> version


def with_versions(env: Environment, versions: Versions) -> Environment:
    """``env`` with these installed packages at these versions.

    torch keeps its installed build: a version number does not choose the CUDA variant (``+cu121``),
    so rules on torch's CUDA build keep their verdict.
    """
    if not versions:
        return env
    overrides = {
        name: replace(env.packages[name], version=version, origin="attn-doctor fix")
        for name, version in versions.items()
    }
    source = "fix: " + " ".join(f"{name}=={version}" for name, version in sorted(versions.items()))
    changed = replace(env.with_packages(overrides, source), torch_build=env.torch_build)
    implied = [name for name, package in changed.packages.items() if package.origin.startswith(IMPLIED)]
    if not implied:
        return changed
    # what a requirements target implies follows what it states: pip installs the new pins
    from attn_doctor.facts.implied import complete
    from attn_doctor.releases.facts import snapshot

    stated = {name: p for name, p in changed.packages.items() if name not in implied or name in versions}
    return complete(replace(changed, packages=stated, origins=dict(changed.origins)), snapshot())


class Evaluator:
    """The ids of ``rules`` that are affected in ``env`` with some versions changed.

    ``rules`` are the rules that can fail the run; a rule's verdict depends only on the versions
    of the packages it names, so each (rule, those versions) is matched once.
    """

    def __init__(self, env: Environment, rules: list[Rule]) -> None:
        self._env = env
        self._memo: dict[tuple[str, tuple[tuple[str, str], ...]], bool] = {}
        self._readers: dict[str, list[Rule]] = {}
        for rule in rules:
            for name in rule.affects.reads:
                self._readers.setdefault(name, []).append(rule)
        self.rules = {rule.id: rule for rule in rules}
        self.baseline = frozenset(rule.id for rule in rules if self._affected(rule, {}))

    def failing(self, versions: Versions) -> frozenset[str]:
        touched = {rule.id: rule for name in versions for rule in self._readers.get(name, ())}
        kept = self.baseline - touched.keys()
        return kept | {rule_id for rule_id, rule in touched.items() if self._affected(rule, versions)}

    def _affected(self, rule: Rule, versions: Versions) -> bool:
        own = tuple(sorted((name, v) for name, v in versions.items() if name in rule.affects.reads))
        key = (rule.id, own)
        if key not in self._memo:
            finding = match(rule, with_versions(self._env, dict(own)))
            self._memo[key] = finding.verdict is Verdict.AFFECTED
        return self._memo[key]
