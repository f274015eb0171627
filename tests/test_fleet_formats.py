"""check --format npd, prometheus and verdict: the formats fleet health engines read (issue 29)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from support import REPO, cli, write_rule

from attn_doctor import __version__
from attn_doctor.engine.loader import load_rules
from attn_doctor.report.npd import ascii_line, cut

HEALTHY = REPO / "tests" / "fixtures" / "healthy" / "h100-current.json"
MISMATCH = REPO / "tests" / "fixtures" / "fleet" / "h100-xformers-mismatch.json"
XFORMERS_RULE = "xformers-built-for-another-torch"
CHECKED = len(load_rules().stack_rules)  # the rules `check` decides


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
    # 2 if used: an FA2 rule, and flash-attn not installed, which code that requires it would need
    assert line == f"attn-doctor: ok: 0 of {CHECKED} rules failing (0 affected, 0 unknown, 2 if used)"


def test_npd_mismatch_is_a_problem_naming_the_rule():
    code, line = npd("--env-file", MISMATCH)
    assert code == 1
    assert line.startswith(f"attn-doctor: {XFORMERS_RULE} (error) xformers wheels")
    assert line.endswith("...")


def test_npd_follows_fail_on():
    code, line = npd("--env-file", MISMATCH, "--fail-on", "never")
    assert (code, line) == (
        0,
        f"attn-doctor: ok: 0 of {CHECKED} rules failing (1 affected, 0 unknown, 7 if used)",
    )


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


# --- prometheus ---------------------------------------------------------------------------------


def prometheus(*args: str | Path) -> tuple[int, dict[str, list[Sample]]]:
    """``check --format prometheus`` parsed by prometheus_client: its exit code and the samples
    of each family, held to what the textfile collector accepts (HELP and TYPE, no timestamps)."""
    result = cli("check", "--format", "prometheus", *args)
    families = list(text_string_to_metric_families(result.stdout))
    assert len({family.name for family in families}) == len(families)
    for family in families:
        assert family.type == "gauge" and family.documentation, family.name
        assert f"# HELP {family.name} " in result.stdout and f"# TYPE {family.name} gauge" in result.stdout
        assert all(sample.timestamp is None for sample in family.samples), family.name
    return result.exit_code, {family.name: family.samples for family in families}


FINDING_LABELS = {"rule", "severity", "component", "verdict"}


def test_prometheus_healthy_h100():
    before = time.time()
    code, samples = prometheus("--env-file", HEALTHY)
    assert code == 0
    findings = samples["attn_doctor_finding"]
    assert len(findings) == CHECKED and len({s.labels["rule"] for s in findings}) == CHECKED
    assert all(set(s.labels) == FINDING_LABELS and s.value == 0 for s in findings)
    assert {s.labels["verdict"] for s in findings} == {"not-affected", "unknown"}  # 2 "if used"
    (info,) = samples["attn_doctor_stack_info"]
    assert info.value == 1
    assert info.labels == {
        "torch": "2.15.0",
        "cuda": "13.2",
        "hip": "",
        "driver": "580.159.04",
        "triton": "3.9.0",
        "transformers": "5.23.0",
        "flash_attn": "",
        "flash_attn_3": "",
        "xformers": "",
        "fla": "",
        "gpu": "NVIDIA H100 80GB HBM3",
        "gpus": "1",
        "arch": "sm_90",
        "python": "3.12.3",
    }
    assert [s.value for s in samples["attn_doctor_check_exit_code"]] == [0]
    assert [s.value for s in samples["attn_doctor_check_input_problems"]] == [0]
    (duration,) = samples["attn_doctor_check_duration_seconds"]
    assert 0 < duration.value < time.time() - before + 0.01
    (stamp,) = samples["attn_doctor_check_timestamp_seconds"]
    assert before <= stamp.value <= time.time() + 0.01
    assert [s.labels for s in samples["attn_doctor_build_info"]] == [{"version": __version__}]


def test_prometheus_xformers_torch_mismatch():
    code, samples = prometheus("--env-file", MISMATCH)
    assert code == 0  # the exposition is written: the check's 1 is a gauge
    assert [s.value for s in samples["attn_doctor_check_exit_code"]] == [1]
    failing = [s.labels for s in samples["attn_doctor_finding"] if s.value == 1]
    assert failing == [
        {"rule": XFORMERS_RULE, "severity": "error", "component": "xformers", "verdict": "affected"}
    ]
    (info,) = samples["attn_doctor_stack_info"]
    assert (info.labels["torch"], info.labels["xformers"], info.labels["cuda"]) == (
        "2.6.0",
        "0.0.28.post3",
        "12.4",
    )


def test_prometheus_value_follows_fail_on_and_the_verdict_label_does_not():
    code, samples = prometheus("--env-file", MISMATCH, "--fail-on", "never")
    (finding,) = [s for s in samples["attn_doctor_finding"] if s.labels["rule"] == XFORMERS_RULE]
    assert (finding.labels["verdict"], finding.value) == ("affected", 0)
    assert [s.value for s in samples["attn_doctor_check_exit_code"]] == [0]


def test_prometheus_label_values_are_escaped(tmp_path):
    env = json.loads(HEALTHY.read_text())
    env["gpus"][0]["name"] = 'Odd "GPU" \\ name\nline two'
    (tmp_path / "odd.json").write_text(json.dumps(env))
    code, samples = prometheus("--env-file", tmp_path / "odd.json")
    (info,) = samples["attn_doctor_stack_info"]
    assert info.labels["gpu"] == 'Odd "GPU" \\ name\nline two'


def test_prometheus_input_problem_is_a_gauge(tmp_path):
    write_rule(tmp_path / "rules", "broken", 'python = "nope"')
    code, samples = prometheus("--env-file", HEALTHY, "--rules", tmp_path / "rules")
    assert code == 0
    assert [s.value for s in samples["attn_doctor_check_exit_code"]] == [2]
    assert [s.value for s in samples["attn_doctor_check_input_problems"]] == [1]


def test_prometheus_writes_nothing_when_the_check_cannot_run(tmp_path):
    result = cli("check", "--format", "prometheus", "--env-file", tmp_path / "missing.json")
    assert (result.exit_code, result.stdout) == (2, "")  # the last good file stays
    assert "missing.json" in result.stderr


def test_other_formats_leave_the_timing_out():
    document = json.loads(cli("check", "--format", "json", "--env-file", HEALTHY).stdout)
    assert "duration" not in json.dumps(document) and "finished" not in json.dumps(document)


# --- verdict ------------------------------------------------------------------------------------

VERDICT_SCHEMA = json.loads((REPO / "attn_doctor" / "schemas" / "verdict.schema.json").read_text())


def verdict(*args: str | Path) -> tuple[int, dict[str, Any]]:
    """``check --format verdict``: its exit code and its document, valid against the schema."""
    result = cli("check", "--format", "verdict", *args)
    document = json.loads(result.stdout)
    jsonschema.Draft202012Validator(VERDICT_SCHEMA).validate(document)
    assert document["exit_code"] == result.exit_code
    return result.exit_code, document


def test_verdict_healthy_h100_passes():
    code, document = verdict("--env-file", HEALTHY)
    assert (code, document["overall_severity"], document["findings"]) == (0, "pass", [])
    assert document["summary"] == "pass: nothing affected or unknown"
    assert document["stack"]["arch"] == "sm_90" and document["stack"]["gpus"] == 1
    assert document["stack"]["xformers"] is None
    assert document["conditional"] == [
        {"id": "usage-flash-attn-not-installed", "features": ["flash_attn_required"]},
        {"id": "transformers-fa2-4d-attention-mask", "features": ["flash_attention_2", "attention_mask_4d"]},
    ]
    assert document["rules_checked"] == CHECKED


def test_verdict_xformers_torch_mismatch_is_critical_with_the_action():
    code, document = verdict("--env-file", MISMATCH)
    assert (code, document["overall_severity"]) == (1, "critical")
    assert document["summary"] == f"critical: 1 critical; first: {XFORMERS_RULE}"
    (finding,) = document["findings"]
    assert (finding["id"], finding["level"], finding["failing"]) == (XFORMERS_RULE, "critical", True)
    action = finding["action"]
    assert action["summary"].startswith("Install the xformers release built for your torch")
    assert action["suggestion"] == (
        "torch==2.5.1 (what xformers 0.0.28.post3 requires)"
        " or xformers==0.0.29.post2 (its release for torch 2.6.0)"
    )
    assert action["pins"] == ["torch==2.5.1", "xformers==0.0.29.post2"]
    assert document["affected_components"] == [
        {"component": "xformers", "max_severity": "critical", "check_ids": [XFORMERS_RULE]}
    ]


def test_verdict_ignores_fail_on():
    assert verdict("--env-file", MISMATCH, "--fail-on", "never")[0] == 1


def test_verdict_names_the_install_command_the_report_has(tmp_path):
    (tmp_path / "r.txt").write_text("torch==2.3.0+cu121\nflash-attn==2.5.7\n")
    target = ("-r", tmp_path / "r.txt", "--python", "3.12", "--gpu", "H100", "--no-scan")
    code, document = verdict(*target)
    (finding,) = [
        f for f in document["findings"] if f["id"] == "flash-attn-2-5-7-wheel-torch-2-3-undefined-symbol"
    ]
    (command,) = finding["action"]["commands"]
    assert command.startswith("pip install 'https://github.com/Dao-AILab/flash-attention/releases/download/")
    report = json.loads(cli("check", *target, "--format", "json").stdout)
    (same,) = [f for f in report["findings"] if f["id"] == finding["id"]]
    assert [plan["command"] for plan in same["fix"]["install"]] == [command]


def _edited(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    env = json.loads(HEALTHY.read_text())
    edit(env)
    path = tmp_path / "node.json"
    path.write_text(json.dumps(env))
    return path


def test_verdict_unknown_when_a_fact_of_the_node_is_missing(tmp_path):
    """A node whose driver cannot be read: the driver rules of severity error can be neither
    confirmed nor ruled out, and the node is out of rotation (exit 1) until it answers."""
    code, document = verdict("--env-file", _edited(tmp_path, lambda env: env["gpus"][0].update(driver=None)))
    assert (code, document["overall_severity"]) == (1, "unknown")
    assert {f["id"]: (f["level"], f["missing"]) for f in document["findings"]} == {
        "cuda-driver-too-old-for-torch": ("unknown", ["driver"]),
        "triton-bundled-ptxas-needs-cuda12-driver": ("unknown", ["driver"]),
    }


def test_verdict_release_data_missing_is_only_information(tmp_path):
    """A torch newer than attn-doctor's snapshot leaves rules unknown: a stale attn-doctor must not
    drain the fleet."""
    newer = _edited(tmp_path, lambda env: env["packages"]["torch"].update(version="2.99.0"))
    code, document = verdict("--env-file", newer)
    assert (code, document["overall_severity"]) == (0, "info")
    assert document["findings"] and all(f["missing"] == ["release_data"] for f in document["findings"])


def test_verdict_levels_of_affected_warnings_and_infos(tmp_path):
    rules = tmp_path / "rules"
    write_rule(rules, "test-warning", 'packages = { torch = "" }', severity='"warning"')
    write_rule(rules, "test-info", 'packages = { torch = "" }', severity='"info"')
    code, document = verdict("--env-file", HEALTHY, "--rules", rules)
    assert (code, document["overall_severity"]) == (0, "warning")
    assert [(f["id"], f["level"], f["failing"]) for f in document["findings"]] == [
        ("test-warning", "warning", False),
        ("test-info", "info", False),
    ]
    assert document["summary"] == "warning: 1 warning, 1 info; first: test-warning"


def test_verdict_broken_rule_file_is_the_tools_failure(tmp_path):
    write_rule(tmp_path / "rules", "broken", 'python = "nope"')
    code, document = verdict("--env-file", HEALTHY, "--rules", tmp_path / "rules")
    assert (code, document["overall_severity"]) == (2, "unknown")
    assert "broken.toml" in document["problems"][0] and document["summary"].startswith(
        "unknown: input problem: "
    )
    code, document = verdict("--env-file", MISMATCH, "--rules", tmp_path / "rules")
    assert (code, document["overall_severity"]) == (2, "critical")  # what is known broken stays so


@pytest.mark.parametrize("content", [None, "{not json"])
def test_verdict_unreadable_env_file_is_a_document_with_exit_2(tmp_path, content):
    env_file = tmp_path / "node.json"
    if content is not None:
        env_file.write_text(content)
    code, document = verdict("--env-file", env_file)
    assert (code, document["overall_severity"], document["stack"], document["findings"]) == (
        2,
        "unknown",
        None,
        [],
    )
    assert "node.json" in document["problems"][0] and document["summary"].startswith("unknown: stopped: ")


# --- docs/output.md shows what the CLI prints -----------------------------------------------------

DOCS = (REPO / "docs" / "output.md").read_text()
_MOVING = re.compile(r"^(attn_doctor_check_(?:duration|timestamp)_seconds) \S+$", re.M)


def _examples(heading: str) -> list[tuple[list[str], str]]:
    """The ``$ attn-doctor check ...`` examples of a docs section: the arguments and what follows."""
    section = DOCS.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    examples = []
    for block in re.findall(r"```text\n(.*?)```", section, re.S):
        for command, output in re.findall(
            r"^\$ attn-doctor (check [^\n|;]*)[^\n]*\n(.*?)(?=^\$ |\Z)", block, re.M | re.S
        ):
            examples.append((command.split(), output))
    return examples


def test_docs_npd_examples_are_real(monkeypatch):
    monkeypatch.chdir(REPO)
    examples = [(args, out) for args, out in _examples("Node Problem Detector (`check --format npd`)")]
    fixtures = [(args, out) for args, out in examples if Path(args[2]).exists() and "--rules" not in args]
    assert len(fixtures) == 2
    for args, output in fixtures:
        result = cli(*args)
        assert f"{result.stdout}exit {result.exit_code}\n" == output


def test_docs_prometheus_examples_are_real(monkeypatch):
    monkeypatch.chdir(REPO)
    examples = _examples("Prometheus textfile (`check --format prometheus`)")
    assert len(examples) == 2
    for args, output in examples:
        shown = [line for line in cli(*args).stdout.splitlines() if 'verdict="not-affected"' not in line]
        assert _MOVING.sub(r"\1 X", "\n".join(shown) + "\n") == _MOVING.sub(r"\1 X", output)


def test_docs_verdict_examples_are_real_and_every_field_is_documented(monkeypatch):
    monkeypatch.chdir(REPO)
    examples = _examples("Node verdict (`check --format verdict`)")
    assert len(examples) == 2
    for args, output in examples:
        assert json.loads(output) == json.loads(cli(*args).stdout)
    section = DOCS.split("\n## Node verdict (`check --format verdict`)\n", 1)[1].split("\n## ", 1)[0]
    fields = {*VERDICT_SCHEMA["properties"], *VERDICT_SCHEMA["properties"]["stack"]["oneOf"][1]["properties"]}
    fields |= set(VERDICT_SCHEMA["properties"]["findings"]["items"]["properties"])
    fields |= set(VERDICT_SCHEMA["properties"]["findings"]["items"]["properties"]["action"]["properties"])
    documented = set(re.findall(r"`(?:[\w\[\]]+\.)?(\w+)(?:\[\])?`", section))
    assert fields - documented <= {"schema", "schema_version", "tool"}
