"""``check --format prometheus``: gauges for node_exporter's textfile collector, in the Prometheus
text exposition format 0.0.4 (``# HELP``, ``# TYPE``, ``name{label="value"} value``; label values
escape backslash, double quote and newline; no sample timestamps, which the textfile collector
refuses).

Series (docs/output.md):

- ``attn_doctor_finding{rule, severity, component, verdict}``: one per rule the check matched,
  ``1`` when the finding fails the check (what makes its exit code 1: affected, or unknown with
  --fail-on-unknown, at or above --fail-on, not ignored), else ``0``. ``verdict`` is the rule's
  verdict (``affected``, ``unknown``, ``not-affected``): a label, so that a query can select
  affected findings whatever --fail-on says; the price is that a rule whose verdict changes is a
  new series (the old one leaves the file, and Prometheus marks it stale at the next scrape), so
  count and alert per ``rule``, not per series.
- ``attn_doctor_stack_info{torch, cuda, driver, ...}``: ``1``, the stack's versions as labels
  (report/stack.py; ``""`` where unknown or not installed).
- ``attn_doctor_check_exit_code``, ``attn_doctor_check_input_problems``,
  ``attn_doctor_check_duration_seconds``, ``attn_doctor_check_timestamp_seconds`` (the Unix time it
  finished, a value: never a sample timestamp), ``attn_doctor_build_info{version}``.

The process exits 0 once the exposition is written, whatever it holds: the check's own exit code
is a gauge, and a textfile job (``check --format prometheus > f.$$ && mv f.$$ f.prom``) publishes
a failing node's metrics instead of keeping the last healthy ones. A check that stops before a
result (an unreadable --env-file) writes nothing and exits 2: the old file stays, and
``node_textfile_mtime_seconds`` shows its age.
"""

from __future__ import annotations

from attn_doctor import __version__
from attn_doctor.check import CheckResult
from attn_doctor.report import MachineFormat
from attn_doctor.report.stack import stack

_HELP = {
    "attn_doctor_finding": (
        "One series per attn-doctor rule: 1 when the finding fails the check (affected, or unknown "
        "with --fail-on-unknown, at or above --fail-on, not ignored), else 0; verdict is the rule's "
        "verdict (affected, unknown, not-affected)."
    ),
    "attn_doctor_stack_info": (
        "The attention stack attn-doctor checked: versions as labels, empty where unknown or not installed."
    ),
    "attn_doctor_check_exit_code": (
        "The exit code of attn-doctor check: 0 clean, 1 a finding fails, 2 an input problem."
    ),
    "attn_doctor_check_input_problems": (
        "Input problems the check met (a broken rule file, broken installed metadata)."
    ),
    "attn_doctor_check_duration_seconds": "How long attn-doctor check took, from its start to its result.",
    "attn_doctor_check_timestamp_seconds": "When attn-doctor check finished, in seconds since the epoch.",
    "attn_doctor_build_info": "The attn-doctor that wrote these metrics.",
}


def to_prometheus(result: CheckResult) -> str:
    failing = {finding.rule.id for finding in result.failing()}
    lines = _family("attn_doctor_finding")
    for finding in sorted(result.findings, key=lambda f: f.rule.id):
        rule = finding.rule
        labels = {
            "rule": rule.id,
            "severity": rule.severity,
            "component": rule.component,
            "verdict": finding.verdict.value,
        }
        lines.append(_sample("attn_doctor_finding", labels, 1 if rule.id in failing else 0))
    versions = {key: value or "" for key, value in stack(result.environment).items()}
    lines += [*_family("attn_doctor_stack_info"), _sample("attn_doctor_stack_info", versions, 1)]
    lines += _gauge("attn_doctor_check_exit_code", result.exit_code)
    lines += _gauge("attn_doctor_check_input_problems", len(result.problems))
    if result.duration_s is not None:
        lines += _gauge("attn_doctor_check_duration_seconds", round(result.duration_s, 6))
    if result.finished_at is not None:
        lines += _gauge("attn_doctor_check_timestamp_seconds", round(result.finished_at, 3))
    lines += [
        *_family("attn_doctor_build_info"),
        _sample("attn_doctor_build_info", {"version": __version__}, 1),
    ]
    return "\n".join(lines) + "\n"


def exit_code(result: CheckResult) -> int:
    """0: the exposition is written; the check's exit code is in ``attn_doctor_check_exit_code``."""
    return 0


def _family(name: str) -> list[str]:
    return [f"# HELP {name} {_help_text(_HELP[name])}", f"# TYPE {name} gauge"]


def _gauge(name: str, value: float) -> list[str]:
    return [*_family(name), _sample(name, {}, value)]


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    pairs = ",".join(f'{key}="{label_value(text)}"' for key, text in labels.items())
    return f"{name}{{{pairs}}} {value}" if pairs else f"{name} {value}"


def label_value(text: str) -> str:
    """A label value as the exposition format writes it: ``\\`` ``"`` and newline escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _help_text(text: str) -> str:
    """HELP text escapes only backslash and newline."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


FORMAT = MachineFormat(to_prometheus, exit_code)
