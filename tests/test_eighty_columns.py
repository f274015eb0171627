"""Every line of text output fits an 80-column terminal (issue 23): the real CLI at COLUMNS=80.

The stacks are chosen so the reports have findings, unknowns, long titles, fix texts and URLs:
the lines that used to run to 355 columns. A lone unbreakable word (a URL, a path) is the only
line allowed past 80, on a line of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attn_doctor.cli import app
from attn_doctor.report.width import fit
from tests.support import REPO, lines_wider_than

LOGS = REPO / "tests" / "logs"


@pytest.fixture
def pins(tmp_path: Path) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("torch==2.9.1+cu130\nflash-attn==2.8.3\ntransformers==4.44.0\n")
    return path


def run80(*args: str | Path) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"}, catch_exceptions=False)
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--no-scan"],
        ["check", "--no-scan", "-v"],
        ["check", "--no-scan", "-r", "{pins}"],
        ["check", "--no-scan", "-r", "{pins}", "-v"],
        ["check", "--no-scan", "-r", "{pins}", "--gpu", "T4"],
        [
            "check",
            "--no-scan",
            "--pin",
            "transformers==4.44.0",
            "--gpu",
            "H100",
            "--feature",
            "flash_attention_2",
        ],
        ["explain", str(LOGS / "seed_a.log")],
        ["explain", str(LOGS / "seed_c.log"), "-v"],
        ["explain", str(LOGS / "stated" / "flash-attention-1832.log")],
        ["rules", "list"],
        ["rules", "show", "flex-attention-shared-memory-limit"],
        ["rules", "show", "triton-bundled-ptxas-lacks-gpu-arch"],
        ["report", "--no-scan", "-r", "{pins}", "--gpu", "H100"],
        ["probe"],
        ["--help"],
        ["rules", "--help"],
    ],
    ids=lambda args: " ".join(args).replace(str(LOGS) + "/", ""),
)
def test_no_line_is_wider_than_80(args: list[str], pins: Path):
    output = run80(*(arg.format(pins=pins) for arg in args))
    assert output.strip()
    assert lines_wider_than(output, 80) == []


def test_without_a_width_a_pipe_gets_whole_lines(pins: Path):
    """grep must see a finding on one line where nobody said how wide the screen is."""
    result = CliRunner().invoke(app, ["check", "--no-scan", "-r", str(pins)], env={"COLUMNS": ""})
    assert any(len(line) > 80 for line in result.stdout.splitlines())


def test_wrapping_keeps_words_urls_and_commands_whole():
    url = "https://github.com/Dao-AILab/flash-attention/blob/main/.github/workflows/publish.yml"
    lines = fit(f"    see: {url} and the words after it", 80)
    assert lines == ["    see:", f"        {url}", "        and the words after it"]
    prose = "    fix: " + "word " * 40
    assert all(len(line) <= 80 for line in fit(prose, 80))
    assert " ".join(" ".join(fit(prose, 80)).split()) == " ".join(prose.split())  # no word cut
    command = "CUDA_LAUNCH_BLOCKING=1 TRITON_INTERPRET=1 python -m attn_doctor.repro.child " + "x " * 20
    shell = fit(command, 60, shell=True)
    assert all(line.endswith(" \\") for line in shell[:-1]) and all(len(line) <= 60 for line in shell)


def test_an_area_line_keeps_its_columns_when_only_the_counts_wrap():
    line = "[!] flash-attn             2.8.3                 16 rules: 1 affected, 1 unknown, 3 if used"
    first, second = fit(line, 80, hang=49)
    assert first.startswith("[!] flash-attn             2.8.3                 16 rules:")
    assert second.startswith(" " * 49) and not second.startswith(" " * 50)
