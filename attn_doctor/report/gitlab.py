"""GitLab Code Quality (``artifacts: reports: codequality``): a JSON array of issues, each with a
description, a check name, a fingerprint, a severity and the file and line it points at (the pin
file line that declared the package; the project's pyproject.toml where no line is known)."""

from __future__ import annotations

import hashlib
import json

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Verdict
from attn_doctor.report.locations import annotated, requirement_location

# Code Quality severities: info, minor, major, critical, blocker
_SEVERITY = {"error": "critical", "warning": "major", "info": "info"}


def to_gitlab(result: CheckResult) -> str:
    issues = []
    for finding in annotated(result):
        rule = finding.rule
        location = requirement_location(finding) or ("pyproject.toml", 1)
        unknown = finding.verdict is Verdict.UNKNOWN
        prefix = "unknown: " if unknown else ""
        issues.append(
            {
                "description": f"{prefix}{rule.title}. Fix: {rule.fix_summary}",
                "check_name": f"attn-doctor/{rule.id}",
                "fingerprint": hashlib.sha256(f"{rule.id}:{location[0]}".encode()).hexdigest(),
                "severity": "info" if unknown else _SEVERITY[rule.severity],
                "location": {"path": location[0], "lines": {"begin": location[1]}},
            }
        )
    return json.dumps(issues, indent=2) + "\n"
