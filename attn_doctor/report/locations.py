"""Where a finding points in the user's files (the pin-file line that declared a package), and which
findings the CI annotation formats report."""

from __future__ import annotations

import re

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Finding, Verdict

# FILE:LINE, or FILE:LINE (what the line said: a wheel's URL, the ARG default a version took)
_FILE_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?: \(.*\))?$", re.S)


def requirement_location(finding: Finding) -> tuple[str, int] | None:
    for reason in finding.reasons:
        match = _FILE_LINE.match(reason.origin or "")
        if match:
            return match["file"], int(match["line"])
    return None


def annotated(result: CheckResult) -> list[Finding]:
    """The findings a CI annotation shows: affected or unknown, and not ignored."""
    return [f for f in result.findings if f.verdict is not Verdict.NOT_AFFECTED and f.ignored is None]
