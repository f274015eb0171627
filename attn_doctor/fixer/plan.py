"""The fix plan: which versions to change, what each change clears, and what stays and why.

The search runs on memoized verdicts; the plan is then checked again with `check`'s own
``run_check`` on the what-if environment, and that result is what the plan reports.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from attn_doctor.check import (
    EXIT_CLEAN,
    EXIT_FINDINGS,
    EXIT_INPUT_ERROR,
    CheckResult,
    run_check,
)
from attn_doctor.config import Config
from attn_doctor.engine.loader import RuleSet, database_path, load_rules
from attn_doctor.engine.matcher import RELEASE, Finding, Verdict, match
from attn_doctor.engine.schema import Rule
from attn_doctor.facts.assemble import EnvironmentInputs, assemble
from attn_doctor.facts.model import Environment, torch_build_from_version
from attn_doctor.fixer.candidates import Candidate, candidates, named_versions, suggested_versions
from attn_doctor.fixer.evaluate import IMPLIED, Evaluator, with_versions
from attn_doctor.fixer.live import QUIET, SearchProgress
from attn_doctor.fixer.search import Outcome, bound, search
from attn_doctor.planner.pins import broken_pins, pinned_alongside
from attn_doctor.planner.stack import install_commands, torch_move
from attn_doctor.planner.target import variant_index
from attn_doctor.releases.facts import ReleaseFacts, snapshot

# torch's build: a torch wheel of another variant changes it (the torch planner's candidate)
_BUILD_CONDITIONS = ("cuda", "rocm", "torch_build")
# conditions no pip command changes, as the report names them
_NOT_PIP = {
    "compute_capability": "the GPU",
    "driver": "the NVIDIA driver",
    "nvcc": "the CUDA toolkit (nvcc)",
    "cuda": "torch's CUDA build",
    "python": "the Python version",
    "platform": "the platform",
    "features": "the features in use",
}


@dataclass(frozen=True)
class Change:
    package: str  # the rules' name
    distribution: str  # what pip installs
    installed: str
    proposed: str
    downgrade: bool
    clears: tuple[str, ...]  # failing findings this version takes out of their range
    keeps_clear: tuple[str, ...]  # rules the other changes would trigger without this one
    build: str | None = None  # torch only: the CUDA/ROCm build the plan was checked with

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.proposed}"


@dataclass(frozen=True)
class Stay:
    finding: Finding
    kind: str  # not-pip | no-fixed-release | conflict | search-bound
    reason: str


@dataclass(frozen=True)
class Rejected:
    """A version the search tried and did not propose, and why."""

    package: str
    version: str
    reason: str


@dataclass
class FixPlan:
    before: CheckResult
    after: CheckResult  # `check` again, with the changes applied
    changes: list[Change]
    commands: list[str]  # the pip commands that make the changes (planner.stack.install_commands)
    indexes: list[str]  # what a file of the changes needs beside PyPI: torch's index for 2.7.1+cu128
    stays: list[Stay]
    unknown: list[Finding]  # would fail if affected, but a fact is missing: not considered
    searched: list[str]  # the packages the search could change
    evaluated: int
    bounded: bool
    # the alternatives, and why not: worked out when a report asks (it matches every candidate
    # again on top of the plan, and the text report shows it only with -v)
    why_not: Callable[[], list[Rejected]] = field(default=list, repr=False, compare=False)

    @functools.cached_property
    def rejected(self) -> list[Rejected]:
        return self.why_not()

    @property
    def exit_code(self) -> int:
        if self.before.problems:
            return EXIT_INPUT_ERROR
        return EXIT_FINDINGS if self.stays else EXIT_CLEAN


def run_fix(
    inputs: EnvironmentInputs,
    config: Config,
    extra_rules: list[Path],
    fail_on: str | None,
    live: bool = False,
) -> FixPlan:
    """`check`'s environment and rules, then the plan. Raises InputError for bad what-if input.
    ``live``: show the search's progress on stderr (a terminal) while it runs."""
    with SearchProgress(live) as progress:
        env, fact_problems = assemble(inputs, config)
        ruleset = load_rules([database_path(), *extra_rules], trust_database=True)
        before = run_check(env, ruleset, config, fail_on, fact_problems=fact_problems)
        return plan_fix(before, ruleset, config, progress)


