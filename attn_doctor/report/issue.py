"""`attn-doctor report`: one Markdown block to paste into a GitHub issue.

What a maintainer asks for first (versions, GPU, findings, the commands to see it again) is on
top; the long parts fold into <details> so the issue stays readable. The finished text goes
through ``redact.scrub``: whatever a section let through, no token and no home directory
reaches a public tracker.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from attn_doctor import __version__
from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Finding, Verdict
from attn_doctor.facts.assemble import EnvironmentInputs
from attn_doctor.facts.model import Environment, Gpu, describe_torch_build
from attn_doctor.redact import SECRET_NAME_WORDS, home_dirs, scrub
from attn_doctor.report.env_vars import Variables, relevant_variables
from attn_doctor.report.markdown import cell
from attn_doctor.report.repro_report import EXPECTED, summary
from attn_doctor.report.width import fit
from attn_doctor.repro.runner import CaseResult
from attn_doctor.words import counted

Lines = list[str]
_HOLDS = {True: "yes", False: "no", None: "unknown"}


@dataclass(frozen=True)
class IssueInputs:
    """How the report was asked for: the check's options (to name the command that reruns it)
    and what it includes besides the check."""

    what_if: EnvironmentInputs
    config: Path | None = None
    live_probes: bool = False
    repro_file: Path | None = None
    repro_results: list[CaseResult] = field(default_factory=list)


def render(
    result: CheckResult, inputs: IssueInputs, environ: Mapping[str, str], width: int | None = None
) -> str:
    """The report; with ``width``, prose and list lines wrap to it (Markdown joins them again)."""
    sections = [
        _headline(result),
        _findings(result),
        _environment(result.environment),
        _variables(relevant_variables(environ)),
        _probes(result) if inputs.live_probes else [],
        _repro(inputs),
        _problems(result.problems),
        _reproduce(result, inputs),
        [f"<sub>attn-doctor {__version__}: secrets and home folders removed; read before posting.</sub>"],
    ]
    text = "\n\n".join("\n".join(lines) for lines in sections if lines) + "\n"
    return _fitted(scrub(text, home_dirs(environ)), width)


def _fitted(text: str, width: int | None) -> str:
    """Soft-wrapped Markdown: a list item or paragraph may span lines; a command in a fence wraps
    with backslashes, so it still pastes."""
    out: Lines = []
    fenced = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        hang = indent + 2 if line.lstrip().startswith("- ") else indent  # under the item's text
        out += fit(line, width, hang=None if fenced else hang, shell=fenced)
    return "\n".join(out)


def _check_command(inputs: IssueInputs) -> str:
    """The `attn-doctor check` that gives the same findings."""
    what_if = inputs.what_if
    args = ["attn-doctor", "check"]
    if what_if.env_file is not None:
        args += ["--env-file", str(what_if.env_file)]
    for option, values in (
        ("--path", what_if.site_paths),
        ("-r", what_if.requirements),
        ("--pin", what_if.pins),
        ("--gpu", what_if.gpus),
        ("--feature", what_if.features or []),
        ("--model", what_if.models or []),
    ):
        for value in values:
            args += [option, str(value)]
    if inputs.config is not None:
        args += ["--config", str(inputs.config)]
    if inputs.live_probes:
        args.append("--probe")
    return shlex.join(args)


def _headline(result: CheckResult) -> Lines:
    counts = {verdict: sum(f.verdict is verdict for f in result.findings) for verdict in Verdict}
    ignored = sum(f.ignored is not None for f in result.findings)
    return [
        "## attn-doctor report",
        "",
        f"**{counts[Verdict.AFFECTED]} affected, {counts[Verdict.UNKNOWN]} unknown**, "
        f"{counts[Verdict.NOT_AFFECTED]} not affected of {counted(len(result.findings), 'rule')}"
        + (f" ({ignored} ignored by configuration)" if ignored else "")
        + f"; facts from {', '.join(result.environment.sources)}.",
    ]


def _findings(result: CheckResult) -> Lines:
    shown = [f for f in result.findings if f.verdict is not Verdict.NOT_AFFECTED]
    if not shown:
        return ["### Findings", "", "No affected or unknown findings."]
    return ["### Findings", "", *(line for finding in shown for line in _finding(finding))]


def _finding(finding: Finding) -> Lines:
    """A list item per finding: what, why each condition held, the fix and its reference."""
    rule = finding.rule
    verdict = f"ignored: {finding.ignored}" if finding.ignored else finding.verdict.value
    lines = [f"- **`{rule.id}`** ({rule.severity}, {cell(verdict)}): {cell(rule.title)}"]
    lines += [f"  - {_HOLDS[reason.holds]}: {cell(reason.text)}" for reason in finding.reasons]
    if finding.probe is not None:
        lines.append(
            f"  - probe: {finding.probe.verdict.value}: {cell(finding.probe.evidence)} "
            f"(versions alone: {finding.version_verdict.value})"
        )
    lines.append(f"  - fix: {cell(rule.fix_summary)}")
    if rule.fix_pins:
        lines.append(f"  - fixed by: {' '.join(_code(pin) for pin in rule.fix_pins)}")
    lines.append(f"  - see: {rule.references[0]}")
    return lines


def _environment(env: Environment) -> Lines:
    facts = [
        ("torch build", describe_torch_build(env.torch_build)),
        *((f"GPU {index}", _gpu(gpu)) for index, gpu in enumerate(env.gpus)),
        ("GPUs from", "no GPU found" if env.gpu_source == "none" else env.gpu_source),
        ("nvcc", env.nvcc or "not found"),
        ("Python", env.python or "unknown"),
        ("OS", env.os or env.platform or "unknown"),
        ("libc", env.libc or "unknown"),
        ("features in use", ", ".join(env.features.in_use()) or "none declared or detected"),
    ]
    listed = [f"- {name}: {cell(value)}" for name, value in facts]
    packages = [
        f"- `{name}` {cell(package.version or 'unpinned')}, from {_code(package.origin)}"
        for name, package in sorted(env.packages.items())
    ]
    return ["### Environment", "", *_folded(_environment_summary(env), [*listed, "", *packages])]


def _environment_summary(env: Environment) -> str:
    parts = [f"{name} {package.version or '(unpinned)'}" for name, package in sorted(env.packages.items())]
    parts.append(f"torch build {describe_torch_build(env.torch_build)}")
    if env.gpus:
        parts.append(_gpu(env.gpus[0]) + (f" ×{len(env.gpus)}" if len(env.gpus) > 1 else ""))
    parts += [f"Python {env.python or '?'}", env.platform or "platform ?"]
    return " · ".join(parts)


def _gpu(gpu: Gpu) -> str:
    return gpu.name_and_sm() + (f", driver {gpu.driver}" if gpu.driver else "")


def _variables(variables: Variables) -> Lines:
    title = f"Environment variables: {len(variables.shown)} listed, {variables.withheld} withheld"
    note = (
        "Only variables that steer CUDA, torch, Triton, Hugging Face and the attention libraries; "
        f"any whose name holds {', '.join(SECRET_NAME_WORDS)} is withheld, name and all."
    )
    rows = [f"- `{name}` = {_code(value)}" for name, value in variables.shown]
    return _folded(title, [note, "", *rows] if variables.shown else [note])


def _probes(result: CheckResult) -> Lines:
    rows = [
        f"- `{f.rule.id}`: {f.probe.verdict.value}: {cell(f.probe.evidence)} "
        f"(versions alone: {f.version_verdict.value})"
        for f in result.findings
        if f.probe is not None
    ]
    if not rows:
        return ["### Live probes", "", "No live probe applies to this installation."]
    return ["### Live probes", "", *rows]


def _repro(inputs: IssueInputs) -> Lines:
    if inputs.repro_file is None:
        return []
    title = f"{summary(inputs.repro_results)} (from {inputs.repro_file.name})"
    rows = [
        f"- `{r.repro}` / `{r.case}`: {r.status.value} ({EXPECTED[r.expect_bug]}): {cell(r.detail)}; "
        f"on {cell(r.device)}; rerun: {_code(r.command)}"
        for r in inputs.repro_results
    ]
    return ["### Repro results", "", *_folded(title, rows)]


def _problems(problems: list[str]) -> Lines:
    return ["### Input problems", "", *(f"- {cell(problem)}" for problem in problems)] if problems else []


def _reproduce(result: CheckResult, inputs: IssueInputs) -> Lines:
    repros = [
        f"attn-doctor repro {f.rule.id}"
        for f in result.findings
        if f.verdict is Verdict.AFFECTED and f.ignored is None and f.rule.repro
    ]
    return ["### Reproduce", "", "```bash", _check_command(inputs), *repros, "```"]


def _folded(summary_text: str, body: Lines) -> Lines:
    """A <details> block; GitHub renders Markdown inside it only between blank lines."""
    return ["<details>", f"<summary>{_html(summary_text)}</summary>", "", *body, "", "</details>"]


def _code(text: str) -> str:
    """An inline code span for a table cell, whatever backticks ``text`` holds."""
    text = cell(text)
    if not text:
        return "(empty)"
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
