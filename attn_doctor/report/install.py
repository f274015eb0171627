"""A finding's concrete install command: the plan (planner/) of the package its rule's `[fix] plan`
names, on the finding's environment. check, explain and their JSON show the same plan `wheel`
prints, so a fix names the wheel or the command instead of telling the user to find one."""

from __future__ import annotations

from typing import Any

from attn_doctor.engine.matcher import Finding
from attn_doctor.facts.model import Environment
from attn_doctor.facts.names import rule_name
from attn_doctor.planner.interface import Plan


def plans(finding: Finding, env: Environment) -> list[Plan]:
    """The plan of the package the rule names, of the release the finding's own release facts
    propose for it where they do (the nearest with a wheel, as `fix` proposes), else the planner's."""
    package = finding.rule.fix_plan
    if package is None:
        return []
    from attn_doctor.planner.stack import plan_stack  # the release facts: read only for a fix
    from attn_doctor.releases.facts import snapshot

    proposed = [
        pin.partition("==")[2]
        for reason in finding.reasons
        if reason.holds
        for pin in reason.suggested_pins
        if rule_name(pin.partition("==")[0]) == package
    ]
    return plan_stack(env, snapshot(), [package], {package: proposed[0]} if proposed else None)


def lines(finding: Finding, env: Environment) -> list[str]:
    """``install:`` lines, unindented: each command, or why none fits and each way out."""
    found = []
    for plan in plans(finding, env):
        if plan.command:
            found.append(f"install: {plan.command}")
            continue
        found.append(f"install: no {plan.package} command fits: {plan.why}")
        for way in plan.ways_out:
            found += [f"  or {way.title}:", *(f"    {command}" for command in way.commands)]
    return found


def to_json(finding: Finding, env: Environment) -> list[dict[str, Any]]:
    return [plan_dict(plan) for plan in plans(finding, env)]


def plan_dict(plan: Plan) -> dict[str, Any]:
    """A plan in JSON (schemas/wheel.schema.json's plan; check's and explain's ``install``)."""
    return {
        "package": plan.package,
        "version": plan.version,
        "command": plan.command,
        "why": plan.why,
        "url": plan.url,
        "requirement": plan.requirement,
        "index": plan.index,
        "ways_out": [{"title": w.title, "commands": list(w.commands), "why": w.why} for w in plan.ways_out],
    }