def plan_fix(
    before: CheckResult, ruleset: RuleSet, config: Config, progress: SearchProgress = QUIET
) -> FixPlan:
    env = before.environment
    changeable = _changeable(before)
    scope = _in_scope(before)
    live = [f.rule for f in before.findings if f.rule.id in scope and _can_fail(f, changeable)]
    targets = [f.rule for f in before.failing()]
    searched = _connected(targets, live, changeable)
    facts = snapshot()
    # proposed by the release facts, beside the versions the rules name: torch in the variant
    # that runs on the target, then what each candidate pins of the others (torch's triton)
    suggested = {name: suggested_versions(name, before.findings) for name in searched}
    suggested["torch"] = {**suggested.get("torch", {}), **_torch_build(env, facts, searched)}
    named = {name: {**named_versions(name, ruleset.rules), **suggested[name]} for name in searched}
    for name, pins in pinned_alongside(env, facts, {n: named[n].values() for n in searched}).items():
        if name in changeable and not env.packages[name].origin.startswith(IMPLIED):  # implied ones follow
            suggested[name] = {**suggested.get(name, {}), **pins}
            named[name] = {**named.get(name, named_versions(name, ruleset.rules)), **pins}
    searched = sorted(named)
    options = {
        name: candidates(
            name,
            changeable[name],
            named[name],
            [rule.affects.packages[name] for rule in live if name in rule.affects.packages],
            distinct=suggested[name],
        )
        for name in searched
    }
    evaluator = Evaluator(env, live, facts)
    progress.searching(searched, len(targets), len(evaluator.baseline))
    result = search(evaluator, options, progress.tried)
    progress.checking()
    after = run_check(with_versions(env, result.best.versions), ruleset, config, before.fail_on)
    cleared = {f.rule.id for f in before.failing()} - {f.rule.id for f in after.failing()}
    changes = [_change(c, result.best, evaluator, cleared, before) for c in result.best.changes]
    return FixPlan(
        before=before,
        after=after,
        changes=changes,
        commands=install_commands(env, facts, {c.package: (c.distribution, c.proposed) for c in changes}),
        indexes=sorted({index for change in changes if (index := variant_index(change.proposed))}),
        stays=[
            _stay(f, changeable, options, evaluator, result.best, result.bounded) for f in after.failing()
        ],
        unknown=[f for f in before.findings if f.verdict is Verdict.UNKNOWN and f.rule.id in scope],
        searched=searched,
        evaluated=result.evaluated,
        bounded=result.bounded,
        why_not=lambda: _rejected(options, result.best, evaluator, env),
    )


def _rejected(
    options: dict[str, list[Candidate]], best: Outcome, evaluator: Evaluator, env: Environment
) -> list[Rejected]:
    """Each candidate the plan does not use, tried on top of the plan: what it would break (with
    the rule's own reason for these versions), or that it clears nothing the plan does not."""
    chosen = {change.package: change.version for change in best.changes}
    rejected = []
    for package, candidates_of in options.items():
        for candidate in candidates_of:
            if chosen.get(package) == candidate.version:
                continue
            versions = {**best.versions, package: candidate.version}
            broken = sorted(evaluator.failing(versions) - best.failing)
            if not evaluator.consistent(versions):
                pins = broken_pins(with_versions(env, versions), evaluator.facts, versions)
                why = f"breaks a pin ({'; '.join(pins)})"
            elif broken:
                what = with_versions(env, versions)
                reasons = [_holding_reason(evaluator.rules[rule_id], what) for rule_id in broken]
                why = "; ".join(f"triggers {rule_id} ({reason})" for rule_id, reason in zip(broken, reasons))
            else:
                why = "clears nothing more than the plan, with a larger change"
            rejected.append(Rejected(package, candidate.version, why))
    return rejected


def _holding_reason(rule: Rule, env: Environment) -> str:
    """The most telling condition that holds: a release fact's sentence, else the first one."""
    reasons = [r for r in match(rule, env).reasons if r.holds]
    release = [r.text for r in reasons if r.condition == RELEASE]
    return (release or [r.text for r in reasons] or [rule.title])[0]


def _torch_build(env: Environment, facts: ReleaseFacts, searched: list[str]) -> dict[Version, str]:
    """torch in the variant the torch planner says runs on the target ("2.7.1+cu128"), when the
    installed build does not: the one candidate that changes torch's build."""
    moved = torch_move(env, facts) if "torch" in searched else None
    if moved is None:
        return {}
    version = f"{moved.release}+{moved.variant.name}"
    return {Version(version): version}


def _changeable(result: CheckResult) -> dict[str, Version]:
    """Packages installed (or declared) at a known version: the ones a pip command can move."""
    versions = {}
    for name, package in result.environment.packages.items():
        try:
            versions[name] = Version(package.version or "")
        except ValueError:  # InvalidVersion, or a number past the int-string limit
            continue
    return versions


def _in_scope(result: CheckResult) -> set[str]:
    """Rules that would fail the run if affected: severe enough for --fail-on, not ignored.
    Asked of ``CheckResult.failing`` itself, so fix and check cannot disagree."""
    every = replace(result, findings=[replace(f, verdict=Verdict.AFFECTED) for f in result.findings])
    return {f.rule.id for f in every.failing()}


