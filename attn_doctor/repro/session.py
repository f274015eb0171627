"""`attn-doctor repro` end to end: resolve what to run, choose the device, run, report."""

from __future__ import annotations

import os

from attn_doctor.engine.loader import RuleSet
from attn_doctor.errors import InputError
from attn_doctor.facts.gpus import probe_gpus
from attn_doctor.repro.catalogue import REPROS, resolve
from attn_doctor.repro.runner import CaseResult, RunOptions, Work, run_cases

DEVICES = ("auto", "cuda", "cpu")


def plan(issue: str | None, case: str | None, rules: RuleSet) -> list[Work]:
    """(repro, case, symptom patterns) to run: one repro, or all of them when ``issue`` is None."""
    if issue is None:
        chosen = [(repro, next((r.id for r in rules.rules if r.repro == repro.id), None)) for repro in REPROS]
    else:
        chosen = [resolve(issue, rules)]
    work = []
    for repro, rule_id in chosen:
        rule = rules.get(rule_id) if rule_id else None
        symptoms = rule.symptoms if rule else ()
        for item in repro.cases:
            if case is None or item.name == case:
                work.append((repro, item, symptoms))
    if not work:
        raise InputError(f"--case {case}", "no such case (see `attn-doctor repro --list`)")
    return work


def choose_device(device: str) -> str:
    if device not in DEVICES:
        raise InputError("--device", f"{device!r} is not one of {', '.join(DEVICES)}")
    if device != "auto":
        return device
    gpus, _ = probe_gpus()
    return "cuda" if gpus else "cpu"


def run_plan(
    work: list[Work], *, device: str, sanitizer: bool, timeout_s: float, jobs: int, output_format: str
) -> tuple[list[CaseResult], str]:
    from attn_doctor.report.repro_report import FORMATTERS

    options = RunOptions(
        device=choose_device(device),
        timeout_s=timeout_s,
        sanitizer=sanitizer,
        jobs=jobs or min(len(work), os.cpu_count() or 1),
    )
    results = run_cases(work, options)
    return results, FORMATTERS[output_format](results)
