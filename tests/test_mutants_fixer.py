"""Tests for the mutants of attn_doctor/fixer/ that survived mutmut (benchmarks/mutation_score.py
--part fixer; docs/mutation-testing.md): which versions `fix` tries and in what order, the work its
search counts, what its progress line says, and the exact words of its plan. The real rules, the
real release facts and the real CLI; the search's own bound on a table of verdicts (as
test_fix_search.py does)."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from support import REPO, cli, write_rule

from attn_doctor._compat import tomllib
from attn_doctor.check import CheckResult, run_check
from attn_doctor.config import Config
from attn_doctor.engine.loader import RuleSet, database_path, load_rules
from attn_doctor.engine.schema import Rule, parse_rule
from attn_doctor.facts.assemble import EnvironmentInputs, assemble
from attn_doctor.fixer import evaluate
from attn_doctor.fixer.candidates import Candidate, candidates, named_versions
from attn_doctor.fixer.evaluate import Evaluator
from attn_doctor.fixer.live import SearchProgress
from attn_doctor.fixer.plan import Rejected, _and, _build, _outside, plan_fix
from attn_doctor.fixer.search import Outcome, search
from attn_doctor.releases.facts import snapshot

SECONDS = r"\d+\.\d s"


def real_rule(rule_id: str) -> Rule:
    path = REPO / "rules" / f"{rule_id}.toml"
    rule = parse_rule(tomllib.loads(path.read_text()), path.stem, str(path))
    assert isinstance(rule, Rule), rule
    return rule


def checked(
    site_path: Path, rules: Path, *pins: str, gpu: str = "sm_90", database: bool = True
) -> tuple[CheckResult, RuleSet]:
    """`check` as `fix` runs it (run_fix): the target, the database (unless not) and ``rules``."""
    inputs = EnvironmentInputs(
        site_paths=[site_path], pins=list(pins), gpus=[gpu], features=["varlen"], scan=False
    )
    config = Config()
    env, problems = assemble(inputs, config)
    ruleset = load_rules([database_path(), rules] if database else [rules], trust_database=True)
    return run_check(env, ruleset, config, None, fact_problems=problems), ruleset


@pytest.fixture
def old_torch(tmp_path, site, no_gpu) -> tuple[CheckResult, RuleSet]:
    """A CUDA 12.1 torch 2.3.0 with triton 2.3.0 installed beside it, and a rule that torch < 2.4
    fails: the rules name no triton version, but torch 2.4.0 pins triton 3.0.0 (the release facts)."""
    rules = tmp_path / "rules"
    write_rule(rules, "demo-old-torch", 'packages = { torch = "<2.4" }')
    site.install("torch", "2.3.0+cu121", torch_cuda="12.1")
    site.install("triton", "2.3.0")
    return checked(site.path, rules)


# ---- candidates.py: which versions are tried, nearest first ------------------------------------------


def test_candidates_are_the_smallest_upgrades_then_the_newest_downgrades():
    """x_candidates__mutmut_17 (downgrades sorted oldest first): below the installed 3.0, 2.5 is
    the nearest and 2.0 stands for its class (1.0 changes no verdict 2.0 does not), so the search,
    which prefers rank 1, moves as little as it can. Upgrades go the other way: 4.5 before 5.0
    (each its own class, proposed by the release facts), and 4.0 changes no verdict at all."""
    named = {Version(v): v for v in ("1.0", "2.0", "2.5", "4.0", "4.5", "5.0")}
    specifiers = [SpecifierSet("<2.5"), SpecifierSet(">=3.0")]
    got = candidates("demo-lib", Version("3.0"), named, specifiers, distinct=[Version("4.5"), Version("5.0")])
    assert got == [
        Candidate("demo-lib", "4.5", 1, False),
        Candidate("demo-lib", "5.0", 2, False),
        Candidate("demo-lib", "2.5", 3, True),
        Candidate("demo-lib", "2.0", 4, True),
    ]


def test_a_nightly_installed_inside_a_range_is_in_that_range():
    """x_candidates__mutmut_6 (``prereleases=True`` dropped): torch 2.6.0.dev (a nightly) is inside
    the failing rule's ``<2.7``; read without prereleases it looks outside it, in 2.7's class, so
    2.7 (the one release that clears the rule) was dropped and 2.5 (still affected) proposed.
    packaging 26 matches a prerelease by default, so there the mutant changes nothing; pyproject
    allows packaging>=23, under which (25.0, by hand) this test fails it."""
    named = {Version("2.5"): "2.5", Version("2.7"): "2.7"}
    got = candidates("torch", Version("2.6.0.dev20250101"), named, [SpecifierSet("<2.7")])
    assert got == [Candidate("torch", "2.7", 1, False)]


def test_the_versions_a_rule_names_skip_only_what_is_no_release():
    """x_named_versions__mutmut_12 (an unreadable version ends the rule's specifier set: break, not
    continue) and its neighbour for a prerelease: each is skipped on its own, and the releases named
    after it in the same set are still candidates. ``===`` is refused by the schema, not by
    named_versions, which reads whatever Rule it is given. Of ``2.4`` and ``2.4.0`` the longer
    spelling is kept."""
    rule = real_rule("flash-attn-alibi-before-2-4")
    weird = replace(
        rule,
        affects=replace(rule.affects, packages={"demo-lib": SpecifierSet("===nightly,<2.0")}),
        fix_pins=("demo-lib>=2.6.0rc1,!=2.4", "demo-lib==3.0+local,>=2.4.0"),
    )
    assert named_versions("demo-lib", [weird, real_rule("gemma2-fa2-cu-seqlens")]) == {
        Version("2.0"): "2.0",
        Version("2.4"): "2.4.0",
    }


# ---- evaluate.py: the work counted, and pins checked once ---------------------------------------------


def test_the_evaluator_counts_each_rule_it_matches(old_torch):
    """xǁEvaluatorǁaffected__mutmut_21 (``matched -= 1``): ``matched`` is the work a search costs
    (benchmarks/fix_search.py reports it): one per rule matched at its versions, none for a verdict
    it remembers or a rule that does not read the changed package."""
    before, ruleset = old_torch
    rules = [f.rule for f in before.findings]
    evaluator = Evaluator(before.environment, rules, snapshot())
    assert evaluator.matched == len(rules) > 0  # the baseline: every rule once
    assert "demo-old-torch" in evaluator.baseline
    assert not evaluator.affected("demo-old-torch", {"torch": "2.4.0"})
    assert evaluator.matched == len(rules) + 1
    assert not evaluator.affected("demo-old-torch", {"torch": "2.4.0", "demo-lib": "1.0"})  # remembered
    assert evaluator.matched == len(rules) + 1


def test_a_stack_is_checked_for_broken_pins_once(old_torch, monkeypatch):
    """xǁEvaluatorǁconsistent__mutmut_5 (the memo looked up under None, so never found): the search
    asks again and again of the same combination, and each answer builds a what-if environment and
    reads the release facts' requirements. The real broken_pins, counted."""
    before, _ = old_torch
    calls: list[object] = []

    def counted(*args):
        calls.append(args)
        return real(*args)

    real = evaluate.broken_pins
    monkeypatch.setattr(evaluate, "broken_pins", counted)
    evaluator = Evaluator(before.environment, [], snapshot())
    for _ in range(3):
        assert not evaluator.consistent({"torch": "2.4.0"})  # torch 2.4.0 pins triton 3.0.0
        assert evaluator.consistent({"torch": "2.4.0", "triton": "3.0.0"})
    assert len(calls) == 2


