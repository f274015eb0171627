"""Reports of repro runs: text, JSON and Markdown. Every row names the device, the versions
and the exact command that runs the case again."""

from __future__ import annotations

import json
from dataclasses import asdict

from attn_doctor import __version__
from attn_doctor.report.markdown import cell
from attn_doctor.repro.runner import CaseResult, Status

REPRO_SCHEMA_ID, REPRO_SCHEMA_VERSION = "attn-doctor/repro", 1
_EXPECTED = {True: "bug expected", False: "clean run expected", None: "live probe: either way"}


def to_text(results: list[CaseResult]) -> str:
    lines = []
    for result in results:
        mark = "✓" if result.as_expected else "✗"
        expected = _EXPECTED[result.expect_bug]
        lines.append(f"{mark} {result.repro} / {result.case}: {result.status.value} ({expected})")
        lines.append(f"    {result.detail}")
        if result.sanitizer:
            lines.append(f"    compute-sanitizer: {result.sanitizer}")
        versions = ", ".join(f"{name} {version}" for name, version in result.versions.items())
        lines.append(f"    on {result.device}" + (f" with {versions}" if versions else ""))
        lines.append(f"    rerun: {result.command}")
    lines.append(summary(results))
    return "\n".join(lines) + "\n"


def summary(results: list[CaseResult]) -> str:
    counts = {status: sum(r.status is status for r in results) for status in Status}
    unexpected = sum(not r.as_expected for r in results)
    parts = ", ".join(f"{n} {status.value}" for status, n in counts.items() if n)
    return f"{len(results)} cases: {parts}; {unexpected} not as expected"


def to_json(results: list[CaseResult]) -> str:
    document = {
        "schema": REPRO_SCHEMA_ID,
        "schema_version": REPRO_SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "results": [{**asdict(r), "status": r.status.value, "as_expected": r.as_expected} for r in results],
    }
    return json.dumps(document, indent=2) + "\n"


def to_markdown(results: list[CaseResult]) -> str:
    return "\n".join(["## attn-doctor repro", "", *markdown_table(results), "", summary(results)]) + "\n"


def markdown_table(results: list[CaseResult]) -> list[str]:
    """A row per case (also the repro results of `attn-doctor report`)."""
    rows = [
        "| repro | case | verdict | expected | detail | device | rerun |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        rows.append(
            f"| {cell(r.repro)} | {cell(r.case)} | {r.status.value} | {_EXPECTED[r.expect_bug]} "
            f"| {cell(r.detail)} | {cell(r.device)} | `{cell(r.command)}` |"
        )
    return rows


FORMATTERS = {"rich": to_text, "json": to_json, "markdown": to_markdown}
