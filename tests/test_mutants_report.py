"""Tests for the mutants of attn_doctor/report/ that survived mutmut (benchmarks/mutation_score.py
--part report; docs/mutation-testing.md) outside what tests/test_golden_reports.py pins: the
repro results' text and Markdown (the `repro` command runs kernels, so no golden file holds its
report) and the width of a narrow terminal. In this process (mutmut maps a test only to the
functions its own process calls)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import termios

from support import REPO

from attn_doctor.report.repro_file import load_repro_results
from attn_doctor.report.repro_report import summary, to_markdown, to_text
from attn_doctor.report.width import MIN_WIDTH, terminal_width

SAVED = REPO / "tests" / "fixtures" / "golden" / "repro.json"  # a real `repro --format json` run


def test_repro_results_as_markdown_are_a_heading_a_table_and_the_summary():
    """x_to_markdown__mutmut_10 (the final newline became "XX\\nXX"), and the rest of its text."""
    results = load_repro_results(SAVED)
    text = to_markdown(results)
    assert text.startswith(
        "## attn-doctor repro\n\n| repro | case | verdict | expected | detail | device | rerun |\n"
    )
    assert text.endswith(f"|\n\n{summary(results)}\n")
    assert text.count("\n") == 2 + 2 + len(results) + 2


def test_repro_results_as_text_name_each_case_its_device_and_versions():
    """x_to_text__mutmut_18 (the versions joined with "XX, XX"): each case says what it ran on."""
    results = load_repro_results(SAVED)
    text = to_text(results)
    first = results[0]
    versions = ", ".join(f"{name} {version}" for name, version in first.versions.items())
    assert versions == "torch 2.13.0+cpu, triton 3.9.0, numpy 2.4.6"  # as the saved run says
    assert f"\n    on {first.device} with {versions}\n" in text
    assert text.startswith(f"✓ {first.repro} / {first.case}: {first.status.value} (")
    assert text.endswith(f"{summary(results)}\n")


def test_a_terminal_narrower_than_the_minimum_is_given_the_minimum(monkeypatch):
    """x_terminal_width__mutmut_27 (``max(columns, )``: a 20-column terminal got 20): wrapping
    below MIN_WIDTH only makes text harder to read. A real pseudo-terminal, 20 columns wide."""
    monkeypatch.delenv("COLUMNS", raising=False)
    leader, follower = pty.openpty()
    try:
        for columns in (20, 120):
            fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
            with os.fdopen(os.dup(follower), "w") as stream:
                assert terminal_width(stream) == max(columns, MIN_WIDTH)
    finally:
        os.close(leader)
        os.close(follower)
