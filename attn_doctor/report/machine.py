"""Machine-readable reports: JSON (schemas/report.schema.json), SARIF 2.1.0, JUnit XML, Markdown
and GitHub workflow annotations. Each is a pure function of the ``CheckResult``."""

from __future__ import annotations

import json
import re
from typing import Any
from xml.etree import ElementTree

from attn_doctor import __version__
from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Finding, Verdict
from attn_doctor.engine.schema import Rule

REPORT_SCHEMA_ID = "attn-doctor/report"
REPORT_SCHEMA_VERSION = 1
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
_FILE_LINE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")


def _finding_dict(finding: Finding) -> dict[str, Any]:
    rule = finding.rule
    return {
        "id": rule.id, "title": rule.title, "severity": rule.severity, "component": rule.component,
        "verdict": finding.verdict.value, "ignored": finding.ignored,
        "reasons": [{"condition": r.condition, "holds": r.holds, "text": r.text} for r in finding.reasons],
        "summary": rule.summary, "fix": {"summary": rule.fix_summary, "pins": list(rule.fix_pins)},
        "references": list(rule.references), "repro": rule.repro,
    }


def to_json(result: CheckResult) -> str:
    failing = {f.rule.id for f in result.failing()}
    counts = {v.value: sum(f.verdict is v for f in result.findings) for v in Verdict}
    document = {
        "schema": REPORT_SCHEMA_ID, "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "environment": result.environment.to_json_dict(),
        "fail_on": result.fail_on,
        "findings": [{**_finding_dict(f), "failing": f.rule.id in failing} for f in result.findings],
        "problems": result.problems,
        "summary": {**counts, "failing": len(failing)},
        "exit_code": result.exit_code,
    }
    return json.dumps(document, indent=2)


def to_markdown(result: CheckResult) -> str:
    env = result.environment
    out = ["## attn-doctor check", "",
           f"Facts from: {', '.join(env.sources)}. Exit code {result.exit_code}.", "",
           "| verdict | severity | rule | fix | reference |", "| --- | --- | --- | --- | --- |"]
    for finding in result.findings:
        if finding.verdict is Verdict.NOT_AFFECTED:
            continue
        rule = finding.rule
        verdict = f"ignored: {finding.ignored}" if finding.ignored else finding.verdict.value
        out.append(f"| {_md(verdict)} | {rule.severity} | `{rule.id}`: {_md(rule.title)} "
                   f"| {_md(rule.fix_summary)} | {rule.references[0]} |")
    not_affected = sum(f.verdict is Verdict.NOT_AFFECTED for f in result.findings)
    out += ["", f"{not_affected} more rules checked: not affected."]
    out += [f"- input problem: {_md(problem)}" for problem in result.problems]
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def to_sarif(result: CheckResult) -> str:
    rules = [finding.rule for finding in result.findings]
    index = {rule.id: position for position, rule in enumerate(rules)}
    results = [_sarif_result(f, index[f.rule.id]) for f in result.findings
               if f.verdict is not Verdict.NOT_AFFECTED]
    document = {
        "$schema": SARIF_SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "attn-doctor", "version": __version__,
                                "rules": [_sarif_rule(rule) for rule in rules]}},
            "results": results,
            "invocations": [{"executionSuccessful": not result.problems,
                             "toolExecutionNotifications": [
                                 {"level": "error", "message": {"text": p}} for p in result.problems]}],
        }],
    }
    return json.dumps(document, indent=2)


def _sarif_rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id, "name": rule.id, "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.summary}, "helpUri": rule.references[0],
        "help": {"text": f"{rule.fix_summary}\nReferences: {' '.join(rule.references)}"},
        "defaultConfiguration": {"level": _SARIF_LEVELS[rule.severity]},
        "properties": {"tags": [rule.component]},
    }


