"""Turn matched symptoms into causes, most likely first.

The same message can be a symptom of several rules (``index out of bounds`` is), so the stack
decides first: a rule affected on this stack outranks an unknown one, which outranks one that
is not affected. Then how specific the match is: more of the rule's patterns matched, a pattern
fewer rules share, a longer literal. Then the latest match in the log (the crash is at the end).
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_doctor.engine.matcher import Finding, Verdict
from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.explain.scan import Hits, Occurrence
from attn_doctor.explain.symptoms import Symptom

_VERDICT_ORDER = {Verdict.AFFECTED: 0, Verdict.UNKNOWN: 1, Verdict.NOT_AFFECTED: 2}


@dataclass(frozen=True)
class SymptomMatch:
    symptom: Symptom
    lines: int  # how many lines matched
    first: Occurrence
    last: Occurrence


@dataclass(frozen=True)
class Cause:
    finding: Finding  # the rule and its verdict on this stack
    matches: tuple[SymptomMatch, ...]

    @property
    def last_line(self) -> int:
        return max(match.last.line for match in self.matches)


def rank(findings: list[Finding], symptoms: list[Symptom], hits: dict[str, Hits]) -> list[Cause]:
    """The findings whose rule has a matched symptom, most likely first."""
    matched = {
        symptom.pattern: SymptomMatch(symptom, found.count, found.first, found.last)
        for symptom in symptoms
        if (found := hits.get(symptom.pattern)) and found.first and found.last
    }
    causes = [
        Cause(finding, tuple(matched[p] for p in finding.rule.symptoms if p in matched))
        for finding in findings
    ]
    return sorted((cause for cause in causes if cause.matches), key=_likelihood)


def _likelihood(cause: Cause) -> tuple[int, int, int, int, int, int, str]:
    """Sort key, most likely first."""
    rule = cause.finding.rule
    return (
        _VERDICT_ORDER[cause.finding.verdict],
        -len(cause.matches),
        min(len(match.symptom.rules) for match in cause.matches),
        -max(len(match.symptom.literal) for match in cause.matches),
        -cause.last_line,
        SEVERITIES.index(rule.severity),
        rule.id,
    )
