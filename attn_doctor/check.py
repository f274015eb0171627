"""`check` after the facts: match every rule against the environment (facts/assemble.py builds
it), with probe and source-scan observations, and decide the exit code.

Input problems (a broken rule file, broken metadata) never stop the run: they are collected,
reported after the findings, and make the exit code 2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from attn_doctor.config import Config
from attn_doctor.engine.loader import RuleSet
from attn_doctor.engine.matcher import Finding, Verdict, match, with_probe
from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.facts.model import UNREAD, Environment
from attn_doctor.probes.observation import Observation, ProbeVerdict
from attn_doctor.progress import QUIET, Progress

EXIT_CLEAN, EXIT_FINDINGS, EXIT_INPUT_ERROR = 0, 1, 2


@dataclass
class CheckResult:
    environment: Environment
    findings: list[Finding]
    fail_on: str
    problems: list[str] = field(default_factory=list)
    fail_on_unknown: bool = False
    notes: list[str] = field(default_factory=list)  # facts the report must qualify
    # the check's own timing, where the command measured it (only `--format prometheus` prints it)
    duration_s: float | None = None  # from the start of the command to this result
    finished_at: float | None = None  # Unix time of this result

    def failing(self) -> list[Finding]:
        """Findings that fail the run: affected (or unknown, when asked), severe enough, not ignored."""
        if self.fail_on == "never":
            return []
        threshold = SEVERITIES.index(self.fail_on)
        verdicts = {Verdict.AFFECTED} | ({Verdict.UNKNOWN} if self.fail_on_unknown else set())
        return [
            f
            for f in self.findings
            if f.verdict in verdicts and f.ignored is None and SEVERITIES.index(f.rule.severity) <= threshold
        ]

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_INPUT_ERROR
        return EXIT_FINDINGS if self.failing() else EXIT_CLEAN


def run_check(
    env: Environment,
    ruleset: RuleSet,
    config: Config,
    fail_on: str | None,
    fail_on_unknown: bool = False,
    fact_problems: list[str] | None = None,
    observations: list[Observation] | None = None,
) -> CheckResult:
    """``observations`` (from live probes and source scans) override the versions' verdicts."""
    problems = [*ruleset.problems, *(fact_problems or [])]
    known_ids = {rule.id for rule in ruleset.rules}
    for rule_id in config.ignore:
        if rule_id not in known_ids:
            problems.append(f"{config.path} [tool.attn-doctor.ignore]: no rule {rule_id!r}")
    findings = [match(rule, env, ignored=config.ignore.get(rule.id)) for rule in ruleset.stack_rules]
    observed = deciding_observations(observations or [])
    findings = [with_probe(f, observed[f.rule.id], env) if f.rule.id in observed else f for f in findings]
    order = {Verdict.AFFECTED: 0, Verdict.UNKNOWN: 1, Verdict.NOT_AFFECTED: 2}
    findings.sort(key=lambda f: (order[f.verdict], SEVERITIES.index(f.rule.severity), f.rule.id))
    return CheckResult(
        environment=env,
        findings=findings,
        fail_on=fail_on or config.fail_on or "error",
        problems=problems,
        fail_on_unknown=fail_on_unknown,
        notes=_notes(env),
    )


def _notes(env: Environment) -> list[str]:
    """The lines of the target's files that were not read, then the packages newer than the
    release facts know (none without packages)."""
    unread = [
        f"{key.removeprefix(UNREAD)}: {what}"
        + ("" if "unknown" in what or "not read" in what else " (not read: what it installs is unknown)")
        for key, whats in env.origins.items()
        if key.startswith(UNREAD)
        for what in whats.splitlines()
    ]
    if not env.packages:
        return unread
    from attn_doctor.releases.facts import snapshot  # a bare target reads no release facts

    return [*unread, *snapshot().newer_than_snapshot(env)]


# which observation of a rule counts when several saw it (probes, one scan per --source checkout):
# one that saw the bug is enough, whatever order the options came in
_PRECEDENCE = (ProbeVerdict.AFFECTED, ProbeVerdict.NOT_AFFECTED, ProbeVerdict.ERROR, ProbeVerdict.SKIPPED)


def deciding_observations(observations: list[Observation]) -> dict[str, Observation]:
    """Per rule, the observation that decides: affected over not affected over failed over skipped."""
    observed: dict[str, Observation] = {}
    for item in observations:
        kept = observed.get(item.rule)
        if kept is None or _PRECEDENCE.index(item.verdict) < _PRECEDENCE.index(kept.verdict):
            observed[item.rule] = item
    return observed


def observe(
    env: Environment, live: bool, sources: list[Path], timeout_s: float, progress: Progress = QUIET
) -> tuple[list[Observation], list[str]]:
    """Observations from live probes (``--probe``) and source scans (``--source``), plus one problem
    line per probe that failed (a crashing or hanging library is an input problem, exit 2)."""
    observations: list[Observation] = []
    problems: list[str] = []
    if live:
        from attn_doctor.probes.catalogue import PROBES
        from attn_doctor.probes.runner import run_probes

        with progress:
            runs = run_probes(list(PROBES), env, timeout_s, progress=progress)
        for run in runs:
            observations += run.observations
            failed = {o.evidence for o in run.observations if o.verdict is ProbeVerdict.ERROR}
            problems += [f"probe {run.probe.id} ({run.command}): {evidence}" for evidence in sorted(failed)]
    if sources:
        from attn_doctor.probes.fa3_source import scan_source

        for source in sources:
            observations += scan_source(source)
    return observations, problems


def checkup(
    env: Environment,
    fact_problems: list[str],
    ruleset: RuleSet,
    config: Config,
    fail_on: str | None = None,
    fail_on_unknown: bool = False,
    live: bool = False,
    sources: list[Path] | None = None,
    probe_timeout_s: float = 120.0,
    progress: Progress = QUIET,
    started: float | None = None,
) -> CheckResult:
    """`check` after the facts: probes and source scans, then every rule. ``started``: the
    ``time.monotonic()`` at which the command started, to time the whole check."""
    observations, observe_problems = observe(env, live, sources or [], probe_timeout_s, progress)
    problems = [*fact_problems, *observe_problems]
    result = run_check(env, ruleset, config, fail_on, fail_on_unknown, problems, observations)
    if started is not None:
        result.duration_s = time.monotonic() - started
        result.finished_at = time.time()
    return result
