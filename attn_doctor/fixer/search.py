"""The search: the cheapest combination of candidate versions over at most MAX_CHANGED_PACKAGES
packages, by branch and bound. The answer is the one an exhaustive search gives (the cost orders
every combination, ties broken by the names and versions themselves), found without matching the
combinations that a lower bound proves cannot beat the best so far.

Packages are tried fewest first, each set of packages depth-first in name order, candidates
nearest first. The bound of a partial combination: the findings it leaves for certain (rules that
read none of its packages keep their verdict; rules whose packages are all chosen are decided),
its downgrades (plus the packages with no upgrade to choose), its package count, and its ranks
(plus 1 for each package still to choose). A decided rule that fails and did not fail before is a
conflict: nothing below that branch can be proposed. The search stops when even the bound of every
larger set of packages is worse than the best found: the answer cannot improve."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Protocol

from attn_doctor.fixer.candidates import Candidate
from attn_doctor.fixer.evaluate import Versions

MAX_CHANGED_PACKAGES = 8  # every package family the rules name, with room to spare
# A safety net, not the stopping rule (the bound is): on the README-like stacks of
# benchmarks/fix_search.py (docs/performance.md) the search matches at most 10 combinations in
# full, where the exhaustive search it replaced tried up to 65,339 (117 CPU-seconds).
MAX_ASSIGNMENTS = 100_000

Cost = tuple[int, int, int, int, tuple[tuple[str, str], ...]]
Bound = tuple[int, int, int, int]


class Rules(Protocol):
    """What the search asks of the evaluator (fixer.evaluate.Evaluator)."""

    baseline: frozenset[str]
    reads: dict[str, frozenset[str]]

    def readers(self, names: Iterable[str]) -> frozenset[str]: ...

    def failing(self, versions: Versions) -> frozenset[str]: ...

    def affected(self, rule_id: str, versions: Versions) -> bool: ...

    def costly(self, rule_id: str) -> bool: ...

    def consistent(self, versions: Versions) -> bool: ...


@dataclass(frozen=True)
class Outcome:
    changes: tuple[Candidate, ...]
    failing: frozenset[str]  # the rules still (or newly) affected with these changes

    @property
    def versions(self) -> dict[str, str]:
        return {change.package: change.version for change in self.changes}

    def cost(self) -> Cost:
        """Fewest findings left, then fewest downgrades, fewest packages, smallest moves."""
        return (
            len(self.failing),
            sum(change.downgrade for change in self.changes),
            len(self.changes),
            sum(change.rank for change in self.changes),
            tuple(sorted(self.versions.items())),
        )


@dataclass(frozen=True)
class SearchResult:
    best: Outcome
    evaluated: int  # combinations matched in full
    bounded: bool  # stopped at a bound before trying every combination that could do better


Report = Callable[[int, Outcome], None]  # combinations matched so far, the best so far


def bound() -> str:
    return f"at most {MAX_CHANGED_PACKAGES} packages changed and {MAX_ASSIGNMENTS:,} combinations"


class _Capped(Exception):
    """MAX_ASSIGNMENTS combinations matched."""


def search(
    evaluator: Rules, options: dict[str, list[Candidate]], report: Report | None = None
) -> SearchResult:
    """The cheapest outcome that makes nothing fail that did not fail before (no conflict)."""
    state = _Search(evaluator, options, report or (lambda evaluated, best: None))
    packages = sorted(name for name, candidates in options.items() if candidates)
    # bounds over every set of packages: what no change can reach, and the packages with an upgrade
    out_of_reach = len(evaluator.baseline - evaluator.readers(packages))
    upgradable = sum(not options[name][0].downgrade for name in packages)
    try:
        for size in range(1, len(packages) + 1):
            # any set of ``size`` packages or more leaves, downgrades and moves at least this much
            if (out_of_reach, max(0, size - upgradable), size, size) > state.best_bound():
                break  # the answer cannot improve
            if size > MAX_CHANGED_PACKAGES:
                return state.result(bounded=True)
            for subset in combinations(packages, size):
                state.explore(subset)
    except _Capped:
        return state.result(bounded=True)
    return state.result(bounded=False)


class _Search:
    def __init__(self, evaluator: Rules, options: dict[str, list[Candidate]], report: Report) -> None:
        self.evaluator = evaluator
        self.options = options
        self.report = report
        self.best = Outcome((), evaluator.baseline)
        self._best_cost = self.best.cost()
        self.evaluated = 0

    def result(self, bounded: bool) -> SearchResult:
        self.report(self.evaluated, self.best)
        return SearchResult(self.best, self.evaluated, bounded)

    def best_bound(self) -> Bound:
        return self._best_cost[:4]

    def explore(self, subset: tuple[str, ...]) -> None:
        """Every combination of candidates for exactly these packages that the bound leaves open."""
        evaluator = self.evaluator
        touched = evaluator.readers(subset)
        fixed = len(evaluator.baseline - touched)  # rules no package of the subset reads keep failing
        forced = [0] * (len(subset) + 1)  # packages from here on that can only move down
        for depth in reversed(range(len(subset))):
            forced[depth] = forced[depth + 1] + self.options[subset[depth]][0].downgrade
        if (fixed, forced[0], len(subset), len(subset)) > self.best_bound():
            return
        # the rules decided once the package at each depth is chosen (the last of theirs to be),
        # those without release facts first: they are cheap to match and prune as well
        decided: list[list[str]] = [[] for _ in subset]
        for rule_id in sorted(touched, key=lambda rule_id: (evaluator.costly(rule_id), rule_id)):
            depth = max(i for i, name in enumerate(subset) if name in evaluator.reads[rule_id])
            decided[depth].append(rule_id)
        self._descend(_Branch(subset, decided, forced, fixed), 0, (), {}, 0)

    def _descend(
        self, branch: _Branch, depth: int, chosen: tuple[Candidate, ...], versions: dict[str, str], left: int
    ) -> None:
        """Each candidate at ``depth`` on top of ``chosen``, which leaves ``left`` decided rules failing."""
        evaluator = self.evaluator
        size = len(branch.subset)
        for candidate in self.options[branch.subset[depth]]:
            now = {**versions, candidate.package: candidate.version}
            picked = (*chosen, candidate)
            # at least this many downgrades and ranks, however the packages still open are chosen
            downgrades = sum(c.downgrade for c in picked) + branch.forced[depth + 1]
            ranks = sum(c.rank for c in picked) + size - depth - 1
            failing = branch.fixed + left
            open_ = True
            for rule_id in branch.decided[depth]:  # matched only while the branch can still win
                if (failing, downgrades, size, ranks) > self.best_bound():
                    break
                if evaluator.affected(rule_id, now):
                    if rule_id not in evaluator.baseline:
                        open_ = False  # a conflict: every combination below makes a new rule fail
                        break
                    failing += 1
            if not open_ or (failing, downgrades, size, ranks) > self.best_bound():
                continue
            if depth + 1 < size:
                self._descend(branch, depth + 1, picked, now, failing - branch.fixed)
                continue
            if not evaluator.consistent(now):
                continue  # breaks a pin between two packages (torch's triton): never proposed
            if self.evaluated == MAX_ASSIGNMENTS:
                raise _Capped
            self.evaluated += 1
            outcome = Outcome(picked, evaluator.failing(now))
            if outcome.cost() < self._best_cost:
                self.best, self._best_cost = outcome, outcome.cost()
            self.report(self.evaluated, self.best)


@dataclass(frozen=True)
class _Branch:
    """One set of packages to change: in DFS order, the rules each depth decides, the packages
    from each depth on that can only move down, and the findings no package of it can touch."""

    subset: tuple[str, ...]
    decided: list[list[str]]
    forced: list[int]
    fixed: int
