"""SARIF 2.1.0 for GitHub code scanning: every rule in the driver, a result per finding."""

from __future__ import annotations

import json
from typing import Any

from attn_doctor import __version__
from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Finding, Verdict
from attn_doctor.engine.schema import Rule
from attn_doctor.report.locations import requirement_location

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def to_sarif(result: CheckResult) -> str:
    rules = [finding.rule for finding in result.findings]
    index = {rule.id: position for position, rule in enumerate(rules)}
    results = [
        _sarif_result(f, index[f.rule.id]) for f in result.findings if f.verdict is not Verdict.NOT_AFFECTED
    ]
    document = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "attn-doctor",
                        "version": __version__,
                        "rules": [_sarif_rule(rule) for rule in rules],
                    }
                },
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not result.problems,
                        "toolExecutionNotifications": [
                            {"level": "error", "message": {"text": p}} for p in result.problems
                        ],
                    }
                ],
            }
        ],
    }
    return json.dumps(document, indent=2)


def _sarif_rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "name": rule.id,
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.summary},
        "helpUri": rule.references[0],
        "help": {"text": f"{rule.fix_summary}\nReferences: {' '.join(rule.references)}"},
        "defaultConfiguration": {"level": _SARIF_LEVELS[rule.severity]},
        "properties": {"tags": [rule.component]},
    }


def _sarif_result(finding: Finding, rule_index: int) -> dict[str, Any]:
    rule = finding.rule
    unknown = finding.verdict is Verdict.UNKNOWN
    prefix = (
        "Could not decide (" + "; ".join(r.text for r in finding.reasons if r.holds is None) + "): "
        if unknown
        else ""
    )
    entry: dict[str, Any] = {
        "ruleId": rule.id,
        "ruleIndex": rule_index,
        "level": "note" if unknown else _SARIF_LEVELS[rule.severity],
        "message": {"text": f"{prefix}{rule.title}. Fix: {rule.fix_summary}"},
        "properties": {"verdict": finding.verdict.value},
    }
    if finding.probe is not None:
        entry["properties"]["probe"] = finding.probe.to_json()
    location = requirement_location(finding)
    if location is not None:
        file, line = location
        entry["locations"] = [
            {"physicalLocation": {"artifactLocation": {"uri": file}, "region": {"startLine": line}}}
        ]
    # one place per line of code, however many of the rule's features it shows
    evidence = list(dict.fromkeys(place for reason in finding.reasons for place in reason.evidence))
    if evidence:
        entry["relatedLocations"] = [_related(index, place) for index, place in enumerate(evidence)]
    if finding.ignored is not None:
        entry["suppressions"] = [{"kind": "external", "justification": finding.ignored}]
    return entry


def _related(index: int, place: str) -> dict[str, Any]:
    """``src/train.py:12``: where the project shows a feature the rule needs."""
    file, _, line = place.rpartition(":")
    return {
        "id": index,
        "physicalLocation": {"artifactLocation": {"uri": file}, "region": {"startLine": int(line)}},
        "message": {"text": "the project uses a feature this rule needs here"},
    }
