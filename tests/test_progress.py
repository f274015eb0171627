"""Progress while children run: a live line per running case and a line per result on a terminal
(stderr), nothing extra when stderr is not a terminal, and the same JSON either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import REPO, under_a_terminal

COMMAND = [sys.executable, "-m", "attn_doctor", "repro", "rotary-dim", "--device", "cpu"]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm", "COLUMNS": "120"}


def test_a_terminal_sees_each_result_as_it_finishes_then_the_report() -> None:
    code, seen = under_a_terminal(COMMAND, ENV, REPO)
    assert code == 0, seen
    plain = seen.replace("\r", "")
    # the live lines (no ✓ mark), written before the report's lines (with ✓)
    live = plain.index("rotary-dim / fixed: NOT REPRODUCED\n")
    report = plain.index("✓ rotary-dim / fixed: NOT REPRODUCED (clean run expected)")
    assert live < report
    assert "rotary-dim / rotary-dim-is-model-dim: REPRODUCED\n" in plain[:report]
    assert "\x1b[" in seen  # the spinner redraws its line


def test_not_a_terminal_gets_nothing_extra_and_verbose_gets_timings() -> None:
    quiet = subprocess.run(
        [*COMMAND, "--format", "json"], capture_output=True, text=True, env=ENV, timeout=300
    )
    assert quiet.returncode == 0 and quiet.stderr == ""
    verbose = subprocess.run(
        [*COMMAND, "--format", "json", "-v"], capture_output=True, text=True, env=ENV, timeout=300
    )
    assert verbose.returncode == 0
    lines = verbose.stderr.splitlines()
    assert any(
        line.startswith("rotary-dim / fixed: NOT REPRODUCED (") and line.endswith(" s)") for line in lines
    )
    assert any(
        line.startswith("repro: children forked from one process that imported torch, triton in ")
        for line in lines
    )
    assert "\x1b[" not in verbose.stderr

    def shape(output: str) -> list[tuple[list[str], str]]:  # the inputs are fresh random numbers
        return [(sorted(row), row["status"]) for row in json.loads(output)["results"]]

    assert shape(verbose.stdout) == shape(quiet.stdout)
