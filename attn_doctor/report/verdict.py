"""``check --format verdict``: one verdict for the node, in JSON (schemas/verdict.schema.json), for a
readiness gate (a Slurm prolog, a Kubernetes pre-flight Job) that keeps a node out of rotation.

Modelled on NVIDIA Health Validation's verdict as its public documentation describes it
(docs.nvidia.com/health-validation: getting-started/overview.md, "a single verdict: PASS, INFO,
WARNING, CRITICAL, or UNKNOWN", with recommended next steps per failing check; getting-started/faq.md,
the exit codes: 0 PASS/INFO/WARNING, 1 CRITICAL/UNKNOWN, 2 no verdict). The levels and exit codes
follow it; the document's fields are attn-doctor's own (NVIDIA's node-verdict.schema.json was not
read), so a consumer of NVIDIA's JSON does not read this one unchanged.

Each finding that is not ignored gives a level (docs/output.md, "Node verdict"):

- ``critical``: affected, severity error (the stack is known broken).
- ``warning``: affected, severity warning. ``info``: affected, severity info.
- ``unknown``: severity error, unknown because a fact of the node is missing (the GPU, the driver,
  torch's CUDA build, a version): an error the check can neither confirm nor rule out, on a node
  whose GPU stack does not answer. A node that cannot be assessed stays out of rotation.
- ``info`` too: a warning or info rule unknown for a missing fact of the node, and any rule unknown
  only for lack of release data (a release newer than attn-doctor's snapshot): a stale attn-doctor
  must not drain a fleet.
- not counted: rules that apply only if the workload uses a feature (``conditional``): a node does
  not know what its jobs will run.

``overall_severity`` is the highest level (critical, unknown, warning, info, pass). An input
problem (a broken rule file) makes it ``unknown`` unless it is critical, and the exit code 2. The
exit code is the format's own, not --fail-on's: 0 pass, info, warning; 1 critical, unknown; 2 the
tool's own failure (an input problem, or a check stopped before a result: the document then has no
stack and no findings); 3 an internal error.
"""

from __future__ import annotations

import json
from typing import Any

from attn_doctor import __version__
from attn_doctor.check import EXIT_CLEAN, EXIT_FINDINGS, EXIT_INPUT_ERROR, CheckResult
from attn_doctor.engine import matcher
from attn_doctor.engine.matcher import Finding, Verdict, pending_features
from attn_doctor.report import MachineFormat, install
from attn_doctor.report.stack import stack

VERDICT_SCHEMA_ID = "attn-doctor/verdict"
VERDICT_SCHEMA_VERSION = 1
LEVELS = ("critical", "unknown", "warning", "info", "pass")  # most severe first
FAILING_LEVELS = ("critical", "unknown")  # exit 1: out of rotation

# missing facts of the tool, not of the node: a rule unknown only for these is information
_TOOL_FACTS = {
    matcher.MISSING_RELEASE_DATA,
    matcher.MISSING_FROM_LOG,
    matcher.MISSING_FROM_IMAGE,
    matcher.MISSING_API_ERROR,
}
_AFFECTED_LEVEL = {"error": "critical", "warning": "warning", "info": "info"}


def level(finding: Finding) -> str | None:
    """The level one finding gives the node; None: it does not count (not affected, ignored, or
    unknown only for a feature's use)."""
    if finding.ignored is not None or finding.verdict is Verdict.NOT_AFFECTED or pending_features(finding):
        return None
    if finding.verdict is Verdict.AFFECTED:
        return _AFFECTED_LEVEL[finding.rule.severity]
    node_facts = {r.missing for r in finding.reasons if r.holds is None} - _TOOL_FACTS
    return "unknown" if node_facts and finding.rule.severity == "error" else "info"


def overall(result: CheckResult) -> str:
    levels = {level(finding) for finding in result.findings}
    worst = min((LEVELS.index(found) for found in levels if found is not None), default=LEVELS.index("pass"))
    if result.problems and worst > LEVELS.index("critical"):
        return "unknown"  # the check is incomplete: the node cannot be called healthy
    return LEVELS[worst]


def exit_code(result: CheckResult) -> int:
    if result.problems:
        return EXIT_INPUT_ERROR
    return EXIT_FINDINGS if overall(result) in FAILING_LEVELS else EXIT_CLEAN


