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
from attn_doctor.report.width import fit, fit_text
from attn_doctor.words import counted
from attn_doctor.wrap.tail import OutputTail

# errors CUDA reports at the next synchronising call, wherever that is, unless launches are blocking
_ASYNCHRONOUS = re.compile(
    rb"device-side assert triggered|an illegal memory access was encountered|misaligned address"
    rb"|unspecified launch failure|CUDA kernel errors might be asynchronously reported"
)
BANNER_WIDTH = 80  # where nobody says how wide the terminal is (a pipe, a file, no COLUMNS)


@dataclass
class Diagnosis:
    command: list[str]
    returncode: int
    explanation: Explanation | None
    asynchronous: bool  # a CUDA error the log cannot place
    problems: list[str]
    printed: int = 0  # bytes of output; 0: nothing to diagnose

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
            if tail.total > len(text):
                cut = f"the last {_size(len(text))} of the command's {_size(tail.total)} of output"
                explanation.source = cut
            problems = [p for p in explanation.problems if not p.startswith(str(log))]
        except InputError as error:
            problems = [str(error)]
    asynchronous = not blocking and _ASYNCHRONOUS.search(text) is not None
    return Diagnosis(command, returncode, explanation, asynchronous, problems, tail.total)


def to_text(diagnosis: Diagnosis, tail: OutputTail, width: int | None = None, rerunning: bool = False) -> str:
    """The diagnosis, each line fitted to ``width`` columns (None: a pipe, lines kept whole);
    ``rerunning``: --rerun-blocking is about to run it again, so the hint to add it goes."""
    ended = f"attn-doctor: the command {diagnosis.how_it_ended}"
    text = tail.text()
    if not text:
        if tail.total:  # an output file we could not read back
            return _fitted([f"{ended}; its {_size(tail.total)} of output could not be read back."], width)
        return _fitted([f"{ended} and printed nothing to diagnose."], width)
    if not text.strip():
        return _fitted([f"{ended} and printed nothing but whitespace."], width)
    explanation = diagnosis.explanation
    if explanation is not None and not explanation.causes and not explanation.reasoned:
        lines = ["", f"{ended}; no known cause in its output.", f"{_amount(explanation, tail)}."]
        lines.append("(`attn-doctor check` still checks the stack itself.)")
    else:
        lines = ["", *banner(f"{ended}; diagnosis of its output", width)]
        if explanation is not None:
            from attn_doctor.report.explain_report import to_text as explanation_text

            lines.append(explanation_text(explanation).rstrip("\n"))
    if diagnosis.asynchronous:
        lines += [
            "",
            *fit("CUDA reported this error asynchronously: the traceback shows where it surfaced,", width, 0),
            *fit("not necessarily the kernel that failed. Run it again with synchronous launches:", width, 0),
            *fit(f"    {diagnosis.rerun_blocking()}", width, hang=8, shell=True),
        ]
        if not rerunning:
            hint = "(or add --rerun-blocking to `attn-doctor run` to do that once, automatically)"
            lines += fit(hint, width, 0)
    lines += [f"attn-doctor: {problem}" for problem in diagnosis.problems]
    return _fitted(lines, width)


def banner(title: str, width: int | None) -> list[str]:
    """A rule as wide as the terminal (BANNER_WIDTH where that is unknown) with ``title`` in it."""
    columns = width or BANNER_WIDTH
    if len(title) + 8 <= columns:
        return [f"── {title} {'─' * (columns - len(title) - 4)}"]
    return ["─" * columns, *fit(title, columns, hang=0)]


def _fitted(lines: list[str], width: int | None) -> str:
    """Lines already fitted stay as they are (fit leaves a line that fits alone)."""
    return "".join(part + "\n" for line in lines for part in fit_text(line, width).split("\n"))


def _amount(explanation: Explanation, tail: OutputTail) -> str:
    """How much of the output was read: its lines and bytes, and of how much when it was cut."""
    read = f"{counted(explanation.lines, 'line')} ({_size(explanation.bytes_read)})"
    if tail.total > explanation.bytes_read:
        return f"Read the last {read} of the {_size(tail.total)} it printed"
    return f"Read all it printed: {read}"


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
    if not lines:  # no rule: the causes reasoned from the releases' own code
        for reasoned in diagnosis.explanation.reasoned[:3] if diagnosis.explanation else []:
            message = f"The command {diagnosis.how_it_ended}: {reasoned.title}. Fix: {reasoned.fix}"
            lines.append(f"::error title={gh_property('attn-doctor ' + reasoned.id)}::{gh_data(message)}")
    if not lines:
        nothing = f"The command {diagnosis.how_it_ended}; no known cause in its output."
        if not diagnosis.printed:
            nothing = f"The command {diagnosis.how_it_ended} and printed nothing to diagnose."
        lines.append(f"::notice title=attn-doctor::{gh_data(nothing)}")
    if diagnosis.asynchronous:
        hint = f"CUDA reported the error asynchronously; rerun with: {diagnosis.rerun_blocking()}"
        lines.append(f"::notice title=attn-doctor::{gh_data(hint)}")
    return "\n".join(lines) + "\n"


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.0f} MiB"
    if count >= 1024:
        return f"{count / 1024:.0f} KiB"
    return counted(count, "byte")
