"""JUnit XML: one testcase per rule, for CI test tabs."""

from __future__ import annotations

from xml.etree import ElementTree

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Verdict


def to_junit(result: CheckResult) -> str:
    findings = result.findings
    suite = ElementTree.Element(
        "testsuite",
        {
            "name": "attn-doctor",
            "tests": str(len(findings)),
            "failures": str(sum(f.verdict is Verdict.AFFECTED and f.ignored is None for f in findings)),
            "skipped": str(sum(f.verdict is Verdict.UNKNOWN or f.ignored is not None for f in findings)),
            "errors": str(len(result.problems)),
        },
    )
    for finding in findings:
        rule = finding.rule
        case = ElementTree.SubElement(
            suite, "testcase", {"classname": f"attn-doctor.{rule.component}", "name": rule.id}
        )
        details = "\n".join(
            [rule.summary, f"Fix: {rule.fix_summary}", *rule.references, *(r.text for r in finding.reasons)]
        )
        if finding.ignored is not None:
            ElementTree.SubElement(case, "skipped", {"message": f"ignored: {finding.ignored}"})
        elif finding.verdict is Verdict.AFFECTED:
            ElementTree.SubElement(
                case, "failure", {"message": rule.title, "type": rule.severity}
            ).text = details
        elif finding.verdict is Verdict.UNKNOWN:
            missing = "; ".join(r.text for r in finding.reasons if r.holds is None)
            ElementTree.SubElement(case, "skipped", {"message": f"unknown: {missing}"})
    for problem in result.problems:
        case = ElementTree.SubElement(suite, "testcase", {"classname": "attn-doctor.input", "name": "input"})
        ElementTree.SubElement(case, "error", {"message": problem})
    root = ElementTree.Element("testsuites")
    root.append(suite)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
