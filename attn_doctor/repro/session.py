"""`attn-doctor repro` end to end: resolve what to run, choose the device, run, report."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

from attn_doctor.engine.loader import RuleSet
from attn_doctor.errors import InputError
from attn_doctor.facts.gpus import probe_gpus
from attn_doctor.probes.catalogue import PROBES, Probe, probes_for_rule
from attn_doctor.probes.observation import ProbeVerdict
from attn_doctor.progress import QUIET, Progress
from attn_doctor.repro.catalogue import REPROS, resolve
from attn_doctor.repro.runner import NO_GPU, CaseResult, RunOptions, Status, Work, run_cases

DEVICES = ("auto", "cuda", "cpu")
_PROBE_STATUS = {
    ProbeVerdict.AFFECTED: Status.REPRODUCED,
    ProbeVerdict.NOT_AFFECTED: Status.NOT_REPRODUCED,
    ProbeVerdict.SKIPPED: Status.SKIPPED,
    ProbeVerdict.ERROR: Status.ERROR,
}


def plan(issue: str | None, case: str | None, rules: RuleSet) -> tuple[list[Work], list[Probe]]:
    """The kernel cases (repro, case, symptom patterns) and the live probes to run: one issue's, or
    everything when ``issue`` is None. A rule with a probe but no bundled kernel repro runs the probe."""
    if issue is None:
        chosen = [(repro, next((r.id for r in rules.rules if r.repro == repro.id), None)) for repro in REPROS]
        probes = list(PROBES)
    else:
        rule = rules.get(issue)
        if rule is not None and rule.repro is None and probes_for_rule(rule.id) and case is None:
            return [], probes_for_rule(rule.id)
        chosen = [resolve(issue, rules)]
        probes = probes_for_rule(chosen[0][1]) if chosen[0][1] and case is None else []
    work = []
    for repro, rule_id in chosen:
        rule = rules.get(rule_id) if rule_id else None
        symptoms = rule.symptoms if rule else ()
        for item in repro.cases:
            if case is None or item.name == case:
                work.append((repro, item, symptoms))
    if not work:
        raise InputError(f"--case {case}", "no such case (see `attn-doctor repro --list`)")
    return work, probes


def choose_device(device: str) -> str:
    """``cuda`` or ``cpu``. A CPU build of torch (read from its files, not imported) never gets
    ``cuda``: ``auto`` takes the CPU, and ``--device cuda`` is refused with one line."""
    if device not in DEVICES:
        raise InputError("--device", f"{device!r} is not one of {', '.join(DEVICES)}")
    if device == "cpu":
        return device
    cpu_torch = _cpu_build_of_torch()
    if device == "cuda":
        if cpu_torch is not None:
            raise InputError("--device cuda", _cpu_build_message(cpu_torch))
        return device
    if cpu_torch is not None:
        return "cpu"
    gpus, _ = probe_gpus()
    return "cuda" if gpus else "cpu"


def _cpu_build_of_torch() -> str | None:
    """The version of the torch this interpreter imports, where it is a CPU build (no CUDA, no ROCm)."""
    from attn_doctor.facts.packages import find_installed

    packages, build, _ = find_installed(sys.path)
    torch = packages.get("torch")
    if torch is None or build is None or build.cuda or build.hip:
        return None
    return torch.version


def _cpu_build_message(version: str) -> str:
    return (
        f"torch {version} is a CPU build, with no CUDA: use --device cpu (the Triton interpreter), "
        "or install a CUDA build of torch"
    )


def run_plan(
    work: list[Work],
    probes: list[Probe],
    *,
    device: str,
    sanitizer: bool,
    timeout_s: float,
    jobs: int,
    output_format: str,
    progress: Progress = QUIET,
) -> tuple[list[CaseResult], str]:
    from attn_doctor.report.repro_report import FORMATTERS, to_text
    from attn_doctor.report.width import terminal_width

    options = RunOptions(
        device=choose_device(device),
        timeout_s=timeout_s,
        sanitizer=sanitizer,
        jobs=jobs or min(max(len(work), 1), os.cpu_count() or 1),
    )
    with progress, ThreadPoolExecutor(max_workers=1) as side:  # probes import libraries while kernels run
        probed = side.submit(probe_results, probes, timeout_s, options.jobs, progress)
        kernels = run_cases(work, options, progress) if work else []
        results = kernels + probed.result()
    if kernels and all(r.detail.startswith(NO_GPU) for r in kernels):  # torch sees no GPU: say so once
        raise InputError(f"--device {device}", f"{kernels[0].detail[len(NO_GPU) :]}; use --device cpu")
    if output_format == "rich":
        return results, to_text(results, terminal_width())
    return results, FORMATTERS[output_format](results)


def probe_results(
    probes: list[Probe], timeout_s: float, jobs: int, progress: Progress = QUIET
) -> list[CaseResult]:
    """The live probes as result rows: what this installation's own code does, with no expectation."""
    if not probes:
        return []
    from attn_doctor.facts.probe import probe_environment
    from attn_doctor.probes.runner import run_probes

    env, _ = probe_environment([])
    rows = []
    for run in run_probes(probes, env, timeout_s, jobs, progress):
        installed = env.packages.get(run.probe.needs)
        target = f"installed {run.probe.needs} {installed.version}" if installed else "this installation"
        for observation in run.observations:
            rows.append(
                CaseResult(
                    repro=f"probe {run.probe.id}",
                    case=observation.rule,
                    expect_bug=None,
                    status=_PROBE_STATUS[observation.verdict],
                    detail=observation.evidence,
                    device=target,
                    versions=run.versions,
                    command=run.command,
                )
            )
    return rows
