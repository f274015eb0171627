"""The search: every combination of candidate versions over at most MAX_CHANGED_PACKAGES packages,
fewest packages first, stopping after MAX_ASSIGNMENTS combinations. Deterministic: packages in
name order, candidates nearest first, ties broken by the names and versions themselves."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, product

from attn_doctor.fixer.candidates import Candidate
from attn_doctor.fixer.evaluate import Evaluator

MAX_CHANGED_PACKAGES = 8  # every package family the rules name, with room to spare
MAX_ASSIGNMENTS = 100_000  # a few seconds at worst; the stack's worst case so far takes 12,000

Cost = tuple[int, int, int, int, tuple[tuple[str, str], ...]]


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
    evaluated: int  # combinations matched
    bounded: bool  # stopped at a bound before trying every combination that could do better


def bound() -> str:
    return f"at most {MAX_CHANGED_PACKAGES} packages changed and {MAX_ASSIGNMENTS:,} combinations"


def search(evaluator: Evaluator, options: dict[str, list[Candidate]]) -> SearchResult:
    """The cheapest outcome that makes nothing fail that did not fail before (no conflict)."""
    best = Outcome((), evaluator.baseline)
    evaluated = 0
    packages = sorted(name for name, candidates in options.items() if candidates)
    for size in range(1, len(packages) + 1):
        if best.cost()[:2] == (0, 0):
            break  # everything cleared without a downgrade: more packages can only cost more
        if size > MAX_CHANGED_PACKAGES:
            return SearchResult(best, evaluated, bounded=True)
        for subset in combinations(packages, size):
            for changes in product(*(options[name] for name in subset)):
                if evaluated == MAX_ASSIGNMENTS:
                    return SearchResult(best, evaluated, bounded=True)
                evaluated += 1
                outcome = Outcome(changes, evaluator.failing({c.package: c.version for c in changes}))
                if outcome.failing <= evaluator.baseline and outcome.cost() < best.cost():
                    best = outcome
    return SearchResult(best, evaluated, bounded=False)
