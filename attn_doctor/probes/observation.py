"""What a probe reports about one rule, shared by the probe modules (child) and the runner (parent)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class ProbeVerdict(str, enum.Enum):
    AFFECTED = "affected-by-probe"
    NOT_AFFECTED = "not-affected-by-probe"
    SKIPPED = "skipped"
    ERROR = "probe-error"  # the probe itself failed: crashed, hung, or found a code path it can't drive


@dataclass(frozen=True)
class Observation:
    rule: str
    verdict: ProbeVerdict
    evidence: str  # what the probe saw, e.g. "cu_seqlens_q=[16] does not start at 0"

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "verdict": self.verdict.value, "evidence": self.evidence}

    @classmethod
    def from_json(cls, data: Any) -> Observation:
        """Raises ValueError/KeyError/TypeError on anything that is not a well-formed observation."""
        return cls(str(data["rule"]), ProbeVerdict(data["verdict"]), str(data["evidence"]))


class ProbeSkipped(Exception):
    """Raised by a probe that cannot run here (no GPU, an unsupported release); the message says why."""
