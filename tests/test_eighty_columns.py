"""Every line of text output fits an 80-column terminal (issues 23 and 36): the real CLI at
COLUMNS=80, on stdout and stderr.

The stacks are chosen so the reports have findings, unknowns, long titles, fix texts and URLs:
the lines that used to run to 355 columns; the cluster reports of `merge` and `check
--distributed`, `db info` and the error lines (ours, click's usage errors, `run`'s argparse) ran
to 100-234. A lone unbreakable word (a URL, a path) is the only line allowed past 80, on a line
of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attn_doctor.cli import app
from attn_doctor.releases.facts import snapshot
from attn_doctor.report.width import fit
from tests.support import REPO, lines_wider_than
from tests.test_cluster import free_port, start_rank

LOGS = REPO / "tests" / "logs"
FIXTURES = REPO / "tests" / "fixtures"
TWO_NODES = [FIXTURES / "healthy" / "h100-current.json", FIXTURES / "fleet" / "h100-xformers-mismatch.json"]


@pytest.fixture
def pins(tmp_path: Path) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("torch==2.9.1+cu130\nflash-attn==2.8.3\ntransformers==4.44.0\n")
    return path


def run80(*args: str | Path) -> str:
    result = invoke(80, *args)
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    assert lines_wider_than(result.stderr, 80) == []
    return result.stdout


def invoke(columns: int | None, *args: str | Path):
    env = {"COLUMNS": "" if columns is None else str(columns)}
    return CliRunner().invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)


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
        ["merge", *TWO_NODES],
        ["db", "info"],
        ["--help"],
        ["rules", "--help"],
    ],
    ids=lambda args: " ".join(map(str, args)).replace(str(LOGS) + "/", "").replace(str(FIXTURES) + "/", ""),
)
def test_no_line_is_wider_than_80(args: list[str], pins: Path):
    output = run80(*(str(arg).format(pins=pins) for arg in args))
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


def test_the_cluster_report_uses_the_width_it_is_given():
    """`merge` read COLUMNS nowhere (lines of 234 columns): at 120 it fills 120, not 80; piped with
    no COLUMNS its lines stay whole, as `check`'s do."""
    wide = invoke(120, "merge", *TWO_NODES)
    assert wide.exit_code == 1
    assert lines_wider_than(wide.stdout, 120) == [] and lines_wider_than(wide.stdout, 80) != []
    assert max(map(len, invoke(None, "merge", *TWO_NODES).stdout.splitlines())) > 200


def test_db_info_wraps_the_command_that_made_the_snapshot_so_it_still_pastes():
    lines = run80("db", "info").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  made by: "))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith(" \\"))
    assert end > start  # the 100-column line was wrapped
    command = " ".join(line.removesuffix(" \\").strip() for line in lines[start : end + 1])
    assert command == f"made by: {snapshot().meta['generator']}"


def test_distributed_rank_zero_report_fits_80_columns():
    """`check --distributed` prints the cluster report on rank 0 (lines of up to 219 columns)."""
    port, args = free_port(), ["--no-scan", "--gpu", "H100", "--pin", "transformers==4.44.0"]
    ranks = [
        start_rank(rank, 2, port, [*args, "--distributed-timeout", "30"], {"COLUMNS": "80"})
        for rank in (1, 0)
    ]
    (_, other_err), (report, errors) = (rank.communicate(timeout=120) for rank in ranks)
    assert ranks[1].returncode in (0, 1), errors
    assert report.startswith("attn-doctor cluster check: 2 of 2 reported\n") and "fix: " in report
    assert lines_wider_than(report, 80) == [] and lines_wider_than(errors + other_err, 80) == []


def error_messages(stderr: str) -> list[str]:
    """The error messages on stderr, each with its continuation lines (indented by 4) joined."""
    messages: list[str] = []
    for line in stderr.splitlines():
        if line.startswith("    ") and messages:
            messages[-1] += " " + line.strip()
        else:
            messages.append(line)
    return [m for m in messages if m.startswith(("attn-doctor: error: ", "Error: ", "attn-doctor run: "))]


@pytest.fixture
def bad_inputs(tmp_path: Path) -> dict[str, Path]:
    env = tmp_path / "env.json"
    env.write_text('{"schema": ')
    node = tmp_path / "node1.json"
    node.write_text('{"schema": "attn-doctor/environment", "schema_version": 99}')
    return {"env": env, "node": node, "missing": tmp_path / "no such folder" / "requirements.txt"}


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--no-scan", "-r", "{missing}"],
        ["check", "--no-scan", "--gpu", "H1000"],
        ["check", "--no-scan", "--gpu", "sm_999"],
        ["check", "--no-scan", "--feature", "flash_atention_2"],
        ["check", "--no-scan", "--format", "sarif2"],
        ["check", "--no-scan", "--env-file", "{env}"],
        ["check", "--no-scan", "--rules", str(FIXTURES / "golden" / "broken-rule.toml")],
        ["rules", "validate", str(FIXTURES / "golden" / "broken-rule.toml")],
        ["merge", "{node}"],
        ["check", "--no-scan", "--probe-timeout", "0"],  # click's own usage errors
        ["check", "--no-scan", "--probe-timeout", "1e10"],
    ],
    ids=lambda args: " ".join(args).replace(str(FIXTURES) + "/", ""),
)
def test_error_lines_fit_80_columns(args: list[str], bad_inputs: dict[str, Path]):
    """Each error is one message on stderr, exit 2; where it is longer than 80 columns (98-146
    before), its continuation lines are indented and every line fits."""
    result = invoke(80, *(arg.format(**bad_inputs) for arg in args))
    assert result.exit_code == 2, result.stdout + result.stderr
    messages = error_messages(result.stderr)
    assert messages and max(map(len, messages)) > 80  # the input makes a message that must wrap
    assert lines_wider_than(result.stderr, 80) == []


@pytest.mark.parametrize(
    "args",
    [["--format", "annotations", "--", "true"], ["--", "/" + "/".join(["no such folder"] * 8) + "/python"]],
    ids=["bad option", "no such command"],
)
def test_run_error_lines_fit_80_columns(args: list[str]):
    """`run` is parsed by argparse: its usage line (102 columns) and its errors fit too."""
    result = invoke(80, "run", *args)
    assert result.exit_code in (2, 127), result.stderr
    messages = error_messages(result.stderr)
    assert messages and max(map(len, messages)) > 80
    assert lines_wider_than(result.stderr, 80) == []
