"""A rule in full, for `attn-doctor rules show`."""

from __future__ import annotations

from attn_doctor.engine.schema import Rule


def describe(rule: Rule) -> str:
    affects = rule.affects
    lines = [
        f"{rule.id} [{rule.severity}, {rule.component}]",
        rule.title,
        "",
        rule.summary,
        "",
        "Affects (all must hold):",
    ]
    lines += [f"  {name} {spec or '(any version)'}" for name, spec in affects.packages.items()]
    lines += [f"  {key} {spec}" for key, spec in affects.versions.items()]
    if affects.platform:
        lines.append(f"  platform: {', '.join(affects.platform)}")
    if affects.features:
        lines.append(f"  features in use: {', '.join(affects.features)}")
    if rule.symptoms:
        lines += ["", "Symptoms (regular expressions):", *(f"  {s}" for s in rule.symptoms)]
    lines += ["", f"Fix: {rule.fix_summary}"]
    if rule.fix_pins:
        lines.append(f"Pins: {' '.join(rule.fix_pins)}")
    lines += ["", "References:", *(f"  {url}" for url in rule.references)]
    if rule.repro:
        lines += ["", f"Repro: attn-doctor repro {rule.id}"]
    lines.append(f"File: {rule.path}")
    return "\n".join(lines)