def _sarif_result(finding: Finding, rule_index: int) -> dict[str, Any]:
    rule = finding.rule
    unknown = finding.verdict is Verdict.UNKNOWN
    prefix = "Could not decide (" + "; ".join(r.text for r in finding.reasons if r.holds is None) + "): " \
        if unknown else ""
    entry: dict[str, Any] = {
        "ruleId": rule.id, "ruleIndex": rule_index,
        "level": "note" if unknown else _SARIF_LEVELS[rule.severity],
        "message": {"text": f"{prefix}{rule.title}. Fix: {rule.fix_summary}"},
        "properties": {"verdict": finding.verdict.value},
    }
    location = _location(finding)
    if location is not None:
        file, line = location
        entry["locations"] = [{"physicalLocation": {"artifactLocation": {"uri": file},
                                                    "region": {"startLine": line}}}]
    if finding.ignored is not None:
        entry["suppressions"] = [{"kind": "external", "justification": finding.ignored}]
    return entry


def _location(finding: Finding) -> tuple[str, int] | None:
    """A requirements line that declared an affected package, when there is one."""
    for reason in finding.reasons:
        match = _FILE_LINE.match(reason.origin or "")
        if match:
            return match["file"], int(match["line"])
    return None


def to_junit(result: CheckResult) -> str:
    findings = result.findings
    suite = ElementTree.Element("testsuite", {
        "name": "attn-doctor", "tests": str(len(findings)),
        "failures": str(sum(f.verdict is Verdict.AFFECTED and f.ignored is None for f in findings)),
        "skipped": str(sum(f.verdict is Verdict.UNKNOWN or f.ignored is not None for f in findings)),
        "errors": str(len(result.problems)),
    })
    for finding in findings:
        rule = finding.rule
        case = ElementTree.SubElement(suite, "testcase", {"classname": f"attn-doctor.{rule.component}",
                                                          "name": rule.id})
        details = "\n".join([rule.summary, f"Fix: {rule.fix_summary}", *rule.references,
                             *(r.text for r in finding.reasons)])
        if finding.ignored is not None:
            ElementTree.SubElement(case, "skipped", {"message": f"ignored: {finding.ignored}"})
        elif finding.verdict is Verdict.AFFECTED:
            ElementTree.SubElement(case, "failure", {"message": rule.title, "type": rule.severity}).text = details
        elif finding.verdict is Verdict.UNKNOWN:
            missing = "; ".join(r.text for r in finding.reasons if r.holds is None)
            ElementTree.SubElement(case, "skipped", {"message": f"unknown: {missing}"})
    for problem in result.problems:
        case = ElementTree.SubElement(suite, "testcase", {"classname": "attn-doctor.input", "name": "input"})
        ElementTree.SubElement(case, "error", {"message": problem})
    root = ElementTree.Element("testsuites")
    root.append(suite)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def to_github(result: CheckResult) -> str:
    """Workflow commands: one ``::error``/``::warning``/``::notice`` line per finding."""
    lines = []
    for finding in result.findings:
        if finding.verdict is Verdict.NOT_AFFECTED or finding.ignored is not None:
            continue
        rule = finding.rule
        if finding.verdict is Verdict.UNKNOWN:
            command = "notice"
            missing = "; ".join(r.text for r in finding.reasons if r.holds is None)
            message = f"unknown ({missing}): {rule.title}"
        else:
            command = {"error": "error", "warning": "warning", "info": "notice"}[rule.severity]
            message = f"{rule.title}. Fix: {rule.fix_summary} See {rule.references[0]}"
        properties = [f"title={_gh_property('attn-doctor ' + rule.id)}"]
        location = _location(finding)
        if location is not None:
            properties[:0] = [f"file={_gh_property(location[0])}", f"line={location[1]}"]
        lines.append(f"::{command} {','.join(properties)}::{_gh_data(message)}")
    lines += [f"::error title=attn-doctor input::{_gh_data(problem)}" for problem in result.problems]
    return "\n".join(lines) + ("\n" if lines else "")


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


FORMATTERS = {
    "json": to_json, "markdown": to_markdown, "sarif": to_sarif, "junit": to_junit, "github": to_github,
}
