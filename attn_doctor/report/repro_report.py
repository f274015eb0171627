"""Reports of repro runs: text, JSON and Markdown. Every row names the device, the versions
and the exact command that runs the case again."""

from __future__ import annotations

import json
from dataclasses import asdict

from attn_doctor import __version__
from attn_doctor.engine.loader import RuleSet
from attn_doctor.report.markdown import cell
from attn_doctor.report.width import fit
from attn_doctor.repro.catalogue import Repro
from attn_doctor.repro.runner import CaseResult, Status
from attn_doctor.words import counted

REPRO_SCHEMA_ID, REPRO_SCHEMA_VERSION = "attn-doctor/repro", 1
EXPECTED = {True: "bug expected", False: "clean run expected", None: "live probe: either way"}


def to_text(results: list[CaseResult], width: int | None = None) -> str:
    """The human report, each line fitted to ``width`` columns (None: lines left whole, for a pipe);
    a rerun command too long for its line goes on lines of its own that still paste as one."""
    lines: list[str] = []

    def add(text: str) -> None:
        lines.extend(fit(text, width))

    for result in results:
        mark = "-" if result.status is Status.SKIPPED else "✓" if result.as_expected else "✗"
        expected = EXPECTED[result.expect_bug]
        add(f"{mark} {result.repro} / {result.case}: {result.status.value} ({expected})")
        add(f"    {result.detail}")
        if result.sanitizer:
            add(f"    compute-sanitizer: {result.sanitizer}")
        versions = ", ".join(f"{name} {version}" for name, version in result.versions.items())
        add(f"    on {result.device}" + (f" with {versions}" if versions else ""))
        rerun = f"    rerun: {result.command}"
        if width is None or len(rerun) <= width:
            lines.append(rerun)
        else:
            lines.append("    rerun:")
            lines.extend(fit(f"      {result.command}", width, shell=True))
    add(summary(results))
    return "\n".join(lines) + "\n"


def listing(repros: tuple[Repro, ...], rules: RuleSet, width: int | None = None) -> str:
    """`repro --list`: a header, then per reproduction what it shows, its cases and its rules."""
    lines = fit(
        "Bundled reproductions (attn-doctor repro ID runs one, --case NAME one of its cases, "
        "--all every one; a rule id, issue URL or owner/repo#N names one too):",
        width,
    )
    for repro in repros:
        buggy = ", ".join(case.name for case in repro.cases if case.expect_bug)
        clean = ", ".join(case.name for case in repro.cases if not case.expect_bug)
        cases = "; ".join(
            part
            for part in (f"{buggy} (the bug)" if buggy else "", f"{clean} (no bug)" if clean else "")
            if part
        )
        linked = [rule.id for rule in rules.rules if rule.repro == repro.id]
        lines.append("")
        lines.extend(fit(f"{repro.id}: {repro.title}", width))
        lines.extend(fit(f"    cases: {cases}", width))
        if linked:
            lines.extend(fit(f"    rules: {', '.join(linked)}", width))
    return "\n".join(lines) + "\n"


def summary(results: list[CaseResult]) -> str:
    counts = {status: sum(r.status is status for r in results) for status in Status}
    parts = ", ".join(f"{n} {status.value}" for status, n in counts.items() if n)
    cases = counted(len(results), "case")
    if nothing_ran(results):
        return f"{cases}: {parts}; nothing ran: {skip_reasons(results)}"
    unexpected = sum(not r.as_expected for r in results)
    return f"{cases}: {parts}; {unexpected} not as expected"


def nothing_ran(results: list[CaseResult]) -> bool:
    """Every case skipped: the run checked nothing, and must not pass as if it had."""
    return bool(results) and all(r.status is Status.SKIPPED for r in results)


def skip_reasons(results: list[CaseResult]) -> str:
    """Why the cases were skipped, each reason once."""
    return "; ".join(dict.fromkeys(r.detail for r in results if r.status is Status.SKIPPED))


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
            f"| {cell(r.repro)} | {cell(r.case)} | {r.status.value} | {EXPECTED[r.expect_bug]} "
            f"| {cell(r.detail)} | {cell(r.device)} | `{cell(r.command)}` |"
        )
    return rows


FORMATTERS = {"rich": to_text, "json": to_json, "markdown": to_markdown}
