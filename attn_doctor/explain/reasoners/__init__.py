"""Causes besides the rules (issue 38): each reasoner reads the evidence a maintainer reads and
answers where no rule explains the line. REASONERS is the registry (interface.Reasoner)."""

from __future__ import annotations

from attn_doctor.explain.reasoners.api_drift import ApiDriftReasoner
from attn_doctor.explain.reasoners.architecture import ArchitectureReasoner
from attn_doctor.explain.reasoners.interface import Evidence, Reasoned, Reasoner
from attn_doctor.explain.reasoners.origin import OriginReasoner

__all__ = ["REASONERS", "Evidence", "Reasoned", "Reasoner", "reason"]

# the families first: where one reads a line, its answer says more than the line's origin alone
REASONERS: tuple[Reasoner, ...] = (ArchitectureReasoner(), ApiDriftReasoner(), OriginReasoner())


def reason(evidence: Evidence) -> list[Reasoned]:
    """Every reasoner's causes, one per log line and one per cause (a message repeated on several
    lines is one cause, at its first place in the order the reasoner gave)."""
    causes: list[Reasoned] = []
    seen: set[int | str] = set()
    for reasoner in REASONERS:
        for cause in reasoner.reason(evidence):
            if cause.line not in seen and cause.id not in seen:
                causes.append(cause)
                seen |= {cause.line, cause.id}
    return causes
