"""Every kind of malformed input: a one-line error naming the input, exit 2, no traceback,
and the rest of the run still reported."""

from __future__ import annotations

import json

import pytest
from support import cli, write_rule


def assert_one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors, "no error printed"
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    for line in errors:
        assert line.startswith("attn-doctor: error: ") or line.startswith("Usage") or line.startswith(" ")
    text = "\n".join(errors)
    for needle in needles:
        assert needle in text, (needle, text)
    return text


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("id = \n", ["not valid TOML"]),
        (
            'id = "bad-severity"\ntitle="t"\nseverity="fatal"\ncomponent="torch"\nsummary="s"\n'
            'references=["https://github.com/pytorch/pytorch/issues/1"]\n[affects]\n[fix]\nsummary="f"\n',
            ["field 'severity'", "fatal"],
        ),
    ],
)
def test_malformed_rule_file_names_file_and_field(tmp_path, content, needles):
    bad = tmp_path / "rules" / "bad-severity.toml"
    bad.parent.mkdir()
    bad.write_text(content)
    assert_one_line_error(cli("rules", "validate", bad), "bad-severity.toml", *needles)


@pytest.mark.parametrize(
    ("affects", "fields", "needle"),
    [
        ('packages = { torch = ">=2.5,<<2.6" }', {}, "affects.packages.torch"),
        ('compute_capability = "sm90"', {}, "affects.compute_capability"),
        ('features = ["flash_attention_9"]', {}, "affects.features"),
        ('gpu_model = "H100"', {}, "affects.gpu_model"),
        ("", {"symptoms": '["(unclosed"]'}, "symptoms[0]"),
        ("", {"references": "[]"}, "references"),
        ("", {"references": '["http://example.com/x"]'}, "references[0]"),
        ("", {"component": '"kernel"'}, "field 'component'"),
        ("", {"severty": '"error"'}, "field 'severty'"),
        ("", {"repro": '"Not An Id"'}, "field 'repro'"),
    ],
)
def test_every_schema_violation_is_reported(tmp_path, affects, fields, needle):
    path = write_rule(tmp_path / "rules", "broken", affects, **fields)
    assert_one_line_error(cli("rules", "validate", path), "broken.toml", needle)


def test_one_bad_file_never_hides_the_others(tmp_path):
    rules = tmp_path / "rules"
    write_rule(rules, "first-bad", 'python = "garbage!"')
    write_rule(rules, "good", 'python = ">=3"')
    write_rule(rules, "second-bad", "", severity='"loud"')
    (rules / "third-bad.toml").write_text("[[[")
    text = assert_one_line_error(
        cli("rules", "validate", rules), "first-bad.toml", "second-bad.toml", "third-bad.toml"
    )
    assert "good.toml" not in text
    assert "3 problems; 1 valid rule\n" in cli("rules", "validate", rules).stdout


def test_id_must_match_file_name_and_be_unique(tmp_path):
    rules = tmp_path / "rules"
    path = write_rule(rules, "name-a")
    path.rename(rules / "name-b.toml")
    assert_one_line_error(cli("rules", "validate", rules), "name-b.toml", "does not match the file name")


def test_check_with_a_bad_extra_rule_still_reports_the_database(tmp_path):
    write_rule(tmp_path / "rules", "broken", 'python = "nope"')
    result = cli(
        *("check", "--format", "json", "--rules", tmp_path / "rules"),
        *("--pin", "transformers==4.44.0", "--feature", "flash_attention_2"),
    )
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert any(f["verdict"] == "affected" for f in report["findings"])
    assert any("broken.toml" in problem for problem in report["problems"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pin", "torch"], "--pin 'torch'"),
        (["--pin", "torch==banana"], "not a valid PEP 440 version"),
        (["--pin", "torch>=2.5"], "expected NAME==VERSION"),
        (["--gpu", "warp-drive"], "--gpu 'warp-drive'"),
        (["--fail-on", "sometimes"], "--fail-on"),
        (["--format", "yaml"], "--format"),
    ],
)
def test_bad_option_values(args, needle):
    assert_one_line_error(cli("check", *args), needle)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("transformers==4.44.0\nthis is not a requirement ===\n", "requirements.txt:2"),
        ("torch==not.a.version!\n", "requirements.txt:1"),
        ("-r requirements.txt\n", "include themselves"),
        ("-r missing.txt\n", "missing.txt"),
    ],
)
def test_bad_requirements_files(tmp_path, content, needle):
    path = tmp_path / "requirements.txt"
    path.write_text(content)
    assert_one_line_error(cli("check", "-r", path), needle)


def test_binary_and_huge_requirements(tmp_path):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\x7fELF\x00\x00\x01" * 100)
    assert_one_line_error(cli("check", "-r", binary), "binary.txt", "binary")
    huge = tmp_path / "huge.txt"
    huge.write_bytes(b"# padding\n" * (2 * 1024 * 1024))
    assert_one_line_error(cli("check", "-r", huge), "huge.txt", "larger than")


