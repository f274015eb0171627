"""JSON report: schemas/report.schema.json (``schema: attn-doctor/report``)."""

from __future__ import annotations

import json
from typing import Any

from attn_doctor import __version__
from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Finding, Verdict, pending_features
from attn_doctor.facts.model import Environment
from attn_doctor.report import install
from attn_doctor.report.tally import tally

REPORT_SCHEMA_ID = "attn-doctor/report"
REPORT_SCHEMA_VERSION = 1


def _finding_dict(finding: Finding, env: Environment) -> dict[str, Any]:
    rule = finding.rule
    plans = install.to_json(finding, env) if finding.verdict is not Verdict.NOT_AFFECTED else []
    return {
        "id": rule.id,
        "title": rule.title,
        "severity": rule.severity,
        "component": rule.component,
        "verdict": finding.verdict.value,
        "version_verdict": finding.version_verdict.value,
        "probe": finding.probe.to_json() if finding.probe else None,
        "ignored": finding.ignored,
        "reasons": [
            {
                "condition": r.condition,
                "holds": r.holds,
                "text": r.text,
                "evidence": list(r.evidence),
                "suggestion": r.suggestion,
            }
            for r in finding.reasons
        ],
        "applies_if_used": list(pending_features(finding)),
        "summary": rule.summary,
        "fix": {"summary": rule.fix_summary, "pins": list(rule.fix_pins), "install": plans},
        "references": list(rule.references),
        "repro": rule.repro,
    }


def to_json(result: CheckResult) -> str:
    failing = {f.rule.id for f in result.failing()}
    counts = tally(result.findings)
    document = {
        "schema": REPORT_SCHEMA_ID,
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "environment": result.environment.to_json_dict(),
        "fail_on": result.fail_on,
        "findings": [
            {**_finding_dict(f, result.environment), "failing": f.rule.id in failing} for f in result.findings
        ],
        "problems": result.problems,
        "notes": result.notes,
        "summary": {
            "affected": counts.affected,
            "unknown": counts.unknown,
            "only_if_used": counts.only_if_used,
            "not-affected": counts.not_affected,
            "ignored": counts.ignored,
            "failing": len(failing),
            "applies_if_used": _applies_if_used(result.findings),
        },
        "exit_code": result.exit_code,
    }
    return json.dumps(document, indent=2)


def _applies_if_used(findings: list[Finding]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for finding in findings:
        for feature in pending_features(finding):
            groups.setdefault(feature, []).append(finding.rule.id)
    return groups
