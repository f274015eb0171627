"""Markdown: a table of affected and unknown findings, for issues and PR comments."""

from __future__ import annotations

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Verdict
from attn_doctor.words import counted


def to_markdown(result: CheckResult) -> str:
    env = result.environment
    out = [
        "## attn-doctor check",
        "",
        f"Target: {env.target}. Exit code {result.exit_code}.",
        "",
        *findings_table(result),
    ]
    not_affected = sum(f.verdict is Verdict.NOT_AFFECTED for f in result.findings)
    out += ["", f"{counted(not_affected, 'more rule')} checked: not affected."]
    out += [f"- input problem: {cell(problem)}" for problem in result.problems]
    return "\n".join(out) + "\n"


def findings_table(result: CheckResult) -> list[str]:
    """A row per affected or unknown finding (also the findings of `attn-doctor report`)."""
    out = [
        "| verdict | severity | rule | fix | reference |",
        "| --- | --- | --- | --- | --- |",
    ]
    for finding in result.findings:
        if finding.verdict is Verdict.NOT_AFFECTED:
            continue
        rule = finding.rule
        verdict = f"ignored: {finding.ignored}" if finding.ignored else finding.verdict.value
        if finding.probe is not None:
            verdict += f" ({finding.probe.verdict.value}: {finding.probe.evidence})"
        out.append(
            f"| {cell(verdict)} | {rule.severity} | `{rule.id}`: {cell(rule.title)} "
            f"| {cell(rule.fix_summary)} | {rule.references[0]} |"
        )
    return out


def cell(text: str) -> str:
    """``text`` on one line, safe inside a table cell."""
    return " ".join(text.replace("|", "\\|").split())
