"""`attn-doctor fix` output: the text report, JSON (schemas/fix.schema.json) and the constraints
file. Pure functions of the plan, except ``write_constraints``. The text report fits ``width``
columns (report.width: wrapped at spaces, the pip command with backslash line ends)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attn_doctor import __version__
from attn_doctor.engine.matcher import Verdict
from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.errors import InputError
from attn_doctor.fixer.plan import Change, FixPlan
from attn_doctor.report.width import fit
from attn_doctor.words import counted

FIX_SCHEMA_ID = "attn-doctor/fix"
FIX_SCHEMA_VERSION = 1


def pip_command(plan: FixPlan) -> str | None:
    """The plan's commands as one shell line (torch's index and PyPI take one command each)."""
    return " && ".join(plan.commands) or None


def render(
    plan: FixPlan,
    output_format: str,
    constraints_file: Path | None = None,
    verbose: bool = False,
    width: int | None = None,
) -> str:
    if output_format == "json":
        return to_json(plan, constraints_file)
    return to_text(plan, constraints_file, verbose, width)


def to_text(
    plan: FixPlan, constraints_file: Path | None = None, verbose: bool = False, width: int | None = None
) -> str:
    """The human report; with ``width``, each line fitted to it (None: lines left whole)."""
    before, fail_on = plan.before, plan.before.fail_on
    failing = len(before.failing())
    lines = [f"attn-doctor fix (target: {before.environment.target})"]
    if not failing:
        lines.append(f"Nothing to fix: no finding at or above --fail-on {fail_on}{_below(plan)}.")
    else:
        left = len(plan.after.failing())
        lines.append(
            f"{counted(failing, 'finding')} at or above --fail-on {fail_on}; "
            f"checked again with the versions below: {left} left."
        )
    commands = [f"  {command}" for command in plan.commands]
    if commands:
        lines += ["", *commands, ""]
        for change in plan.changes:
            lines += _change_lines(change)
    if plan.stays:
        lines += ["", f"Stays ({len(plan.stays)}):"]
        for stay in plan.stays:
            rule = stay.finding.rule
            lines += [
                f"  ✗ {rule.id} [{rule.severity}]: {rule.title}",
                f"    why: {stay.reason}",
                f"    fix: {' '.join(rule.fix_summary.split())}",
            ]
    if plan.unknown:
        lines += ["", "Not considered (unknown: a fact is missing):"]
        for finding in plan.unknown:
            missing = "; ".join(r.text for r in finding.reasons if r.holds is None)
            lines.append(f"  ? {finding.rule.id}: {missing}")
    if plan.searched:
        bound = ", stopped at its bound" if plan.bounded else ""
        tried = counted(plan.evaluated, "combination")
        lines += ["", f"Searched {', '.join(plan.searched)}: {tried}{bound}."]
    if verbose and plan.rejected:
        lines += ["", "Not proposed:"]
        lines += [f"  {r.package}=={r.version}: {r.reason}" for r in plan.rejected]
    if constraints_file is not None:
        lines.append(f"Constraints written to {constraints_file}.")
    # each command is pasted whole: backslash line ends
    fitted = [part for line in lines for part in fit(line, width, shell=line in commands)]
    return "\n".join(fitted) + "\n"


def _below(plan: FixPlan) -> str:
    """The affected findings under --fail-on, and how to plan them: a warning is still a fix."""
    failing = {f.rule.id for f in plan.before.failing()}
    below = [f for f in plan.before.findings if f.verdict is Verdict.AFFECTED and f.rule.id not in failing]
    if not below:
        return ""
    lowest = max((f.rule.severity for f in below), key=SEVERITIES.index)
    count = counted(len(below), "finding")
    return f" ({count} below it: --fail-on {lowest} plans {'them' if len(below) > 1 else 'it'})"


def _change_lines(change: Change) -> list[str]:
    note = " (a downgrade: no upgrade the rules name clears it)" if change.downgrade else ""
    lines = [f"  {change.distribution} {change.installed} -> {change.proposed}{note}"]
    if change.clears:
        lines.append(f"    clears {', '.join(change.clears)}")
    if change.keeps_clear:
        lines.append(f"    needed with the other changes: keeps {', '.join(change.keeps_clear)} clear")
    if change.build:
        lines.append(f"    checked as the {change.build} build: the command installs that variant")
    return lines


def to_json(plan: FixPlan, constraints_file: Path | None = None) -> str:
    document = {
        "schema": FIX_SCHEMA_ID,
        "schema_version": FIX_SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "environment": plan.before.environment.to_json_dict(),
        "fail_on": plan.before.fail_on,
        "failing_before": [f.rule.id for f in plan.before.failing()],
        "failing_after": [f.rule.id for f in plan.after.failing()],
        "changes": [_change_dict(change) for change in plan.changes],
        "pip_command": pip_command(plan),
        "pip_commands": plan.commands,
        "constraints": [change.requirement for change in plan.changes],
        "extra_index_urls": plan.indexes,
        "constraints_file": None if constraints_file is None else str(constraints_file),
        "stays": [
            {
                "id": stay.finding.rule.id,
                "severity": stay.finding.rule.severity,
                "kind": stay.kind,
                "reason": stay.reason,
                "fix": {"summary": stay.finding.rule.fix_summary, "pins": list(stay.finding.rule.fix_pins)},
            }
            for stay in plan.stays
        ],
        "unknown": [f.rule.id for f in plan.unknown],
        "search": {"packages": plan.searched, "evaluated": plan.evaluated, "bounded": plan.bounded},
        "rejected": [{"package": r.package, "version": r.version, "reason": r.reason} for r in plan.rejected],
        "problems": plan.before.problems,
        "exit_code": plan.exit_code,
    }
    return json.dumps(document, indent=2) + "\n"


def _change_dict(change: Change) -> dict[str, Any]:
    return {
        "package": change.package,
        "distribution": change.distribution,
        "installed": change.installed,
        "proposed": change.proposed,
        "requirement": change.requirement,
        "downgrade": change.downgrade,
        "clears": list(change.clears),
        "keeps_clear": list(change.keeps_clear),
        "build": change.build,
    }


def constraints(plan: FixPlan) -> str:
    """A pip constraints file: the indexes beside PyPI its versions need (a local version such as
    torch 2.7.1+cu128 is only on its variant's index), a comment header naming the findings, then
    ``name==version`` lines."""
    fail_on = plan.before.fail_on
    lines = [f"--extra-index-url {index}" for index in plan.indexes]
    lines.append(f"# attn-doctor fix: versions that clear the findings at or above --fail-on {fail_on}")
    for change in plan.changes:
        lines.append(f"# {change.distribution} {change.installed} -> {change.proposed}: {_effect(change)}")
    lines += [f"# stays: {stay.finding.rule.id} ({stay.kind})" for stay in plan.stays]
    if not plan.changes:
        lines.append("# nothing to change")
    lines += [change.requirement for change in plan.changes]
    return "\n".join(lines) + "\n"


def _effect(change: Change) -> str:
    clears = [f"clears {', '.join(change.clears)}"] if change.clears else []
    keeps = [f"keeps {', '.join(change.keeps_clear)} clear"] if change.keeps_clear else []
    return "; ".join([*clears, *keeps])


def write_constraints(plan: FixPlan, path: Path) -> None:
    try:
        path.write_text(constraints(plan), encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), exc.strerror or "cannot write") from None