def _can_fail(finding: Finding, changeable: dict[str, Version]) -> bool:
    """Whether a version change alone can make (or keep) this rule affected: every condition that
    does not hold now is the version of a package that can change."""
    affects = finding.rule.affects
    by_release = any(name in changeable for name in affects.release_packages)
    by_build = "torch" in changeable and affects.reads_torch_build
    return all(
        r.holds
        or (r.condition in affects.packages and r.condition in changeable)
        or (r.condition == RELEASE and by_release)
        or (r.condition in _BUILD_CONDITIONS and by_build)
        for r in finding.reasons
    )


def _pinnable(rule: Rule, changeable: dict[str, Version]) -> list[str]:
    """The rule's packages whose version decides it (``""`` means every version is affected; the
    release facts decide per version)."""
    decided = {name for name, spec in rule.affects.packages.items() if str(spec)}
    build = {"torch"} if rule.affects.reads_torch_build else set()
    return sorted(name for name in decided | build | set(rule.affects.release_packages) if name in changeable)


def _connected(targets: list[Rule], live: list[Rule], changeable: dict[str, Version]) -> list[str]:
    """Packages whose version can clear a target, then, transitively, those of the rules that such
    a change could trigger (rule Y: flash-attn X with torch < T makes torch a candidate too)."""
    found = {name for rule in targets for name in _pinnable(rule, changeable)}
    grew = True
    while grew:
        grew = False
        for rule in live:
            names = set(_pinnable(rule, changeable))
            if names & found and not names <= found:
                found |= names
                grew = True
    return sorted(found)


def _change(
    candidate: Candidate, best: Outcome, evaluator: Evaluator, cleared: set[str], before: CheckResult
) -> Change:
    package = before.environment.packages[candidate.package]
    without = {c.package: c.version for c in best.changes if c is not candidate}
    clears = sorted(i for i in cleared if _clears(evaluator, i, candidate.package, candidate.version))
    return Change(
        package=candidate.package,
        distribution=canonicalize_name(package.distribution),
        installed=package.version or "",
        proposed=candidate.version,
        downgrade=candidate.downgrade,
        clears=tuple(clears),
        keeps_clear=tuple(sorted(evaluator.failing(without) - evaluator.baseline)),
        build=_build(before, candidate.version) if candidate.package == "torch" else None,
    )


def _build(result: CheckResult, version: str) -> str | None:
    """The build a torch change was checked with: the variant its version names ("+cu128"), else
    the installed one (evaluate.with_versions)."""
    build = torch_build_from_version(version) if "+" in version else result.environment.torch_build
    if build is None or not (build.cuda or build.hip):
        return None
    return f"CUDA {build.cuda}" if build.cuda else f"ROCm {build.hip}"


def _clears(evaluator: Evaluator, rule_id: str, package: str, version: str) -> bool:
    """This version alone takes the rule out (out of its range, another build, what the release
    facts say of it, or of the packages it implies)."""
    return rule_id not in evaluator.failing({package: version})


def _outside(rule: Rule, package: str, version: str) -> bool:
    spec = rule.affects.packages.get(package)
    return spec is not None and not spec.contains(version, prereleases=True)


def _stay(
    finding: Finding,
    changeable: dict[str, Version],
    options: dict[str, list[Candidate]],
    evaluator: Evaluator,
    best: Outcome,
    bounded: bool,
) -> Stay:
    rule = finding.rule
    pinnable = _pinnable(rule, changeable)
    conditions = _not_pip_conditions(finding)
    if not pinnable:
        every = [f"every {name} version is affected" for name in sorted(rule.affects.packages)]
        depends = [f"it depends on {_and(conditions)}"] if conditions else []
        facts = "; ".join([*every, *depends]) or "its conditions name no package version"
        return Stay(finding, "not-pip", f"not fixable by pip: {facts}")
    escapes = [c for name in pinnable for c in options.get(name, []) if _outside(rule, name, c.version)]
    if not escapes:
        ranges = ", ".join(
            f"{name} {rule.affects.packages.get(name, '(release facts)')}" for name in pinnable
        )
        also = f"; it also depends on {_and(conditions)}" if conditions else ""
        reason = f"no release is known to be fixed: no version the rules name is outside {ranges}{also}"
        return Stay(finding, "no-fixed-release", reason)
    if bounded:
        return Stay(
            finding, "search-bound", f"the search stopped at its bound ({bound()}) before clearing it"
        )
    # the search tried every combination, so each version that would clear it triggers another rule
    conflicts = [
        f"{escape.package} {escape.version} triggers {', '.join(sorted(_triggered(escape, evaluator, best)))}"
        for escape in escapes
    ]
    reason = "every version the rules name conflicts with another rule: " + "; ".join(conflicts)
    return Stay(finding, "conflict", reason)


def _triggered(escape: Candidate, evaluator: Evaluator, best: Outcome) -> frozenset[str]:
    """What fails, on top of the plan, with this one version changed too."""
    return evaluator.failing({**best.versions, escape.package: escape.version}) - best.failing


def _not_pip_conditions(finding: Finding) -> list[str]:
    return [_NOT_PIP[r.condition] for r in finding.reasons if r.condition in _NOT_PIP]


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
