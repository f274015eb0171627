"""Report formats: the human report (text.py) and one module per machine format.

Each machine format is a pure function ``CheckResult -> str``.
"""

from __future__ import annotations

from collections.abc import Callable

from attn_doctor.check import CheckResult


def formatter(name: str) -> Callable[[CheckResult], str]:
    """The renderer for ``--format name`` (imported on demand: `check` pays only for its own)."""
    from attn_doctor.report import github, gitlab, json_report, junit, markdown, sarif

    return {
        "json": json_report.to_json,
        "markdown": markdown.to_markdown,
        "sarif": sarif.to_sarif,
        "junit": junit.to_junit,
        "github": github.to_github,
        "gitlab": gitlab.to_gitlab,
    }[name]
