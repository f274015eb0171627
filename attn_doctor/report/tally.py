"""How many rules came out each way: one count for every format, so the text's summary line and
JSON's ``summary`` never disagree. An ignored finding is counted as ignored only; "only if used"
is the part of the unknown ones that a feature's (or a model family's) unknown use alone decides."""

from __future__ import annotations

from dataclasses import dataclass

from attn_doctor.engine.matcher import Finding, Verdict, pending_features


@dataclass(frozen=True)
class Tally:
    affected: int
    unknown: int  # only_if_used included
    only_if_used: int
    not_affected: int
    ignored: int


def tally(findings: list[Finding]) -> Tally:
    counted = [f for f in findings if f.ignored is None]
    return Tally(
        affected=sum(f.verdict is Verdict.AFFECTED for f in counted),
        unknown=sum(f.verdict is Verdict.UNKNOWN for f in counted),
        only_if_used=sum(bool(pending_features(f)) for f in counted),
        not_affected=sum(f.verdict is Verdict.NOT_AFFECTED for f in counted),
        ignored=len(findings) - len(counted),
    )
