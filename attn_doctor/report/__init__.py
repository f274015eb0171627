"""Report formats: the human report (text.py) and one module per machine format.

Each machine format is a pure function ``CheckResult -> str`` (the module's ``to_NAME``). A module
may instead declare ``FORMAT``, a `MachineFormat` that also decides the exit code of a finished
check (most formats use the check's own, from --fail-on; `npd`, `verdict` and `prometheus` follow
their consumer's contract) and what stdout says when the check stopped before a result (an
unreadable --env-file).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from attn_doctor.check import CheckResult

# --format NAME -> its module under attn_doctor/report
_MODULES = {
    "json": "json_report",
    "markdown": "markdown",
    "sarif": "sarif",
    "junit": "junit",
    "github": "github",
    "gitlab": "gitlab",
    "npd": "npd",
    "prometheus": "prometheus",
    "verdict": "verdict",
}


def check_exit_code(result: CheckResult) -> int:
    """The check's own exit code: 0 clean, 1 failing at or above --fail-on, 2 an input problem."""
    return result.exit_code


@dataclass(frozen=True)
class MachineFormat:
    render: Callable[[CheckResult], str]
    exit_code: Callable[[CheckResult], int] = check_exit_code
    # (message, exit code) -> what stdout says when the check stopped before a result; None: nothing
    stopped: Callable[[str, int], str] | None = None


def machine_format(name: str) -> MachineFormat:
    """The format ``--format name`` (imported on demand: `check` pays only for its own)."""
    module = importlib.import_module(f"attn_doctor.report.{_MODULES[name]}")
    declared: MachineFormat | None = getattr(module, "FORMAT", None)
    return declared if declared is not None else MachineFormat(getattr(module, f"to_{name}"))


def formatter(name: str) -> Callable[[CheckResult], str]:
    """The renderer for ``--format name``."""
    return machine_format(name).render


def stopped_text(name: str, message: str, exit_code: int) -> str:
    """What ``--format name`` prints on stdout when the check stopped before a result ('' for most)."""
    if name not in _MODULES:
        return ""
    stopped = machine_format(name).stopped
    return "" if stopped is None else stopped(message, exit_code)
