"""The fuzz report's reproducers (../shared/research/newcomer-and-fuzz-findings.md, part 2): each
bad input is exit 2 with one line naming it, in bounded time; output never crashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, cli, write_rule
from test_bad_input import assert_one_line_error

HUGE = "1" * 4301  # past Python's int-string limit


def run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None, timeout: float = 30):
    """The CLI in a subprocess: for what CliRunner cannot show (encodings, pipes, hangs)."""
    return subprocess.run(
        [sys.executable, "-m", "attn_doctor", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


# ---------------------------------------------------------------- no hangs (H1-H5)


def test_a_long_whitespace_run_in_requirements_is_linear(tmp_path: Path) -> None:
    requirements = tmp_path / "r.txt"
    requirements.write_text("torch" + " " * 1_000_000 + "x\n")
    start = time.perf_counter()
    assert_one_line_error(cli("check", "-r", requirements), "r.txt:1", "not a requirement")
    assert time.perf_counter() - start < 5


def test_a_hostile_torch_version_py_is_linear(tmp_path: Path) -> None:
    site = tmp_path / "sp"
    (site / "torch-2.5.1.dist-info").mkdir(parents=True)
    (site / "torch-2.5.1.dist-info" / "METADATA").write_text("Name: torch\nVersion: 2.5.1\n")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text("cuda:\n" * 100_000)
    start = time.perf_counter()
    result = cli("check", "--path", site, "--format", "json")
    assert time.perf_counter() - start < 5
    assert json.loads(result.stdout)["environment"]["packages"]["torch"]["version"] == "2.5.1"


@pytest.mark.parametrize(
    "args, named",
    [
        (["check", "-r", "{fifo}"], "-r {fifo}: is a FIFO"),
        (["check", "--env-file", "{fifo}"], "--env-file {fifo}: is a FIFO"),
        (["check", "--config", "{fifo}"], "--config {fifo}: is a FIFO"),
        (["explain", "{fifo}"], "{fifo}: is a FIFO"),
        (["merge", "{fifo}"], "{fifo}: is a FIFO"),
        (["report", "--repro-json", "{fifo}"], "--repro-json {fifo}: is a FIFO"),
        (["explain", "/dev/zero"], "/dev/zero: is a character device"),
    ],
)
def test_fifos_and_devices_are_refused_not_read(tmp_path: Path, args: list[str], named: str) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    result = run(*[a.replace("{fifo}", str(fifo)) for a in args], timeout=20)
    assert result.returncode == 2
    assert named.replace("{fifo}", str(fifo)) in result.stderr.decode()


def test_a_fifo_among_rule_files_or_site_packages_is_one_problem(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    write_rule(rules, "good-rule", 'packages = { torch = ">=1.0" }')
    os.mkfifo(rules / "a-fifo.toml")
    result = run("check", "--rules", str(rules), "--pin", "torch==2.5.1", "--format", "json", timeout=20)
    assert result.returncode == 2 and "a-fifo.toml: is a FIFO" in result.stderr.decode()
    assert any(f["id"] == "good-rule" for f in json.loads(result.stdout)["findings"])
    site = tmp_path / "sp"
    (site / "torch-2.5.1.dist-info").mkdir(parents=True)
    os.mkfifo(site / "torch-2.5.1.dist-info" / "METADATA")
    result = run("check", "--path", str(site), timeout=20)
    assert result.returncode == 2 and "METADATA: is a FIFO" in result.stderr.decode()


def test_a_symptom_that_backtracks_is_refused_and_re2_runs_the_rest(tmp_path: Path) -> None:
    slow = write_rule(tmp_path / "slow", "slow-rule", symptoms="['abcd[^x]*[^x]?[^x]?[^x]?[^x]?Q']")
    assert_one_line_error(cli("rules", "validate", slow), "symptoms[0]", "may backtrack too much")
    # at the budget's edge, with RE2 100 hostile lines take milliseconds (Python's re: seconds)
    edge = write_rule(tmp_path / "edge", "edge-rule", symptoms="['abcd[^x]*[^x]?[^x]?Q']")
    log = tmp_path / "slow.log"
    log.write_text("".join("abcd" * 1000 + f"xQ{i}\n" for i in range(100)))
    start = time.perf_counter()
    result = cli("explain", log, "--rules", edge)
    assert result.exit_code == 1 and time.perf_counter() - start < 5


# ---------------------------------------------------------------- no internal errors (I1-I7)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["check", "--pin", f"torch=={HUGE}"], "--pin"),
        (["check", "--gpu", HUGE], "--gpu"),
        (["check", "--feature", HUGE], "--feature"),
    ],
)
def test_numbers_past_the_int_string_limit_in_options(args: list[str], needle: str) -> None:
    text = assert_one_line_error(cli(*args), needle)
    assert len(text) < 700  # the 4,301 digits are not echoed whole


@pytest.mark.parametrize(
    "content",
    [
        "[" * 1000,
        '{"schema": "attn-doctor/environment", "schema_version": ' + HUGE + "}",
        json.dumps({"schema": "attn-doctor/environment", "schema_version": True}),
    ],
)
def test_hostile_env_files(tmp_path: Path, content: str) -> None:
    env = tmp_path / "env.json"
    env.write_text(content)
    assert_one_line_error(cli("check", "--env-file", env), "env.json")
    assert_one_line_error(cli("merge", env), "env.json")


def test_a_version_past_the_limit_in_requirements_and_metadata(tmp_path: Path) -> None:
    requirements = tmp_path / "r.txt"
    requirements.write_text(f"torch=={HUGE}\n")
    assert_one_line_error(cli("check", "-r", requirements), "r.txt:1", "not a valid PEP 440 version")
    site = tmp_path / "sp"
    (site / "torch-1.dist-info").mkdir(parents=True)
    (site / "torch-1.dist-info" / "METADATA").write_text(f"Name: torch\nVersion: {HUGE}\n")
    assert_one_line_error(cli("check", "--path", site), "unparsable version")


@pytest.mark.parametrize(
    "rule_text, field",
    [
        ('id = "x"\na = ' + "[" * 500 + "]" * 500 + "\n", "nested too deeply"),
        (None, "symptoms[0]"),  # a symptom nested 500 deep
        ('id = "x"\nn = ' + HUGE + "\n", "not TOML this tool reads"),
    ],
)
def test_one_hostile_rule_file_never_hides_the_others(
    tmp_path: Path, rule_text: str | None, field: str
) -> None:
    rules = tmp_path / "rules"
    write_rule(rules, "good-rule", 'packages = { torch = ">=1.0" }')
    if rule_text is None:
        write_rule(rules, "x", symptoms=repr(["abcd" + "(" * 500 + ")" * 500]))
    else:
        (rules / "x.toml").write_text(rule_text)
    result = cli("check", "--rules", rules, "--pin", "torch==2.5.1", "--format", "json")
    assert_one_line_error(result, "x.toml", field)
    assert any(f["id"] == "good-rule" for f in json.loads(result.stdout)["findings"])


@pytest.mark.parametrize(
    "symptom, needle",
    [("abcd{99999999999}", "repetition number"), ("abcd" + "x" * 2000, "longer than 1000")],
)
def test_symptoms_beyond_what_a_symptom_needs(tmp_path: Path, symptom: str, needle: str) -> None:
    rule = write_rule(tmp_path / "r", "rep-rule", symptoms=repr([symptom]))
    assert_one_line_error(cli("rules", "validate", rule), "symptoms[0]", needle)


def test_arbitrary_equality_in_a_rule_is_refused(tmp_path: Path) -> None:
    rule = write_rule(tmp_path / "r", "eq-rule", 'packages = { torch = "===foo" }')
    assert_one_line_error(cli("rules", "validate", rule), "affects.packages", "===")


@pytest.mark.parametrize("marker", ['python_version ~= "abc"', 'implementation_name ~= "1.0"'])
def test_markers_that_cannot_be_compared(tmp_path: Path, marker: str) -> None:
    requirements = tmp_path / "r.txt"
    requirements.write_text(f"torch==2.5.1; {marker}\n")
    assert_one_line_error(cli("check", "-r", requirements), "r.txt:1", "marker")


@pytest.mark.parametrize(
    "tool", ["tool = 1\n", "tool = []\n", "[[tool]]\n", "x = " + "[" * 600 + "]" * 600 + "\n"]
)
def test_a_hostile_pyproject(tmp_path: Path, tool: str) -> None:
    (tmp_path / "pyproject.toml").write_text(tool)
    assert_one_line_error(cli("check", "--config", tmp_path / "pyproject.toml"), "pyproject.toml")


# ---------------------------------------------------------------- output never crashes (I7-I9)


@pytest.mark.parametrize("command", ["rules list", "check --format json"])
def test_a_closed_pipe_ends_quietly_with_sigpipes_status(command: str) -> None:
    """The reader (`true`) is gone before the doctor writes its first byte, so every write meets the
    closed pipe (`| head -1` can finish reading after a small report is already in the pipe's buffer):
    a write during the command (rules list echoes line by line) and the flush at exit (check)."""
    shell = f"{sys.executable} -m attn_doctor {command} | true; echo ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.strip() == "141" and done.stderr == ""


@pytest.mark.parametrize("encoding", ["cp1252", "ascii", "latin-1"])
def test_a_console_without_the_marks_gets_ascii_ones(encoding: str) -> None:
    result = run("explain", "tests/logs/seed_a.log", env={"PYTHONIOENCODING": encoding})
    assert result.returncode in (0, 1), result.stderr
    assert b"..." in result.stdout and b"internal error" not in result.stderr
    checked = run("check", "--pin", "torch==2.5.1", env={"PYTHONIOENCODING": encoding})
    assert checked.returncode in (0, 1) and b"[+]" in checked.stdout


def test_a_lone_surrogate_in_an_env_file_is_escaped(tmp_path: Path) -> None:
    probed = json.loads(run("probe", "--json").stdout)
    probed["os"] = "\ud800 hostile"
    env = tmp_path / "sur.json"
    env.write_text(json.dumps(probed))
    for command in (["check", "-v"], ["report"]):
        result = run(*command, "--env-file", str(env))
        assert result.returncode in (0, 1), result.stderr
        assert b"\\ud800 hostile" in result.stdout


# ---------------------------------------------------------------- typos are refused (A1-A5, U1-U5)


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_timeouts_must_be_positive_and_finite(value: str) -> None:
    result = cli("repro", "--timeout", value, "--list")
    assert result.exit_code == 2 and "--timeout" in result.output


def test_requirements_lines_the_reader_does_not_understand_are_reported(tmp_path: Path) -> None:
    requirements = tmp_path / "r.txt"
    requirements.write_text("torch==2.5.1\n--made-up-option x\n-r   with space.txt\n")
    (tmp_path / "with space.txt").write_text("transformers==4.44.0\n")
    result = cli("check", "-r", requirements, "--format", "json")
    assert_one_line_error(result, "r.txt:2", "--made-up-option")
    assert json.loads(result.stdout)["environment"]["packages"]["transformers"]["version"] == "4.44.0"


def test_urls_and_missing_includes_name_the_line(tmp_path: Path) -> None:
    requirements = tmp_path / "r.txt"
    requirements.write_text("-r https://example.com/req.txt\n")
    assert_one_line_error(cli("check", "-r", requirements), "r.txt:1", "download the file first")
    requirements.write_text("torch==2.5.1\n-c missing.txt\n")
    assert_one_line_error(cli("check", "-r", requirements), "r.txt:2 (missing.txt): no such file")


def test_empty_paths_name_their_option() -> None:
    assert_one_line_error(cli("check", "-r", ""), "-r .")
    assert_one_line_error(cli("check", "--env-file", ""), "--env-file .")
    assert_one_line_error(cli("check", "--config", ""), "--config .")


def test_an_env_file_never_coerces_types(tmp_path: Path) -> None:
    probed = json.loads(run("probe", "--json").stdout)
    probed["nvcc"] = True
    env = tmp_path / "env.json"
    env.write_text(json.dumps(probed))
    assert_one_line_error(cli("check", "--env-file", env), "env.json", "expected a string or null")


def test_a_pin_cannot_hide_a_line_break() -> None:
    assert_one_line_error(cli("check", "--pin", "torch\n==2.5.1"), "--pin")


def test_a_pyproject_gpu_typo_names_the_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.attn-doctor]\ngpus = ["bogus"]\n')
    assert_one_line_error(cli("check", "--config", tmp_path / "pyproject.toml"), "pyproject.toml", "bogus")