def to_verdict(result: CheckResult) -> str:
    counted = [(finding, level(finding)) for finding in result.findings]
    findings = sorted(
        ((f, found) for f, found in counted if found is not None), key=lambda pair: LEVELS.index(pair[1])
    )
    severity = overall(result)
    document = {
        **_head(severity, exit_code(result)),
        "summary": _summary(severity, [(f.rule.id, found) for f, found in findings], result.problems),
        "target": result.environment.target,
        "stack": _stack(result),
        "findings": [_finding(f, found, result) for f, found in findings],
        "affected_components": _components(findings),
        "conditional": [
            {"id": f.rule.id, "features": list(pending_features(f))}
            for f in result.findings
            if f.ignored is None and pending_features(f)
        ],
        "ignored": [{"id": f.rule.id, "reason": f.ignored} for f in result.findings if f.ignored is not None],
        "rules_checked": len(result.findings),
        "problems": result.problems,
    }
    return json.dumps(document, indent=2) + "\n"


def stopped(problem: str, code: int) -> str:
    """The check stopped before a result (an unreadable --env-file): a verdict of ``unknown`` with
    the problem, and nothing checked."""
    document = {
        **_head("unknown", code),
        "summary": _summary("unknown", [], [problem], "stopped"),
        "target": None,
        "stack": None,
        "findings": [],
        "affected_components": [],
        "conditional": [],
        "ignored": [],
        "rules_checked": 0,
        "problems": [problem],
    }
    return json.dumps(document, indent=2) + "\n"


def _stack(result: CheckResult) -> dict[str, Any]:
    """report/stack.py's strings, the GPU count as a number."""
    versions: dict[str, Any] = stack(result.environment)
    versions["gpus"] = None if versions["gpus"] is None else int(versions["gpus"])
    return versions


def _head(severity: str, code: int) -> dict[str, Any]:
    return {
        "schema": VERDICT_SCHEMA_ID,
        "schema_version": VERDICT_SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "overall_severity": severity,
        "exit_code": code,
    }


def _summary(
    severity: str, levels: list[tuple[str, str]], problems: list[str], what: str = "input problem"
) -> str:
    """One line: the verdict, how many of each level, the first rule of the worst level."""
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"{severity}: {what}: {' '.join(problems[0].split())}{more}"
    if not levels:
        return "pass: nothing affected or unknown"
    counts = [f"{count} {name}" for name in LEVELS if (count := sum(found == name for _, found in levels))]
    return f"{severity}: {', '.join(counts)}; first: {levels[0][0]}"


def _finding(finding: Finding, found: str, result: CheckResult) -> dict[str, Any]:
    rule = finding.rule
    holding = [r for r in finding.reasons if r.holds]
    open_ = [r for r in finding.reasons if r.holds is None]
    suggestions = [r.suggestion for r in holding if r.suggestion]
    pins = [*rule.fix_pins, *(pin for r in holding for pin in r.suggested_pins)]
    plans = install.plans(finding, result.environment) if finding.verdict is Verdict.AFFECTED else []
    return {
        "id": rule.id,
        "title": rule.title,
        "component": rule.component,
        "level": found,
        "rule_severity": rule.severity,
        "verdict": finding.verdict.value,
        "failing": found in FAILING_LEVELS,
        "reasons": [r.text for r in (holding if finding.verdict is Verdict.AFFECTED else open_)],
        "missing": sorted({r.missing for r in open_ if r.missing}),
        "action": {
            "summary": rule.fix_summary,
            "suggestion": "; ".join(suggestions) or None,
            "pins": list(dict.fromkeys(pins)),
            "commands": [plan.command for plan in plans if plan.command],
        },
        "references": list(rule.references),
    }


def _components(findings: list[tuple[Finding, str]]) -> list[dict[str, Any]]:
    """Per component with a counted finding: its most severe level and the rules."""
    grouped: dict[str, list[tuple[Finding, str]]] = {}
    for finding, found in findings:
        grouped.setdefault(finding.rule.component, []).append((finding, found))
    return [
        {
            "component": component,
            "max_severity": min((found for _, found in members), key=LEVELS.index),
            "check_ids": [finding.rule.id for finding, _ in members],
        }
        for component, members in grouped.items()
    ]


FORMAT = MachineFormat(to_verdict, exit_code, stopped)
