"""Helpers the test modules import: the CLI runner and rule files (fixtures live in conftest.py)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import tempfile
import termios
import textwrap
import time
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attn_doctor._compat import tomllib
from attn_doctor.cli import app

REPO = Path(__file__).resolve().parents[1]
# a project whose code generates with Gemma-2 on FlashAttention-2 (the seed stack's code)
GEMMA2_PROJECT = REPO / "tests" / "fixtures" / "projects" / "gemma2-generate"


@cache
def _package_index_reachable() -> bool:
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q", "--retries", "0"]
            + ["--timeout", "10", "-d", folder, "hatchling"],
            capture_output=True,
            timeout=120,
        )
    return done.returncode == 0


def needs_package_index() -> None:
    """Skip, saying why, where pip reaches no package index (a GPU node without a network): the
    test installs or builds from the index. Everywhere else it runs."""
    if not _package_index_reachable():
        pytest.skip("pip reaches no package index here, and this test installs from one")


def case_log(case: str, folder: Path) -> Path:
    """The error text of tests/cases/CASE (a reporter's paste or an H100 run), as a log file in
    ``folder``."""
    data = tomllib.loads((REPO / "tests" / "cases" / case).read_text(encoding="utf-8"))
    log = folder / "error.log"
    log.write_text(data["log"]["error"], encoding="utf-8")
    return log


def write_rule(folder: Path, rule_id: str, affects: str = "", **fields: str) -> Path:
    """A valid rule file; ``affects`` is the body of [affects], ``fields`` override top-level keys."""
    values = {
        "title": '"A test rule"',
        "severity": '"error"',
        "component": '"transformers"',
        "summary": '"Something breaks."',
        "references": '["https://github.com/huggingface/transformers/pull/1"]',
    }
    values.update(fields)
    top = "\n".join(f"{key} = {value}" for key, value in values.items())
    fix = '[fix]\nsummary = "Upgrade."\npins = []\n'
    text = f'id = "{rule_id}"\n{top}\n\n[affects]\n{textwrap.dedent(affects)}\n\n{fix}'
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rule_id}.toml"
    path.write_text(text)
    return path


def cli(*args: str | Path):
    """Run the real CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def under_a_terminal(
    command: list[str], env: dict[str, str], cwd: Path, interrupt_after: bytes | None = None
) -> tuple[int, str]:
    """``command`` in its own session whose controlling terminal is a pseudo-terminal (as a shell
    starts a job), with stdin, stdout and stderr on it; everything it wrote there. With
    ``interrupt_after``, the terminal's ^C is typed once that text has appeared. Ctrl-C and
    Ctrl-\\ act as a terminal's shell leaves them, whatever pytest was started with: a shell
    without job control starts a background job (``pytest > log &``) with SIGINT and SIGQUIT
    ignored, and every child would inherit that."""
    leader, follower = pty.openpty()

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        for number in (signal.SIGINT, signal.SIGQUIT):
            signal.signal(number, signal.SIG_DFL)

    process = subprocess.Popen(
        command, stdin=follower, stdout=follower, stderr=follower, env=env, cwd=cwd, preexec_fn=own_terminal
    )
    os.close(follower)
    seen, deadline = b"", time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed, the command is done
                break
            if not data:
                break
            seen += data
            if interrupt_after is not None and interrupt_after in seen:
                os.write(leader, b"\x03")
                interrupt_after = None
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=60), seen.decode("utf-8", errors="replace")


def lines_wider_than(text: str, width: int = 80) -> list[str]:
    """Lines of ``text`` wider than ``width``, except a lone unbreakable word (a URL, a path; in a
    wrapped shell command, with its `` \\`` line end)."""
    return [
        line for line in text.splitlines() if len(line) > width and len(line.removesuffix(" \\").split()) > 1
    ]
