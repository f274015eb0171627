"""Child processes that may crash, hang or flood: run one, keep the tail of its output.

Repros and probes both run their real work here, never in the doctor's own process: a
device-side assert poisons the CUDA context, an import can segfault, a library can hang.
The child prints one ``ATTN_DOCTOR_RESULT {json}`` line; everything else is evidence.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import IO, Any

RESULT_MARKER = "ATTN_DOCTOR_RESULT "
OUTPUT_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class ChildOutput:
    returncode: int | None
    stdout: str  # the last OUTPUT_TAIL_BYTES of each stream
    stderr: str
    timed_out: bool

    def result(self) -> dict[str, Any] | None:
        """The child's last result line, or None when it left no readable one."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith(RESULT_MARKER):
                try:
                    data = json.loads(line[len(RESULT_MARKER) :])
                except json.JSONDecodeError:
                    return None
                return data if isinstance(data, dict) else None
        return None


def run_child(command: list[str], env: dict[str, str], timeout_s: float) -> ChildOutput:
    """Run to completion or kill the whole process group at the timeout; never raises for the child."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
        return ChildOutput(process.returncode, tail(out), tail(err), timed_out)


def child_environment(**settings: str) -> dict[str, str]:
    """This process's environment plus what every child needs: synchronous CUDA errors, tracebacks
    on a fault, unbuffered output (a killed child's last words are evidence)."""
    return {
        **os.environ,
        "CUDA_LAUNCH_BLOCKING": "1",
        "PYTHONFAULTHANDLER": "1",
        "PYTHONUNBUFFERED": "1",
        **settings,
    }


def emit(result: dict[str, Any]) -> None:
    """The child's side: print the one line the parent reads."""
    sys.stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


def installed_versions(names: tuple[str, ...]) -> dict[str, str]:
    """From metadata, so a broken install still yields a report."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def last_line(text: str) -> str:
    """The child's last words; after a fatal signal, the innermost frame faulthandler printed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is not None:
        frame = next((line for line in lines[fatal:] if line.startswith('File "')), None)
        if frame is not None:
            return f"{lines[fatal][:120]} at {frame[:180]}"
    return lines[-1][:300] if lines else ""


def signal_name(returncode: int) -> str:
    number = -returncode
    return signal.Signals(number).name if number in signal.valid_signals() else str(number)


def tail(handle: IO[bytes]) -> str:
    """The last OUTPUT_TAIL_BYTES of a child's output file, decoded."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - OUTPUT_TAIL_BYTES))
    return handle.read().decode("utf-8", errors="replace")


def kill_group(pid: int) -> None:
    """SIGKILL to the child's whole process group, or to the child alone if it has none yet."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    kill_group(process.pid)
    process.wait()
