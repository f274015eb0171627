"""What `attn-doctor run` says when the command failed: `explain` on the output's tail, with this
machine's facts, the project's features and what the log states, after the command's own output."""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_doctor.explain import Explanation
from attn_doctor.isolation import signal_name
from attn_doctor.wrap.tail import OutputTail

# errors CUDA reports at the next synchronising call, wherever that is, unless launches are blocking
_ASYNCHRONOUS = re.compile(
    rb"device-side assert triggered|an illegal memory access was encountered|misaligned address"
    rb"|unspecified launch failure|CUDA kernel errors might be asynchronously reported"
)
SEPARATOR = "─" * 24


@dataclass
class Diagnosis:
    command: list[str]
    returncode: int
    explanation: Explanation | None
    asynchronous: bool  # a CUDA error the log cannot place
    problems: list[str]

    @property
    def how_it_ended(self) -> str:
        if self.returncode < 0:
            return f"was killed by {signal_name(self.returncode)}"
        return f"exited with code {self.returncode}"

    def rerun_blocking(self) -> str:
        return f"CUDA_LAUNCH_BLOCKING=1 {shlex.join(self.command)}"

    def repros(self) -> list[str]:
        if self.explanation is None:
            return []
        return [
            f"attn-doctor repro {cause.finding.rule.id}"
            for cause in self.explanation.causes[:3]
            if cause.finding.rule.repro
        ]


def diagnose(command: list[str], returncode: int, tail: OutputTail, blocking: bool) -> Diagnosis:
    from attn_doctor.config import project_config
    from attn_doctor.errors import InputError
    from attn_doctor.explain import explain
    from attn_doctor.facts.assemble import EnvironmentInputs

    text = tail.text()
    explanation, problems = None, []
    with tempfile.TemporaryDirectory(prefix="attn-doctor-run-") as folder:
        log = Path(folder) / "output.log"
        log.write_bytes(text)
        try:
            inputs = EnvironmentInputs(log_written_here=True)
            explanation = explain(str(log), inputs, project_config(None, None), [])
            explanation.source = "the command's output"
            problems = [p for p in explanation.problems if not p.startswith(str(log))]
        except InputError as error:
            problems = [str(error)]
    asynchronous = not blocking and _ASYNCHRONOUS.search(text) is not None
    return Diagnosis(command, returncode, explanation, asynchronous, problems)


def to_text(diagnosis: Diagnosis, tail: OutputTail) -> str:
    from attn_doctor.report.explain_report import to_text as explanation_text

    kept = min(tail.total, len(tail.text()))
    lines = [
        "",
        f"{SEPARATOR} attn-doctor: the command {diagnosis.how_it_ended}; "
        f"diagnosis of its last {_size(kept)} of output {SEPARATOR}",
    ]
    if diagnosis.explanation is not None:
        lines.append(explanation_text(diagnosis.explanation).rstrip("\n"))
    if diagnosis.asynchronous:
        lines += [
            "",
            "CUDA reported this error asynchronously: the frame in the traceback is where it was noticed,",
            "not necessarily the kernel that failed. Run it again with synchronous launches:",
            f"    {diagnosis.rerun_blocking()}",
            "    (or add --rerun-blocking to `attn-doctor run` to do that once, automatically)",
        ]
    lines += [f"attn-doctor: {problem}" for problem in diagnosis.problems]
    return "\n".join(lines) + "\n"


def to_json(diagnosis: Diagnosis) -> str:
    from attn_doctor.report.explain_report import to_json as explanation_json

    document: dict[str, Any] = {
        "schema": "attn-doctor/run",
        "schema_version": 1,
        "command": diagnosis.command,
        "returncode": diagnosis.returncode,
        "ended": diagnosis.how_it_ended,
        "cuda_asynchronous": diagnosis.asynchronous,
        "rerun_blocking": diagnosis.rerun_blocking() if diagnosis.asynchronous else None,
        "repros": diagnosis.repros(),
        "problems": diagnosis.problems,
        "explanation": json.loads(explanation_json(diagnosis.explanation)) if diagnosis.explanation else None,
    }
    return json.dumps(document, indent=2) + "\n"


def to_github(diagnosis: Diagnosis) -> str:
    """Workflow commands: an error per likely cause (fits this stack, or may), a notice otherwise."""
    from attn_doctor.engine.matcher import Verdict
    from attn_doctor.report.github import gh_data, gh_property

    lines = []
    for cause in diagnosis.explanation.causes[:3] if diagnosis.explanation else []:
        rule = cause.finding.rule
        command = "notice" if cause.finding.verdict is Verdict.NOT_AFFECTED else "error"
        ended = f"The command {diagnosis.how_it_ended}"
        message = f"{ended}: {rule.title}. Fix: {rule.fix_summary} See {rule.references[0]}"
        lines.append(f"::{command} title={gh_property('attn-doctor ' + rule.id)}::{gh_data(message)}")
    if not lines:
        nothing = f"The command {diagnosis.how_it_ended}; no known cause in its output."
        lines.append(f"::notice title=attn-doctor::{gh_data(nothing)}")
    if diagnosis.asynchronous:
        hint = f"CUDA reported the error asynchronously; rerun with: {diagnosis.rerun_blocking()}"
        lines.append(f"::notice title=attn-doctor::{gh_data(hint)}")
    return "\n".join(lines) + "\n"


def _size(count: int) -> str:
    return f"{count / 1024:.0f} KiB" if count >= 1024 else f"{count} bytes"
