"""GitHub Actions workflow commands: one annotation line per finding."""

from __future__ import annotations

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Verdict, pending_features
from attn_doctor.facts.features import FEATURES
from attn_doctor.report import unknowns
from attn_doctor.report.locations import annotated, requirement_location
from attn_doctor.words import counted


def to_github(result: CheckResult) -> str:
    """Workflow commands: one ``::error``/``::warning`` line per finding, one ``::notice`` per fact
    whose absence leaves rules unknown."""
    lines = []
    conditional: dict[tuple[tuple[str, ...], tuple[str, int] | None], list[str]] = {}
    for finding in annotated(result):
        rule = finding.rule
        if unknowns.is_grouped(finding):
            continue  # one notice per missing fact, below
        if finding.verdict is Verdict.UNKNOWN and pending_features(finding):
            place = requirement_location(finding)
            conditional.setdefault((pending_features(finding), place), []).append(rule.id)
            continue
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
    for (features, place), rule_ids in conditional.items():
        where = "" if place is None else f"file={gh_property(place[0])},line={place[1]},"
        count = f"{counted(len(rule_ids), 'rule')} {'applies' if len(rule_ids) == 1 else 'apply'}"
        title = gh_property(f"attn-doctor: {count} only if you use {' and '.join(features)}")
        named = set(features)  # features, and model phrases ("a gemma2 model")
        options = (("--feature", named & set(FEATURES)), ("--model", named - set(FEATURES)))
        declare = ", ".join(option for option, needed in options if needed)
        message = f"applies if you use {' and '.join(features)} (declare: {declare}): {', '.join(rule_ids)}"
        lines.append(f"::notice {where}title={title}::{gh_data(message)}")
    for group in unknowns.groups(result.findings):
        title = gh_property(f"attn-doctor: {group.headline()}")
        lines.append(f"::notice title={title}::{gh_data('unknown: ' + ', '.join(group.rule_ids))}")
    lines += [f"::error title=attn-doctor input::{gh_data(problem)}" for problem in result.problems]
    return "\n".join(lines) + ("\n" if lines else "")


def gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def gh_property(text: str) -> str:
    return gh_data(text).replace(":", "%3A").replace(",", "%2C")
