"""Which rules fail when some package versions change: the real matcher on the what-if
environment, memoized per rule and the versions that rule reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from attn_doctor.engine.matcher import Verdict, match
from attn_doctor.engine.schema import Rule
from attn_doctor.facts.model import Environment

IMPLIED = "implied by "  # the origin of a package a requirements target implies (facts/implied.py)
Versions = Mapping[str, str]  # package (the rules' name) -> version
_Own = tuple[tuple[str, str], ...]  # the versions one rule reads, sorted


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
    of the packages it reads, so each (rule, those versions) is matched once, and each what-if
    environment (those versions) is built once for every rule that reads the same ones.
    """

    def __init__(self, env: Environment, rules: list[Rule]) -> None:
        self._env = env
        self._memo: dict[tuple[str, _Own], bool] = {}
        self._envs: dict[_Own, Environment] = {}
        self.rules = {rule.id: rule for rule in rules}
        # Affects.reads is computed on each access: read once here, not once per combination
        self.reads = {rule.id: frozenset(rule.affects.reads) for rule in rules}
        self._readers: dict[str, frozenset[str]] = {}
        for rule_id, names in self.reads.items():
            for name in names:
                self._readers[name] = self._readers.get(name, frozenset()) | {rule_id}
        self.matched = 0  # rules matched (memo misses): the work a search costs
        self.baseline = frozenset(rule.id for rule in rules if self.affected(rule.id, {}))

    def readers(self, names: Iterable[str]) -> frozenset[str]:
        """The rules whose verdict a change to any of ``names`` can change."""
        return frozenset().union(*(self._readers.get(name, frozenset()) for name in names))

    def failing(self, versions: Versions) -> frozenset[str]:
        touched = self.readers(versions)
        return (self.baseline - touched) | {
            rule_id for rule_id in touched if self.affected(rule_id, versions)
        }

    def costly(self, rule_id: str) -> bool:
        """Whether the rule reads the release facts (wheel matrices, requirements): slow to match."""
        return bool(self.rules[rule_id].affects.release_packages)

    def affected(self, rule_id: str, versions: Versions) -> bool:
        """Whether the rule is affected with these versions (only those it reads count)."""
        reads = self.reads[rule_id]
        own = tuple(sorted(item for item in versions.items() if item[0] in reads))
        key = (rule_id, own)
        verdict = self._memo.get(key)
        if verdict is None:
            env = self._envs.get(own)
            if env is None:
                env = self._envs[own] = with_versions(self._env, dict(own))
            self.matched += 1
            verdict = self._memo[key] = match(self.rules[rule_id], env).verdict is Verdict.AFFECTED
        return verdict
