"""Merge members into one cluster result: findings with the ranks they affect, and drift."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from attn_doctor.check import EXIT_CLEAN, EXIT_FINDINGS, EXIT_INPUT_ERROR, CheckResult, run_check
from attn_doctor.cluster.member import Member
from attn_doctor.config import Config
from attn_doctor.engine.loader import RuleSet
from attn_doctor.engine.matcher import Finding, Verdict
from attn_doctor.engine.schema import Rule
from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.facts.model import OPEN_PACKAGE_LISTS, Environment


@dataclass(frozen=True)
class ClusterFinding:
    rule: Rule
    affected: list[str]  # member labels
    unknown: list[str]
    failing: bool  # fails the run on at least one member (severity, --fail-on, ignore list)


@dataclass
class ClusterResult:
    members: list[Member]
    findings: list[ClusterFinding]
    drift: dict[str, dict[str, list[str]]]  # fact -> value -> member labels
    missing: list[str] = field(default_factory=list)  # ranks that never reported
    problems: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """As for `check`; a missing rank is an input problem (exit 2): the picture is incomplete."""
        if self.problems or self.missing:
            return EXIT_INPUT_ERROR
        return EXIT_FINDINGS if any(f.failing for f in self.findings) else EXIT_CLEAN


def merge(
    members: list[Member],
    ruleset: RuleSet,
    config: Config,
    fail_on: str | None,
    fail_on_unknown: bool = False,
    missing: list[str] | None = None,
) -> ClusterResult:
    checked: dict[str, _Verdicts] = {}  # one check per distinct set of facts: most nodes are alike
    results: dict[str, _Verdicts] = {}
    for member in members:
        key = _facts_key(member.environment)
        if key not in checked:
            checked[key] = _Verdicts(run_check(member.environment, ruleset, config, fail_on, fail_on_unknown))
        results[member.label] = checked[key]
    problems = list(dict.fromkeys(p for result in checked.values() for p in result.problems))
    findings = []
    for rule in ruleset.stack_rules:
        affected = [label for label, r in results.items() if r.verdicts[rule.id] is Verdict.AFFECTED]
        unknown = [label for label, r in results.items() if r.verdicts[rule.id] is Verdict.UNKNOWN]
        if affected or unknown:
            failing = any(rule.id in r.failing for r in checked.values())
            findings.append(ClusterFinding(rule, affected, unknown, failing))
    findings.sort(key=lambda f: (not f.failing, not f.affected, SEVERITIES.index(f.rule.severity), f.rule.id))
    return ClusterResult(members, findings, drift(members), missing or [], problems)


def _finding(result: CheckResult, rule_id: str) -> Finding:
    return next(f for f in result.findings if f.rule.id == rule_id)


class _Verdicts:
    """What merging reads of one check: each rule's verdict, the failing rules, the problems."""

    def __init__(self, result: CheckResult) -> None:
        self.verdicts = {f.rule.id: f.verdict for f in result.findings}
        self.failing = {f.rule.id for f in result.failing()}
        self.problems = result.problems


def _facts_key(env: Environment) -> str:
    """The facts a check's verdicts depend on, without where each came from: the same probe file
    under two names (one per node) is one check. Origins keep their names (a fact established
    absent has one), not their text, which names the file."""
    data = env.to_json_dict()
    data["packages"] = {name: {**package, "origin": ""} for name, package in data["packages"].items()}
    data["origins"] = sorted(env.origins)
    data["open_package_list"] = env.origins.get("packages") in OPEN_PACKAGE_LISTS
    data["features"] = [
        env.features.declared is not None,
        env.features.searched,
        sorted((f.name, f.in_use, f.evidence) for f in env.features.facts.values()),
        sorted((f.name, f.evidence) for f in env.features.models().values()),
    ]
    del data["sources"], data["target"]
    return json.dumps(data, sort_keys=True)


def drift(members: list[Member]) -> dict[str, dict[str, list[str]]]:
    """Every fact whose value is not the same on all members, with who has which value."""
    table: dict[str, dict[str, list[str]]] = {}
    per_member = {m.label: facts(m) for m in members}
    names = sorted({name for values in per_member.values() for name in values})
    for name in names:
        by_value: dict[str, list[str]] = {}
        for label, values in per_member.items():
            by_value.setdefault(values.get(name, "unknown"), []).append(label)
        if len(by_value) > 1:
            table[name] = by_value
    return table


def facts(member: Member) -> dict[str, str]:
    """The facts compared across ranks, as display strings."""
    env = member.environment
    values = {f"package {name}": p.version or "version unknown" for name, p in env.packages.items()}
    build = env.torch_build
    if build is not None:
        values["torch build"] = (
            f"CUDA {build.cuda}" if build.cuda else f"HIP {build.hip}" if build.hip else "CPU"
        )
    if env.gpu_source != "unknown":
        models = sorted({gpu.name_and_sm() for gpu in env.gpus})
        values["GPU model"] = ", ".join(models) or "none"
        values["GPU count"] = str(len(env.gpus))
        values["NVIDIA driver"] = ", ".join(sorted({g.driver or "?" for g in env.gpus})) or "none"
    for name, value in (("nvcc", env.nvcc), ("python", env.python), ("OS", env.os), ("libc", env.libc)):
        if value is not None:
            values[name] = value
    if member.flash_attn_import is not None:
        values["import flash_attn"] = member.flash_attn_import
    return values
