"""check --format npd, prometheus and verdict: the formats fleet health engines read (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO, cli, write_rule

from attn_doctor.report.npd import ascii_line, cut

HEALTHY = REPO / "tests" / "fixtures" / "healthy" / "h100-current.json"
MISMATCH = REPO / "tests" / "fixtures" / "fleet" / "h100-xformers-mismatch.json"
XFORMERS_RULE = "xformers-built-for-another-torch"


def npd(*args: str | Path) -> tuple[int, str]:
    """``check --format npd``: its exit code and its one line, held to NPD's contract."""
    result = cli("check", "--format", "npd", *args)
    assert result.stdout.endswith("\n") and result.stdout.count("\n") == 1, result.stdout
    line = result.stdout.rstrip("\n")
    assert len(line) <= 80, line
    assert line.isascii() and line.isprintable(), line
    assert line.startswith("attn-doctor: "), line
    return result.exit_code, line


def test_npd_healthy_node_is_ok():
    code, line = npd("--env-file", HEALTHY)
    assert code == 0
    assert line == "attn-doctor: ok: 0 of 96 rules failing (0 affected, 0 unknown, 1 if used)"


def test_npd_mismatch_is_a_problem_naming_the_rule():
    code, line = npd("--env-file", MISMATCH)
    assert code == 1
    assert line.startswith(f"attn-doctor: {XFORMERS_RULE} (error) xformers wheels")
    assert line.endswith("...")


def test_npd_follows_fail_on():
    code, line = npd("--env-file", MISMATCH, "--fail-on", "never")
    assert (code, line) == (0, "attn-doctor: ok: 0 of 96 rules failing (1 affected, 0 unknown, 6 if used)")


def test_npd_most_severe_first_then_how_many_more(tmp_path):
    rules = tmp_path / "rules"
    title = '"A w\u00e4rning \u2014 xformers \u2265 0.0.1 \u2192 \u2713 \u65e5\u672c"'
    write_rule(
        rules, "aaa-xformers-warning", 'packages = { xformers = "" }', severity='"warning"', title=title
    )
    code, line = npd("--env-file", MISMATCH, "--rules", rules, "--fail-on", "warning")
    assert code == 1
    # the error before "aaa"; no room left for a title worth reading
    assert line == f"attn-doctor: 2 failing: {XFORMERS_RULE} (error); +1 more"

    code, line = npd("--env-file", HEALTHY, "--rules", rules, "--fail-on", "warning")
    assert code == 0  # the rule's xformers is not installed there


def test_npd_an_id_too_long_for_the_line_is_cut(tmp_path):
    rules = tmp_path / "rules"
    long_id = "x" + "-very-long" * 10
    write_rule(rules, long_id, 'packages = { xformers = "" }')
    code, line = npd("--env-file", MISMATCH, "--rules", rules)
    assert code == 1
    assert line.startswith("attn-doctor: x-very-long") and line.endswith("...; +1 more")


def test_npd_non_ascii_rule_title_is_spelled_in_ascii(tmp_path):
    rules = tmp_path / "rules"
    title = '"na\u00efve torch \u2265 2.6 \u2014 \u65e5\u672c"'
    write_rule(rules, "a-torch-rule", 'packages = { torch = "" }', title=title)
    code, line = npd("--env-file", HEALTHY, "--rules", rules)
    assert (code, line) == (1, "attn-doctor: a-torch-rule (error) naive torch >= 2.6 - ??")
    assert ascii_line("tab\tand\nnewline \u2018q\u2019") == "tab and newline 'q'"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        ("{not json", "node-0042.json"),
        ('{"schema": "attn-doctor/environment", "schema_version": 99}', "node-0042.json"),
    ],
)
def test_npd_unreadable_env_file_is_unknown_naming_it(tmp_path, content, needle):
    env_file = tmp_path.joinpath(*["a-long-folder-name"] * 6, "node-0042.json")
    if content is not None:
        env_file.parent.mkdir(parents=True)
        env_file.write_text(content)
    code, line = npd("--env-file", env_file)
    assert code == 2  # NPD: anything but 0 and 1 is Unknown
    assert line.startswith("attn-doctor: unknown: ")
    assert needle in line and "node-0042.json" in line  # the folders give way to the file's name


def test_npd_broken_rule_file_is_unknown_naming_it(tmp_path):
    rules = tmp_path.joinpath(*["deep"] * 12, "rules")
    write_rule(rules, "broken", 'python = "nope"')
    code, line = npd("--env-file", HEALTHY, "--rules", rules)
    assert code == 2
    assert line.startswith("attn-doctor: unknown: ") and "broken.toml" in line


def test_npd_usage_error_is_unknown_on_stdout_too():
    result = cli("check", "--format", "npd", "--env-file", HEALTHY, "--fail-on", "loud")
    assert result.exit_code == 2
    assert result.stdout.startswith("attn-doctor: unknown: --fail-on: 'loud' is not one of")
    assert "--fail-on" in result.stderr  # the usual line on stderr, which NPD logs


def test_cut_prefers_a_space_and_never_exceeds():
    assert cut("short", 80) == "short"
    assert cut("one two three four", 12) == "one two..."
    assert cut("x" * 100, 10) == "x" * 7 + "..."
