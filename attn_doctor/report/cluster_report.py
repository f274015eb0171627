"""The cluster report: who is missing, what drifts between ranks, each finding with its ranks."""

from __future__ import annotations

import json

from attn_doctor import __version__
from attn_doctor.cluster.merge import ClusterFinding, ClusterResult
from attn_doctor.report.width import fit_text
from attn_doctor.words import counted

CLUSTER_SCHEMA_ID = "attn-doctor/cluster"
CLUSTER_SCHEMA_VERSION = 1


def to_text(result: ClusterResult, width: int | None = None) -> str:
    """The human report, each line fitted to ``width`` columns (None: lines left whole, for a pipe)."""
    expected = len(result.members) + len(result.missing)
    lines = [f"attn-doctor cluster check: {len(result.members)} of {expected} reported"]
    lines += [f"✗ missing: {missing}" for missing in result.missing]
    lines.append("")
    if result.drift:
        lines.append("Drift (facts that differ between ranks):")
        for fact, by_value in result.drift.items():
            lines.append(f"  ! {fact}")
            lines += [f"      {value}: {', '.join(labels)}" for value, labels in by_value.items()]
    else:
        lines.append(f"✓ no drift: the same facts on all {len(result.members)}")
    lines.append("")
    for finding in result.findings:
        lines += _finding_lines(finding, len(result.members))
    lines += [f"problem: {problem}" for problem in result.problems]
    failing = sum(f.failing for f in result.findings)
    lines.append(
        f"{counted(len(result.findings), 'rule')} affected or unknown somewhere; {failing} failing; "
        f"{counted(len(result.drift), 'drifting fact')}; {len(result.missing)} missing; "
        f"exit code {result.exit_code}"
    )
    return fit_text("\n".join(lines) + "\n", width)


def _finding_lines(finding: ClusterFinding, members: int) -> list[str]:
    rule = finding.rule
    mark = ("✗" if rule.severity == "error" else "!") if finding.affected else "?"
    lines = [f"{mark} {rule.id} [{rule.severity}]: {rule.title}"]
    if finding.affected:
        everywhere = " (all)" if len(finding.affected) == members else ""
        lines.append(f"    affected on{everywhere}: {', '.join(finding.affected)}")
    if finding.unknown:
        lines.append(f"    unknown on: {', '.join(finding.unknown)}")
    lines.append(f"    fix: {rule.fix_summary}")
    lines.append(f"    see: {rule.references[0]}")
    return lines


def to_json(result: ClusterResult) -> str:
    document = {
        "schema": CLUSTER_SCHEMA_ID,
        "schema_version": CLUSTER_SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "members": [member.to_json_dict() for member in result.members],
        "missing": result.missing,
        "drift": [
            {"fact": fact, "values": [{"value": v, "members": m} for v, m in by_value.items()]}
            for fact, by_value in result.drift.items()
        ],
        "findings": [
            {
                "id": f.rule.id,
                "title": f.rule.title,
                "severity": f.rule.severity,
                "affected": f.affected,
                "unknown": f.unknown,
                "failing": f.failing,
                "fix": {"summary": f.rule.fix_summary, "pins": list(f.rule.fix_pins)},
                "references": list(f.rule.references),
            }
            for f in result.findings
        ],
        "problems": result.problems,
        "exit_code": result.exit_code,
    }
    return json.dumps(document, indent=2) + "\n"