# ---- live.py: the progress line ------------------------------------------------------------------------


class Terminal(io.StringIO):
    """stderr as a terminal: what the progress writes there, kept."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("tty", "term", "live"), [(True, "xterm", True), (True, "dumb", False), (False, "xterm", False)]
)
def test_progress_is_drawn_only_on_a_terminal_that_can_redraw(monkeypatch, tty, term, live):
    """xǁSearchProgressǁ__init____mutmut_4 (``os.environ.get(None)``: TERM never read): a dumb
    terminal (Emacs' shell, a CI log that claims a tty) cannot redraw a line in place, so it gets
    no progress at all, like a pipe."""
    stderr = Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setenv("TERM", term)
    progress = SearchProgress()
    assert (progress._live is not None) == live
    with progress:
        progress.searching(["torch"], 1, 1)
    assert bool(stderr.getvalue()) == live


def test_the_progress_line_before_the_search_starts():
    """xǁSearchProgressǁ__init____mutmut_14 (the counts start at None): a report from the search
    before ``searching`` (or without it) is drawn with 0 findings, not a TypeError in rich's thread."""
    progress = SearchProgress(live=False)
    assert re.fullmatch(rf"fix: reading the target and the rules \({SECONDS}\)", progress.line())
    progress.tried(3, Outcome((), frozenset()))
    assert re.fullmatch(
        rf"fix: reading the target and the rules; 3 combinations tried \({SECONDS}\); "
        r"best so far: no change, 0 of 0 left",
        progress.line(),
    )


def test_the_progress_line_while_searching_and_checking():
    """The line's words and counts: ``left`` is what no change reaches plus what the best plan leaves."""
    progress = SearchProgress(live=False)
    progress.searching(["torch", "triton"], 3, 2)
    progress.tried(1500, Outcome((Candidate("torch", "2.4.0", 1, False),), frozenset({"r"})))
    assert re.fullmatch(
        rf"fix: 1,500 combinations tried \({SECONDS}\); best so far: torch==2.4.0, 2 of 3 left",
        progress.line(),
    )
    progress.checking()
    assert progress.line().startswith("fix: checking the plan again; 1,500 combinations tried (")
    progress.searching([], 0, 0)
    assert progress.line().startswith("fix: nothing to search; ")


# ---- plan.py: what the plan says ----------------------------------------------------------------------


def test_and_joins_a_list_as_a_sentence():
    """x__and__mutmut_6 (``" and " - items[-1]``) and every other mutant of the join."""
    assert _and(["the GPU"]) == "the GPU"
    assert _and(["the GPU", "the platform"]) == "the GPU and the platform"
    assert (
        _and(["the GPU", "the NVIDIA driver", "the platform"])
        == "the GPU, the NVIDIA driver and the platform"
    )


def test_a_torch_change_names_the_build_it_was_checked_with(old_torch):
    """x__build__mutmut_7 (``build is None and ...``): a CPU torch, or one whose build is unknown,
    has no build to name (the mutant said "ROCm None", or raised on None)."""
    before, _ = old_torch
    assert _build(before, "2.4.0") == "CUDA 12.1"  # the installed build
    assert _build(before, "2.7.1+cu128") == "CUDA 12.8"
    assert _build(before, "2.7.1+rocm6.3") == "ROCm 6.3"
    assert _build(before, "2.7.1+cpu") is None
    no_build = replace(before, environment=replace(before.environment, torch_build=None))
    assert _build(no_build, "2.4.0") is None


def test_outside_a_range_means_the_rule_names_the_package_and_excludes_the_version():
    """x__outside__mutmut_3 (``or``: a package the rule does not name counted as outside it) and
    x__outside__mutmut_6 (the version not read): outside ``<2.4.0.post1`` is 2.4.0.post1 and later,
    a prerelease below it is inside (``prereleases=True``: dropping it fails this test under
    packaging 23-25, which pyproject allows; packaging 26 matches a prerelease by default)."""
    rule = real_rule("flash-attn-alibi-before-2-4")
    assert _outside(rule, "flash-attn", "2.4.0.post1") and _outside(rule, "flash-attn", "2.6.3")
    assert not _outside(rule, "flash-attn", "2.3.6")
    assert not _outside(rule, "flash-attn", "2.3.0rc1")
    assert not _outside(rule, "torch", "2.4.0")


def fix_json(*args: object) -> dict:
    result = cli("fix", "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    return json.loads(result.stdout)


def test_what_stays_says_why_in_these_words(tmp_path, site, no_gpu):
    """x__stay__mutmut_43 (the ranges not written) and x__stay__mutmut_54 (``_and(None)``), and every
    wording mutant of _stay's not-pip and no-fixed-release reasons: the exact sentences."""
    rules = tmp_path / "rules"
    write_rule(
        rules,
        "demo-unfixed-gpu",
        'packages = { demo-lib = ">=1.0", other-lib = ">=0.5" }\n'
        'compute_capability = "<8.0"\nplatform = ["linux"]',
    )
    write_rule(rules, "demo-every", 'packages = { other-lib = "" }\ncompute_capability = "<8.0"')
    write_rule(rules, "demo-unfixed", 'packages = { demo-lib = ">=1.0" }')
    args = ("--path", site.path, "--rules", rules, "--gpu", "T4", "--feature", "varlen")
    plan = fix_json(*args, "--pin", "demo-lib==1.5", "--pin", "other-lib==1.0")
    assert {stay["id"]: (stay["kind"], stay["reason"]) for stay in plan["stays"]} == {
        "demo-every": (
            "not-pip",
            "not fixable by pip: every other-lib version is affected; it depends on the GPU",
        ),
        "demo-unfixed-gpu": (
            "no-fixed-release",
            "no release is known to be fixed: no version the rules name is outside demo-lib >=1.0, "
            "other-lib >=0.5; it also depends on the GPU and the platform",
        ),
        "demo-unfixed": (
            "no-fixed-release",
            "no release is known to be fixed: no version the rules name is outside demo-lib >=1.0",
        ),
    }


def test_a_conflict_names_each_escape_and_what_it_triggers(tmp_path, site, no_gpu):
    """The conflict reason's exact words (the wording mutants of _stay's last branch)."""
    rules = tmp_path / "rules"
    write_rule(rules, "old-demo", 'packages = { demo-lib = "<2.0" }')
    write_rule(rules, "new-demo-any-other", 'packages = { demo-lib = ">=2.0", other-lib = "" }')
    write_rule(rules, "new-demo-any-third", 'packages = { demo-lib = ">=2.0", third-lib = "" }')
    args = ("--path", site.path, "--rules", rules, "--feature", "varlen")
    plan = fix_json(*args, "--pin", "demo-lib==1.5", "--pin", "other-lib==1.0", "--pin", "third-lib==1.0")
    assert [(stay["id"], stay["kind"], stay["reason"]) for stay in plan["stays"]] == [
        (
            "old-demo",
            "conflict",
            "every version the rules name conflicts with another rule: "
            "demo-lib 2.0 triggers new-demo-any-other, new-demo-any-third",
        )
    ]


def test_a_version_pinned_alongside_is_a_candidate_though_no_rule_names_it(tmp_path, site, no_gpu):
    """x_plan_fix__mutmut_66 (``named.get(name, )``: a package that only the release facts' pins
    bring into the search had no versions to start from, and fix raised): with a rule file of its
    own (no database rule reads triton), torch 2.4.0 clears the rule and pins triton 3.0.0, so the
    plan moves both; the triton version a rule names (9.0) is a candidate as well, rejected for the
    pin it breaks. The CLI too, with the database."""
    rules = tmp_path / "rules"
    write_rule(rules, "demo-old-torch", 'packages = { torch = "<2.4" }')
    write_rule(rules, "demo-future-triton", 'packages = { triton = ">=9.0" }')  # names 9.0, fails none
    site.install("torch", "2.3.0+cu121", torch_cuda="12.1")
    site.install("triton", "2.3.0")
    before, ruleset = checked(site.path, rules, database=False)
    plan = plan_fix(before, ruleset, Config())
    assert plan.searched == ["torch", "triton"] and [f.rule.id for f in plan.after.failing()] == []
    assert [(c.requirement, c.build) for c in plan.changes] == [
        ("torch==2.4", "CUDA 12.1"),  # as the rule spells it
        ("triton==3.0.0", None),
    ]
    assert plan.rejected == [
        Rejected("triton", "9.0", "breaks a pin (torch 2.4 pins triton==3.0.0, not 9.0)"),
    ]
    report = fix_json("--path", site.path, "--rules", rules, "--gpu", "sm_90", "--feature", "varlen")
    assert report["constraints"] == ["torch==2.4.0", "triton==3.0.0"] and report["failing_after"] == []


class Recorded(SearchProgress):
    """The progress, with every line the terminal would draw after each report of the search."""

    def __init__(self) -> None:
        super().__init__(live=False)
        self.lines: list[str] = []

    def tried(self, evaluated: int, best: Outcome) -> None:
        super().tried(evaluated, best)
        self.lines.append(self.line())


def test_the_progress_hears_what_the_search_covers(old_torch):
    """x_plan_fix__mutmut_92 (the packages not given: "nothing to search" while it searches) and
    x_plan_fix__mutmut_93 (the number of findings not given: the line could not be drawn)."""
    before, ruleset = old_torch
    progress = Recorded()
    plan = plan_fix(before, ruleset, Config(), progress)
    assert [c.requirement for c in plan.changes] == ["torch==2.4.0", "triton==3.0.0"]
    assert progress.lines
    for line in progress.lines:
        assert re.fullmatch(
            rf"fix: \d+ combinations? tried \({SECONDS}\); best so far: .*, \d of 1 left", line
        )
    assert progress.lines[-1].endswith("best so far: torch==2.4.0 triton==3.0.0, 0 of 1 left")


# ---- search.py: the bound on downgrades ---------------------------------------------------------------


class Table:
    """Rules whose verdicts are a table over the versions they read (the search's Rules protocol),
    counting each rule matched: the search's work."""

    def __init__(
        self,
        reads: dict[str, str],
        baseline: set[str],
        affected: dict[str, Callable[[Mapping[str, str]], bool]],
    ) -> None:
        self.reads = {rule_id: frozenset(names) for rule_id, names in reads.items()}
        self.baseline = frozenset(baseline)
        self._affected = affected
        self.matched: list[tuple[str, dict[str, str]]] = []

    def readers(self, names: Iterable[str]) -> frozenset[str]:
        return frozenset(r for r, reads in self.reads.items() if reads & set(names))

    def costly(self, rule_id: str) -> bool:
        return False

    def affected(self, rule_id: str, versions: Mapping[str, str]) -> bool:
        self.matched.append((rule_id, dict(versions)))
        return self._affected[rule_id](versions)

    def failing(self, versions: Mapping[str, str]) -> frozenset[str]:
        touched = self.readers(versions)
        return (self.baseline - touched) | {r for r in touched if self.affected(r, versions)}

    def consistent(self, versions: Mapping[str, str]) -> bool:
        return True


def test_packages_that_can_only_move_down_all_count_in_the_bound():
    """xǁ_Searchǁexplore__mutmut_13 (``forced`` subtracts): a, b and c have only downgrades. a's
    downgrade clears old-a and leaves bc (1 left, 1 downgrade); b and c together must leave old-a
    (nothing of theirs reads it) and downgrade two packages, so that branch is cut before any rule
    is matched. The mutant counted -2 downgrades there and matched zb for nothing: the same answer
    (a bound only saves work), at a cost that grows with every package that can only move down."""
    options = {name: [Candidate(name, "1.0", 1, True)] for name in "abc"}
    rules = Table(
        reads={"old-a": "a", "bc": "bc", "zb": "b"},
        baseline={"old-a", "bc"},
        affected={
            "old-a": lambda versions: "a" not in versions,
            "bc": lambda versions: True,
            "zb": lambda versions: False,
        },
    )
    result = search(rules, options)
    assert result.best.versions == {"a": "1.0"} and result.best.failing == {"bc"}
    assert ("zb", {"b": "1.0"}) not in rules.matched, rules.matched
