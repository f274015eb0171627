"""`fix`'s search (issue 23): the answer of an exhaustive search, found without matching what a
bound rules out; few rules matched on the slowest README-like stack (its time is measured by
benchmarks/fix_search.py, not here: no timed tests); live progress on a terminal only."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterable, Mapping
from itertools import combinations, product
from pathlib import Path
from typing import Any

import pytest

from attn_doctor.fixer import search as search_module
from attn_doctor.fixer.candidates import Candidate
from attn_doctor.fixer.search import Outcome, search
from tests.support import GEMMA2_PROJECT, REPO, cli, under_a_terminal

# The slowest README-like stack found (benchmarks/fix_search.py): a requirements file with
# flash-linear-attention, a T4 and the Gemma-2 seed's features, in a project whose code runs
# Gemma-2. The exhaustive search matched 8,639 combinations here (about 20 s on a 2-core machine).
SLOW_PINS = "torch==2.5.1\ntransformers==4.44.0\nflash-attn==2.6.3\nflash-linear-attention==0.1.2\n"
SEED_FEATURES = ("flash_attention_2", "generate", "sliding_window", "softcap", "alibi", "torch_compile")


@pytest.fixture
def slow_stack(tmp_path: Path) -> list[str]:
    pins = tmp_path / "requirements.txt"
    pins.write_text(SLOW_PINS)
    features = [arg for feature in SEED_FEATURES for arg in ("--feature", feature)]
    return ["--project", str(GEMMA2_PROJECT), "-r", str(pins), "--gpu", "T4", *features]


# --- the search itself, on made-up rules: the same answer as trying every combination ---------


class TableRules:
    """Rules whose verdicts are a random table over the versions each rule reads; some
    combinations break a pin between two packages (a random table too)."""

    def __init__(self, rng: random.Random, packages: list[str], count: int, odds: float) -> None:
        most = min(3, len(packages))
        self.reads = {f"r{i}": frozenset(rng.sample(packages, rng.randint(1, most))) for i in range(count)}
        self._rng, self._odds = rng, odds
        self._table: dict[tuple[str, tuple[tuple[str, str], ...]], bool] = {}
        self._pins: dict[tuple[tuple[str, str], ...], bool] = {}
        self.baseline = frozenset(r for r in self.reads if self.affected(r, {}))

    def readers(self, names: Iterable[str]) -> frozenset[str]:
        return frozenset(r for r, reads in self.reads.items() if reads & set(names))

    def costly(self, rule_id: str) -> bool:
        return rule_id.endswith("1")

    def affected(self, rule_id: str, versions: Mapping[str, str]) -> bool:
        own = tuple(sorted((n, v) for n, v in versions.items() if n in self.reads[rule_id]))
        if (rule_id, own) not in self._table:
            self._table[(rule_id, own)] = self._rng.random() < self._odds
        return self._table[(rule_id, own)]

    def failing(self, versions: Mapping[str, str]) -> frozenset[str]:
        touched = self.readers(versions)
        return (self.baseline - touched) | {r for r in touched if self.affected(r, versions)}

    def consistent(self, versions: Mapping[str, str]) -> bool:
        """Random pins only where the table's own constructor ran (subclasses: every pin kept)."""
        if not hasattr(self, "_pins"):
            return True
        own = tuple(sorted(versions.items()))
        if own not in self._pins:
            self._pins[own] = self._rng.random() < 0.85
        return self._pins[own]


def options_for(rng: random.Random, packages: list[str]) -> dict[str, list[Candidate]]:
    options = {}
    for name in packages:
        ups, downs = rng.randint(0, 3), rng.randint(0, 2)
        moves = [False] * ups + [True] * downs  # upgrades first, nearest first (candidates.py)
        options[name] = [Candidate(name, f"{i + 1}.0", i + 1, down) for i, down in enumerate(moves)]
    return options


def exhaustive(
    rules: TableRules, options: dict[str, list[Candidate]], max_packages: int
) -> tuple[Outcome, int]:
    """Every combination of at most ``max_packages`` packages: the search this one replaced."""
    best, evaluated = Outcome((), rules.baseline), 0
    packages = sorted(name for name, candidates in options.items() if candidates)
    for size in range(1, min(len(packages), max_packages) + 1):
        if best.cost()[:2] == (0, 0):
            break
        for subset in combinations(packages, size):
            for changes in product(*(options[name] for name in subset)):
                evaluated += 1
                if not rules.consistent({c.package: c.version for c in changes}):
                    continue
                outcome = Outcome(changes, rules.failing({c.package: c.version for c in changes}))
                if outcome.failing <= rules.baseline and outcome.cost() < best.cost():
                    best = outcome
    return best, evaluated


@pytest.mark.parametrize("max_packages", [8, 2, 1])
def test_same_answer_as_trying_every_combination(monkeypatch: pytest.MonkeyPatch, max_packages: int) -> None:
    monkeypatch.setattr(search_module, "MAX_CHANGED_PACKAGES", max_packages)
    fewer = 0
    for seed in range(400):
        rng = random.Random(seed)
        packages = [f"p{i}" for i in range(rng.randint(1, 5))]
        rules = TableRules(rng, packages, rng.randint(1, 9), odds=rng.choice([0.2, 0.4, 0.6]))
        options = options_for(rng, packages)
        want, tried = exhaustive(rules, options, max_packages)
        got = search(rules, options)
        assert (got.best.changes, got.best.failing) == (want.changes, want.failing), seed
        assert got.evaluated <= tried, seed
        fewer += got.evaluated < tried
    assert fewer > 100  # and the bound saves work in most of them