def test_missing_requirements_file(tmp_path):
    assert_one_line_error(cli("check", "-r", tmp_path / "nope.txt"), "nope.txt")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not JSON"),
        ('{"schema": "something-else"}', "not an attn-doctor environment"),
        ('{"schema": "attn-doctor/environment", "schema_version": 99}', "schema_version 99"),
        (
            '{"schema": "attn-doctor/environment", "schema_version": 1, "packages": {"torch": {}}}',
            "malformed",
        ),
        ('{"schema": "attn-doctor/environment", "schema_version": 1, "gpus": "H100"}', "malformed"),
        ("[1, 2, 3]", "not an attn-doctor environment"),
    ],
)
def test_bad_env_files(tmp_path, content, needle):
    path = tmp_path / "env.json"
    path.write_text(content)
    assert_one_line_error(cli("check", "--env-file", path), "env.json", needle)


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ("Metadata-Version: 2.1\nName: transformers\n", "no Version field"),
        ("Metadata-Version: 2.1\nName: transformers\nVersion: not-a-version!\n", "unparsable version"),
    ],
)
def test_broken_installed_metadata(site, metadata, needle):
    site.install("transformers", "4.44.0", metadata=metadata)
    result = cli("check", "--path", site.path)
    assert_one_line_error(result, "transformers-4.44.0.dist-info", needle)
    assert "rules:" in result.stdout  # the report was still printed


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ('[tool.attn-doctor]\nfail_on = "error"\n', "unknown key 'fail_on'"),
        ('[tool.attn-doctor]\nfail-on = "loud"\n', "fail-on"),
        ('[tool.attn-doctor]\nfeatures = ["warp"]\n', "unknown feature"),
        ('[tool.attn-doctor.ignore]\ngemma2-fa2-cu-seqlens = ""\n', "needs a reason"),
        ('[tool.attn-doctor.ignore]\nno-such-rule = "because"\n', "no rule 'no-such-rule'"),
        ("[tool.attn-doctor\n", "not valid TOML"),
    ],
)
def test_bad_project_config(tmp_path, section, needle):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(section)
    assert_one_line_error(cli("check", "--config", pyproject), "pyproject.toml", needle)


# Misuse: an input in the wrong place gets the line that says where it goes.

PIPE_HINT = "no such file; to explain this text, pipe it in: echo '...' | attn-doctor explain -"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("RuntimeError: CUDA error: device-side assert triggered", None),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", None),
        (
            "ImportError: /opt/venv/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64"
            "-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
            "ImportError: /opt/venv/lib/python3.12/site-packages/flash...",
        ),
    ],
)
def test_error_text_given_as_the_log_is_told_to_pipe_it(text, shown):
    result = cli("explain", text)
    assert_one_line_error(result)
    assert result.stderr == f"attn-doctor: error: {shown or text}: {PIPE_HINT}\n"


@pytest.mark.parametrize(
    "path", ["train.log", "logs/my run.log", "logs/my run/train.log", "C:\\logs\\train.log"]
)
def test_a_missing_log_path_is_only_missing(path):
    result = cli("explain", path)
    assert_one_line_error(result)
    assert result.stderr == f"attn-doctor: error: {path}: no such file\n"


@pytest.mark.parametrize("command", ["check", "fix", "report"])
def test_a_pin_without_its_option_is_told_to_use_pin(command):
    result = cli(command, "transformers==4.44.0", "--gpu", "H100")
    assert_one_line_error(result)
    assert result.stderr == (
        f"attn-doctor: error: transformers==4.44.0: {command} takes options only; "
        "did you mean --pin transformers==4.44.0?\n"
    )
    two = cli(command, "transformers==4.44.0", "flash-attn==2.6.3")
    assert two.stderr.endswith("did you mean --pin transformers==4.44.0 --pin flash-attn==2.6.3?\n")


def test_a_stray_word_that_is_no_pin_gets_the_help():
    result = cli("check", "H100")
    assert_one_line_error(result)
    assert (
        result.stderr
        == "attn-doctor: error: H100: check takes options only, no arguments (attn-doctor check --help)\n"
    )


def test_python_with_pin_alone_is_told_to_write_a_pin_file(tmp_path, monkeypatch):
    """--pin alone changes this machine, whose Python is its own: the hint's file is a target
    that --python describes, and following it works."""
    result = cli("check", "--pin", "transformers==4.44.0", "--python", "3.11", "--no-scan")
    assert_one_line_error(result)
    assert result.stderr == (
        "attn-doctor: error: --python: describes a declared target (-r, --env-file); --pin alone "
        "changes this machine, which is probed: to check the pins alone, echo transformers==4.44.0 "
        "> pins.txt and give -r pins.txt --python 3.11\n"
    )
    several = cli("fix", "--pin", "torch==2.5.1", "--pin", "flash-attn==2.6.3", "--platform", "windows")
    assert several.stderr.endswith(
        "printf '%s\\n' torch==2.5.1 flash-attn==2.6.3 > pins.txt and give -r pins.txt --platform windows\n"
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pins.txt").write_text("transformers==4.44.0\n")  # what `echo transformers==4.44.0` writes
    followed = cli("check", "-r", "pins.txt", "--python", "3.11", "--no-scan", "--format", "json")
    assert followed.exit_code in (0, 1), followed.stderr
    environment = json.loads(followed.stdout)["environment"]
    assert environment["python"] == "3.11" and environment["packages"]["transformers"]["version"] == "4.44.0"
