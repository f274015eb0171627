"""`attn-doctor run -- CMD`: run a command untouched and diagnose it when it fails.

The command starts before anything heavy is imported (argparse, not typer; no torch, ever); the
explain machinery is only imported once it has failed. Exit status: the command's own (128 + N
when signal N killed it, as shells report it), 127 when it cannot be started, 2 for bad options.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from attn_doctor.wrap.passthrough import CommandNotFound, Finished, run

if TYPE_CHECKING:
    from attn_doctor.wrap.diagnose import Diagnosis

FORMATS = ("text", "github")
USAGE = "attn-doctor run [--report FILE] [--format text|github] [--rerun-blocking] -- COMMAND [ARG...]"


def main(argv: list[str]) -> int:
    try:
        options, command = _parse(argv)
    except SystemExit as stop:  # --help: 0; a bad option or no command: 2
        return stop.code if isinstance(stop.code, int) else 2
    try:
        finished = run(command)
    except CommandNotFound as error:
        _say(f"attn-doctor run: cannot run {error}\n")
        return 127
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING") == "1"
    if finished.returncode in (0, -signal.SIGINT, 128 + signal.SIGINT):
        return exit_status(finished.returncode)  # success, or the user's own Ctrl-C: nothing to say
    diagnosis = _report(command, finished, blocking, options)
    if diagnosis.asynchronous and options.rerun_blocking:
        sys.stderr.write("attn-doctor run: running it again with CUDA_LAUNCH_BLOCKING=1\n")
        finished = run(command, {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"})
        if finished.returncode != 0:
            _report(command, finished, True, options)
    return exit_status(finished.returncode)


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _report(command: list[str], finished: Finished, blocking: bool, options: argparse.Namespace) -> Diagnosis:
    from attn_doctor.report.width import terminal_width
    from attn_doctor.wrap import diagnose

    diagnosis = diagnose.diagnose(command, finished.returncode, finished.tail, blocking)
    out = sys.stdout if options.format == "github" else sys.stderr
    width = terminal_width(out)
    render = (
        diagnose.to_github
        if options.format == "github"
        else lambda d: diagnose.to_text(d, finished.tail, width, rerunning=options.rerun_blocking)
    )
    out.write(render(diagnosis))
    out.flush()
    if options.report is not None:
        try:
            with open(options.report, "w", encoding="utf-8") as handle:
                handle.write(diagnose.to_json(diagnosis))
        except OSError as error:
            _say(f"attn-doctor: error: --report {options.report}: {error.strerror or error}\n")
    return diagnosis


def _say(text: str, stream: Any = None) -> None:
    """``text`` on stderr (or ``stream``), fitted to its width; only imported when there is something
    to say, so a command that succeeds starts and ends without it."""
    from attn_doctor.report import width

    width.write(text, stream or sys.stderr)


class _FittedParser(argparse.ArgumentParser):
    """argparse wraps its help to the terminal but prints a given usage line and its error lines
    whole: here every message it prints is fitted too."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            _say(message, file)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our options, then the command: after ``--``, or from its first word (``run python t.py``)."""
    parser = _FittedParser(prog="attn-doctor run", usage=USAGE, description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", metavar="FILE", help="also write the diagnosis as JSON to FILE")
    parser.add_argument(
        "--format", choices=FORMATS, default="text", help="text (stderr) or github (annotations)"
    )
    parser.add_argument(
        "--rerun-blocking",
        action="store_true",
        help="on a CUDA error reported asynchronously, run the command once more with CUDA_LAUNCH_BLOCKING=1",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("no command to run")
    return options, command
