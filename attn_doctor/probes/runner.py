"""Run probes in child processes and turn what they left behind into one observation per rule.

A probe that crashes, hangs, floods its output or prints nonsense yields ERROR observations that
say so; the other probes still run.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from attn_doctor.facts.model import THIS_MACHINE, Environment
from attn_doctor.forkserver import Launcher
from attn_doctor.isolation import ChildOutput, child_environment, last_line, signal_name
from attn_doctor.probes.catalogue import SHARED_IMPORTS, Probe
from attn_doctor.probes.observation import Observation, ProbeVerdict
from attn_doctor.progress import QUIET, Progress

DEFAULT_TIMEOUT_S = 120.0


@dataclass
class ProbeRun:
    probe: Probe
    observations: list[Observation]
    command: str
    wall_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)


CHILD_ENTRY = "attn_doctor.probes.child"  # main([MODULE])


def rerun_command(probe: Probe) -> str:
    return f"CUDA_LAUNCH_BLOCKING=1 python -m {CHILD_ENTRY} {probe.module}"


def skip_reason(probe: Probe, env: Environment) -> str | None:
    """Why ``probe`` cannot say anything about ``env``; None when it can run."""
    if env.target != THIS_MACHINE:
        return "the environment was declared, not probed: probes exercise this machine's installation"
    if probe.needs not in env.packages:
        return f"{probe.needs} is not installed"
    return None


def run_probes(
    probes: list[Probe],
    env: Environment,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    jobs: int = 0,
    progress: Progress = QUIET,
) -> list[ProbeRun]:
    """Each applicable probe in its own child, up to ``jobs`` at a time (default: one per CPU),
    forked from one process that imported what they all import (``SHARED_IMPORTS``)."""
    runnable = [probe for probe in probes if skip_reason(probe, env) is None]
    launcher = (
        Launcher(child_environment(), [*SHARED_IMPORTS, CHILD_ENTRY], timeout_s=timeout_s)
        if runnable
        else None
    )

    def one(probe: Probe) -> ProbeRun:
        reason = skip_reason(probe, env)
        if reason is not None or launcher is None:
            return ProbeRun(
                probe, _for_each_rule(probe, ProbeVerdict.SKIPPED, str(reason)), rerun_command(probe)
            )
        label = f"probe {probe.id}"
        progress.started(label)
        run = run_probe(probe, launcher, timeout_s)
        verdicts = sorted({item.verdict.value for item in run.observations})
        run.wall_s = progress.finished(label, ", ".join(verdicts))
        return run

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs or min(len(probes), os.cpu_count() or 1))) as pool:
            return list(pool.map(one, probes))
    finally:
        if launcher is not None:
            progress.note(f"probes: {launcher.note}")
            launcher.close()


def run_probe(probe: Probe, launcher: Launcher, timeout_s: float = DEFAULT_TIMEOUT_S) -> ProbeRun:
    output = launcher.run(CHILD_ENTRY, [probe.module], timeout_s)
    data = output.result() or {}
    versions = {str(k): str(v) for k, v in dict(data.get("versions") or {}).items()}
    return ProbeRun(probe, interpret(probe, output, timeout_s), rerun_command(probe), versions=versions)


def interpret(probe: Probe, output: ChildOutput, timeout_s: float) -> list[Observation]:
    """The child's result line -> one observation per rule of the probe. Public for tests."""
    if output.timed_out:
        return _for_each_rule(probe, ProbeVerdict.ERROR, f"hung: no result within {timeout_s:g} s (killed)")
    data = output.result()
    if data is None:
        if output.returncode is not None and output.returncode < 0:
            how = f"the probe was killed by {signal_name(output.returncode)}"
        else:
            how = f"the probe left no result (exit code {output.returncode})"
        detail = last_line(output.stderr) or last_line(output.stdout) or "no output"
        return _for_each_rule(probe, ProbeVerdict.ERROR, f"{how}: {detail}")
    if "skipped" in data:
        return _for_each_rule(probe, ProbeVerdict.SKIPPED, str(data["skipped"]))
    if "exception" in data:
        return _for_each_rule(probe, ProbeVerdict.ERROR, f"the probe failed: {data['exception']}")
    try:
        said = {item.rule: item for item in map(Observation.from_json, data["observations"])}
    except (KeyError, TypeError, ValueError) as exc:
        return _for_each_rule(probe, ProbeVerdict.ERROR, f"unreadable result line: {type(exc).__name__}")
    return [
        said.get(rule) or Observation(rule, ProbeVerdict.ERROR, "the probe said nothing about this rule")
        for rule in probe.rules
    ]


def _for_each_rule(probe: Probe, verdict: ProbeVerdict, evidence: str) -> list[Observation]:
    return [Observation(rule, verdict, evidence) for rule in probe.rules]
