"""GitHub Actions workflow commands: one annotation line per finding."""

from __future__ import annotations

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Verdict
from attn_doctor.report.locations import annotated, requirement_location


def to_github(result: CheckResult) -> str:
    """Workflow commands: one ``::error``/``::warning``/``::notice`` line per finding."""
    lines = []
    for finding in annotated(result):
        rule = finding.rule
        if finding.verdict is Verdict.UNKNOWN:
            command = "notice"
            missing = "; ".join(r.text for r in finding.reasons if r.holds is None)
            message = f"unknown ({missing}): {rule.title}"
        else:
            command = {"error": "error", "warning": "warning", "info": "notice"}[rule.severity]
            message = f"{rule.title}. Fix: {rule.fix_summary} See {rule.references[0]}"
        properties = [f"title={gh_property('attn-doctor ' + rule.id)}"]
        location = requirement_location(finding)
        if location is not None:
            properties[:0] = [f"file={gh_property(location[0])}", f"line={location[1]}"]
        lines.append(f"::{command} {','.join(properties)}::{gh_data(message)}")
    lines += [f"::error title=attn-doctor input::{gh_data(problem)}" for problem in result.problems]
    return "\n".join(lines) + ("\n" if lines else "")


def gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def gh_property(text: str) -> str:
    return gh_data(text).replace(":", "%3A").replace(",", "%2C")
