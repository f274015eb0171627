"""Where a finding points in the user's files: the requirements line that declared a package."""

from __future__ import annotations

import re

from attn_doctor.engine.matcher import Finding

_FILE_LINE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")


def requirement_location(finding: Finding) -> tuple[str, int] | None:
    for reason in finding.reasons:
        match = _FILE_LINE.match(reason.origin or "")
        if match:
            return match["file"], int(match["line"])
    return None
