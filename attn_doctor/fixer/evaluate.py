"""Which rules fail when some package versions change: the real matcher on the what-if
environment, memoized per rule and the versions that rule reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from attn_doctor.engine.matcher import Verdict, match
from attn_doctor.engine.schema import Rule
from attn_doctor.facts.model import Environment
from attn_doctor.planner.pins import broken_pins
from attn_doctor.releases.facts import ReleaseFacts

IMPLIED = "implied by "  # the origin of a package a requirements target implies (facts/implied.py)
Versions = Mapping[str, str]  # package (the rules' name) -> version
_Own = tuple[tuple[str, str], ...]  # the versions one rule reads, sorted


def with_versions(env: Environment, versions: Versions) -> Environment:
    """``env`` with these installed packages at these versions.

    torch keeps its installed build unless its version names a variant (``2.7.1+cu128``, a
    candidate the torch planner proposes): a bare version number does not choose one.
    """
    if not versions:
        return env
    overrides = {
        name: replace(env.packages[name], version=version, origin="attn-doctor fix")
        for name, version in versions.items()
    }
    source = "fix: " + " ".join(f"{name}=={version}" for name, version in sorted(versions.items()))
    moved = env.with_packages(overrides, source)
    changed = moved if "+" in versions.get("torch", "") else replace(moved, torch_build=env.torch_build)
    implied = [name for name, package in changed.packages.items() if package.origin.startswith(IMPLIED)]
    if not implied:
        return changed
    # what a requirements target implies follows what it states: pip installs the new pins
    from attn_doctor.facts.implied import complete
    from attn_doctor.releases.facts import snapshot

    stated = {name: p for name, p in changed.packages.items() if name not in implied or name in versions}
    return complete(replace(changed, packages=stated, origins=dict(changed.origins)), snapshot())


def _with_parents(names: Iterable[str], env: Environment) -> frozenset[str]:
    """``names`` and the packages that imply them, transitively ("implied by torch 2.6.0 ...")."""
    found, todo = set(names), list(names)
    while todo:
        package = env.packages.get(todo.pop())
        if package is not None and package.origin.startswith(IMPLIED):
            parent = package.origin.removeprefix(IMPLIED).split(" ", 1)[0]
            if parent not in found:
                found.add(parent)
                todo.append(parent)
    return frozenset(found)


class Evaluator:
    """The ids of ``rules`` that are affected in ``env`` with some versions changed.

    ``rules`` are the rules that can fail the run; a rule's verdict depends only on the versions
    of the packages it reads, so each (rule, those versions) is matched once, and each what-if
    environment (those versions) is built once for every rule that reads the same ones.
    """

    def __init__(self, env: Environment, rules: list[Rule], facts: ReleaseFacts) -> None:
        self._env = env
        self.facts = facts
        self._consistent: dict[_Own, bool] = {}
        self._memo: dict[tuple[str, _Own], bool] = {}
        self._envs: dict[_Own, Environment] = {}
        self.rules = {rule.id: rule for rule in rules}
        # Affects.reads is computed on each access: read once here, not once per combination; a
        # package a stated one implies (torch's triton) changes with it, so the rule reads both
        self.reads = {rule.id: _with_parents(rule.affects.reads, env) for rule in rules}
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

    def consistent(self, versions: Versions) -> bool:
        """Whether these changes keep every exact pin between the packages (planner.pins): torch
        2.6.0 beside triton 3.3.0 is no plan, whatever the rules say."""
        own = tuple(sorted(versions.items()))
        verdict = self._consistent.get(own)
        if verdict is None:
            what_if = with_versions(self._env, versions)
            verdict = self._consistent[own] = not broken_pins(what_if, self.facts, versions)
        return verdict

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
