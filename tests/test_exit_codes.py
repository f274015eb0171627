"""Documented exit codes: 0 clean, 1 findings at or above --fail-on, 2 usage or input error."""

from __future__ import annotations

import json

from support import cli, write_rule


def test_clean_environment_exits_0(site, no_gpu):
    result = cli("check", "--path", site.path)
    assert result.exit_code == 0, result.stdout
    assert "0 at or above --fail-on error" in result.stdout


def test_error_finding_exits_1(site):
    args = ("--pin", "transformers==4.44.0", "--feature", "flash_attention_2")
    assert cli("check", "--path", site.path, *args).exit_code == 1


def test_fail_on_levels(tmp_path, site):
    write_rule(tmp_path / "rules", "test-warning", 'packages = { transformers = "" }', severity='"warning"')
    args = ["check", "--path", site.path, "--rules", tmp_path / "rules", "--pin", "transformers==4.57.0"]
    assert cli(*args).exit_code == 0
    assert cli(*args, "--fail-on", "warning").exit_code == 1
    assert cli(*args, "--fail-on", "info").exit_code == 1
    assert (
        cli(
            *("check", "--path", site.path, "--pin", "transformers==4.44.0"),
            *("--feature", "flash_attention_2", "--fail-on", "never"),
        ).exit_code
        == 0
    )


def test_unknown_fails_only_when_asked(tmp_path, site, no_gpu):
    write_rule(tmp_path / "rules", "test-gpu", 'compute_capability = "<8.0"')
    args = ["check", "--path", site.path, "--rules", tmp_path / "rules"]
    assert cli(*args).exit_code == 0
    assert "test-gpu" in cli(*args).stdout  # shown, never silently passed
    assert cli(*args, "--fail-on-unknown").exit_code == 1


def test_project_config_ignore_and_fail_on(tmp_path, site):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[tool.attn-doctor]\ngpus = ["H100"]\nfail-on = "error"\n'
        '[tool.attn-doctor.ignore]\ngemma2-fa2-cu-seqlens = "we never pack sequences"\n'
    )
    result = cli(
        "check",
        "--path",
        site.path,
        "--config",
        pyproject,
        "--pin",
        "transformers==4.44.0",
        "--format",
        "json",
    )
    report = json.loads(result.stdout)
    finding = next(f for f in report["findings"] if f["id"] == "gemma2-fa2-cu-seqlens")
    assert finding["ignored"] == "we never pack sequences" and not finding["failing"]
    assert report["environment"]["gpus"][0]["compute_capability"] == "9.0"
    assert result.exit_code == (1 if report["summary"]["failing"] else 0)


def test_usage_error_exits_2():
    assert cli("check", "--no-such-option").exit_code == 2