def test_stops_when_the_answer_cannot_improve() -> None:
    """One finding no change reaches (the GPU's), one any `a` clears: the first `a` is the answer,
    and every plan with more packages leaves as much and changes more. The old search went on
    through every combination of a, b and c (63 of them)."""
    options = {name: [Candidate(name, f"{i}.0", i, False) for i in (1, 2, 3)] for name in "abc"}

    class Rules(TableRules):
        def __init__(self) -> None:
            self.reads = {
                "gpu-rule": frozenset({"gpu"}),
                "a-rule": frozenset("a"),
                "bc-rule": frozenset("bc"),
            }
            self.baseline = frozenset({"gpu-rule", "a-rule"})

        def affected(self, rule_id: str, versions: Mapping[str, str]) -> bool:
            return rule_id == "gpu-rule" or (rule_id == "a-rule" and "a" not in versions)

    rules = Rules()
    assert exhaustive(rules, options, 8)[1] == 63
    result = search(rules, options)
    assert result.best.versions == {"a": "1.0"} and result.best.failing == {"gpu-rule"}
    assert result.evaluated == 1 and not result.bounded


def test_a_conflict_prunes_the_branch_and_the_report_sees_the_answer() -> None:
    """Only a 2.0 clears old-a, and a 2.0 needs b 2.0 (a-two-b); b 1.0 makes a new rule fail, so
    nothing with it is proposed. One combination is matched in full; the old search tried 8."""
    options = {name: [Candidate(name, "1.0", 1, False), Candidate(name, "2.0", 2, False)] for name in "ab"}

    class Rules(TableRules):
        def __init__(self) -> None:
            self.reads = {"old-a": frozenset("a"), "b-one": frozenset("b"), "a-two-b": frozenset("ab")}
            self.baseline = frozenset({"old-a"})

        def affected(self, rule_id: str, versions: Mapping[str, str]) -> bool:
            if rule_id == "old-a":
                return versions.get("a") != "2.0"
            if rule_id == "b-one":
                return versions.get("b") == "1.0"
            return versions.get("a") == "2.0" and versions.get("b") != "2.0"

    rules = Rules()
    assert exhaustive(rules, options, 8)[1] == 8
    seen: list[tuple[int, dict[str, str]]] = []
    result = search(rules, options, lambda evaluated, best: seen.append((evaluated, best.versions)))
    assert result.best.versions == {"a": "2.0", "b": "2.0"} and result.best.failing == frozenset()
    assert result.evaluated == 1 and seen[-1] == (1, {"a": "2.0", "b": "2.0"})


# --- the real CLI on the slowest README-like stack ----------------------------------------------


def test_slowest_readme_stack_matches_few_combinations(
    slow_stack: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from attn_doctor.fixer import evaluate

    matched = []
    real = evaluate.match  # type: ignore[attr-defined]

    def counted(rule: Any, env: Any) -> Any:
        matched.append(rule.id)
        return real(rule, env)

    monkeypatch.setattr(evaluate, "match", counted)
    text = cli("fix", *slow_stack)
    # the text report shows no rejected versions (only -v does): none are worked out for it
    assert len(matched) <= 200, len(matched)  # the exhaustive search matched 1,913 rules
    assert "Searched flash-attn, flash-linear-attention, torch, transformers, triton: 2 combinations." in (
        text.stdout
    )
    plan = json.loads(cli("fix", "--format", "json", *slow_stack).stdout)
    assert plan["constraints"] == ["transformers==4.48.2"]
    assert plan["failing_after"] == ["flash-attn-pre-ampere-gpu"]  # the GPU's: no pip change clears it
    assert plan["search"] == {
        "packages": ["flash-attn", "flash-linear-attention", "torch", "transformers", "triton"],
        "evaluated": 2,  # the exhaustive search: 8,639 (3 before the 2026-11 audit narrowed the rules)
        "bounded": False,
    }


# --- progress: on a terminal, for the text report, and gone when done ---------------------------

TERMINAL = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm", "COLUMNS": "120"}


def test_a_terminal_sees_the_search_live_then_only_the_report(slow_stack: list[str]) -> None:
    command = [sys.executable, "-m", "attn_doctor", "fix", *slow_stack]
    code, seen = under_a_terminal(command, TERMINAL, REPO)
    assert code == 1, seen
    report = seen.index("attn-doctor fix (target:")
    live = seen[:report]
    assert "combinations tried" in live and "best so far: transformers==4.48.2, 1 of 5 left" in live
    # erased before the report: the live line's last drawing is followed by its erasure
    assert "\x1b[2K" in live[live.rindex("combinations tried") :]
    assert "combinations tried" not in seen[report:]
    assert "pip install 'transformers==4.48.2'" in seen[report:]


def test_no_progress_off_a_terminal_or_in_json(slow_stack: list[str]) -> None:
    piped = subprocess.run(
        [sys.executable, "-m", "attn_doctor", "fix", *slow_stack],
        capture_output=True,
        text=True,
        env=TERMINAL,
        timeout=300,
    )
    assert piped.returncode == 1 and piped.stderr == ""
    command = [sys.executable, "-m", "attn_doctor", "fix", "--format", "json", *slow_stack]
    code, seen = under_a_terminal(command, TERMINAL, REPO)
    assert code == 1 and "combinations tried" not in seen and "\x1b[" not in seen
    assert json.loads(seen)["constraints"] == ["transformers==4.48.2"]
