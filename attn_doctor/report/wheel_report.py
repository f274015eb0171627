"""`attn-doctor wheel` as text (fitted to the terminal), JSON (schemas/wheel.schema.json) or lines
for a requirements file."""

from __future__ import annotations

import json
from typing import Any

from attn_doctor import __version__
from attn_doctor.planner.interface import Plan
from attn_doctor.report.install import plan_dict
from attn_doctor.report.width import fit

SCHEMA_ID, SCHEMA_VERSION = "attn-doctor/wheel", 1


def to_text(target: str, plans: list[Plan], width: int | None) -> str:
    lines = [*fit(f"attn-doctor wheel (target: {target})", width), ""]
    for plan in plans:
        lines.append(plan.package)
        if plan.command:
            lines += fit(f"  {plan.command}", width, shell=True)
        else:
            lines.append("  no command fits as the stack stands")
        lines += fit(f"  why: {plan.why}", width)
        for number, way in enumerate(plan.ways_out, 1):
            lines += fit(f"  way out {number}: {way.title}", width)
            for command in way.commands:
                lines += fit(f"    {command}", width, shell=True)
            lines += fit(f"    why: {way.why}", width)
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def to_requirements(target: str, plans: list[Plan]) -> str:
    """What pip installs from a requirements file: each plan's line; torch's index as an extra
    index (a requirements file's --index-url would hide PyPI from every other line), its packages
    pinned to versions that index holds; a plan with no line is a comment saying why."""
    lines = [f"# attn-doctor wheel (target: {target})"]
    indexes = sorted({plan.index for plan in plans if plan.index and plan.requirement})
    lines += [f"--extra-index-url {index}" for index in indexes]
    for plan in plans:
        if plan.requirement:
            lines.append(plan.requirement)
        elif plan.command:
            lines.append(f"# {plan.package}: not a requirement line; run: {plan.command}")
        else:
            lines.append(f"# {plan.package}: nothing fits: {plan.why}")
    return "\n".join(lines) + "\n"


def to_json(target: str, plans: list[Plan]) -> str:
    document: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "target": target,
        "plans": [plan_dict(plan) for plan in plans],
    }
    return json.dumps(document, indent=2) + "\n"
