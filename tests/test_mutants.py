"""The tests the mutation run found missing (docs: shared research, mutation-test.md): each catches
one hand-made mutant that survived the suite at ab43431 (M03 ... M19), adapted to today's code.

Each docstring names its mutant and the bug it catches. The real CLI and real rule files where the
rest of the suite uses them; a fake nvidia-smi only where a GPU cannot exist here."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest
from support import REPO, cli, write_rule

from attn_doctor.engine.patterns import UnsafePattern, analyse
from attn_doctor.facts import gpus
from attn_doctor.redact import REDACTED, scrub


def check_json(*args: str | Path, exit_codes: tuple[int, ...] = (0, 1)) -> dict:
    result = cli("check", "--format", "json", *args)
    assert result.exit_code in exit_codes, (result.exit_code, result.stderr)
    return json.loads(result.stdout)


def findings(report: dict) -> dict[str, dict]:
    return {finding["id"]: finding for finding in report["findings"]}


# ---------------------------------------------------------------- M03: engine/matcher.py


@pytest.mark.parametrize("given_as", ["nvidia-smi", "--env-file"])
def test_m03_gpu_of_unknown_capability_leaves_a_capability_rule_unknown(
    tmp_path, site, fake_nvidia_smi, given_as
):
    """M03: a GPU whose compute capability is not known (a name no table holds, from a driver that
    does not report compute_cap, or an env file with ``compute_capability: null``) must leave a
    compute_capability rule unknown. The mutant dropped "a GPU's capability is unknown -> None"
    from the matcher and said not-affected: a pre-Ampere GPU passed as if it were checked."""
    write_rule(tmp_path / "rules", "test-pre-ampere", 'compute_capability = "<8.0"')
    fake_nvidia_smi("NVIDIA Mystery Accelerator X1, 550.54.15", knows_compute_cap=False)
    probed = json.loads(cli("probe", "--json", "--path", site.path).stdout)
    assert [gpu["compute_capability"] for gpu in probed["gpus"]] == [None]  # the premise
    if given_as == "--env-file":
        env_file = tmp_path / "node.json"
        env_file.write_text(json.dumps(probed))
        target: tuple[str | Path, ...] = ("--env-file", env_file)
    else:
        target = ("--path", site.path)
    finding = findings(check_json(*target, "--rules", tmp_path / "rules"))["test-pre-ampere"]
    assert finding["verdict"] == "unknown", finding["reasons"]
    [reason] = finding["reasons"]
    assert reason["holds"] is None and "compute capability of a GPU is unknown" in reason["text"]


# ---------------------------------------------------------------- M05: engine/schema.py


@pytest.mark.parametrize(
    ("spelled", "distribution", "version"),
    [
        ("flash_attn", "flash_attn", "2.5.8"),
        ("Flash_Attn", "flash-attn", "2.5.8"),
        ("fla-core", "flash-linear-attention", "0.3.0"),
        ("fla_core", "fla-core", "0.3.0"),
        ("pytorch-triton", "triton", "3.1.0"),
    ],
)
def test_m05_rule_package_names_are_normalised(tmp_path, site, no_gpu, spelled, distribution, version):
    """M05: a rule that spells a package as another of its published names (``flash_attn``,
    ``fla-core``) must match the installed distribution. The mutant kept the rule's spelling as the
    key (``packages[name]`` for ``packages[rule_name(name)]``): the rule never met the installed
    package and said not-affected."""
    write_rule(tmp_path / "rules", "test-spelling", f'packages = {{ {spelled} = "<{version}.post1" }}')
    site.install(distribution, version)
    report = check_json("--path", site.path, "--rules", tmp_path / "rules")
    finding = findings(report)["test-spelling"]
    assert finding["verdict"] == "affected", finding["reasons"]


# ---------------------------------------------------------------- M06: engine/loader.py


@pytest.mark.parametrize("command", ["check", "fix"])
def test_m06_user_rules_symptoms_are_validated_by_check_and_fix(tmp_path, site, no_gpu, command):
    """M06: `check --rules DIR` and `fix --rules DIR` trust only the shipped database; a user rule
    with a catastrophic symptom (``(ab+)+cdef``) must be reported as a problem, exit 2. The mutant
    (``compile_symptoms=not trust_database``) skipped the symptom check for every rule file."""
    write_rule(tmp_path / "rules", "test-unsafe", 'packages = { torch = "<1.0" }', symptoms="['(ab+)+cdef']")
    result = cli(command, "--path", site.path, "--rules", tmp_path / "rules")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if "test-unsafe.toml" in line]
    assert len(errors) == 1, result.stderr
    assert "field 'symptoms[0]'" in errors[0] and "nested" in errors[0]
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- M07: engine/patterns.py


@pytest.mark.parametrize("pattern", ["abcd(?!x)", "(?<!x)abcd", "abcd(?<=d)", "(?=a)abcd", "abcd(?:(?!x)y)?"])
def test_m07_negative_and_positive_look_around_is_rejected(tmp_path, pattern):
    """M07: every look-around (negative look-ahead and look-behind too) is outside the safe subset
    of symptom patterns (RE2 has none). The mutant removed ASSERT_NOT from the forbidden opcodes:
    ``abcd(?!x)`` and ``(?<!x)abcd`` were accepted."""
    with pytest.raises(UnsafePattern, match="look-around"):
        analyse(pattern)
    path = write_rule(tmp_path / "rules", "test-look-around", symptoms=json.dumps([pattern]))
    result = cli("rules", "validate", path)
    assert result.exit_code == 2, result.stdout
    assert "field 'symptoms[0]'" in result.stderr and "look-around" in result.stderr


# ---------------------------------------------------------------- M08: facts/packages.py


def test_m08_installed_package_of_unparsable_version_leaves_its_rules_unknown(tmp_path, site, no_gpu):
    """M08: a dist-info whose Version is not PEP 440 is reported as a problem, but the package is
    still installed: its version rules are unknown. The mutant skipped the package (``continue``
    after the problem), so it counted as not installed and its rules said not-affected."""
    write_rule(tmp_path / "rules", "test-transformers", 'packages = { transformers = "<4.45" }')
    site.install("transformers", "custom-build")
    report = check_json("--path", site.path, "--rules", tmp_path / "rules", exit_codes=(2,))
    assert any("unparsable version 'custom-build'" in problem for problem in report["problems"])
    finding = findings(report)["test-transformers"]
    assert finding["verdict"] == "unknown", finding["reasons"]
    assert "'custom-build' is not a valid version" in finding["reasons"][0]["text"]
    assert report["environment"]["packages"]["transformers"]["version"] == "custom-build"


# ---------------------------------------------------------------- M09: facts/gpus.py


# NVML's and nvidia-smi's names (the probe reads them), with NVIDIA's capability for each
NVML_NAMES = [
    ("NVIDIA A10G", "8.6"),  # AWS g5; not in NVIDIA's table, a variant in gpu_names.json
    ("NVIDIA L40S", "8.9"),
    ("NVIDIA H100 80GB HBM3", "9.0"),
    ("NVIDIA A100-SXM4-80GB", "8.0"),
    ("Tesla T4", "7.5"),
    ("Tesla V100-SXM2-16GB", "7.0"),
    ("NVIDIA L4", "8.9"),
    ("NVIDIA H200", "9.0"),
    ("NVIDIA B200", "10.0"),
]


@pytest.mark.parametrize(("name", "capability"), NVML_NAMES)
def test_m09_nvml_names_give_their_compute_capability(site, fake_nvidia_smi, name, capability):
    """M09: the names NVML and nvidia-smi report map to their compute capability, through
    ``capability_from_name`` (KNOWN_GPUS, gpu_names.json), and through the probe when the
    driver does not report compute_cap. The mutant removed ``A10G`` from the known GPUs: an A10G's
    capability became None and every GPU rule on it unknown."""
    assert gpus.capability_from_name(name) == capability
    fake_nvidia_smi(f"{name}, 470.82.01", knows_compute_cap=False)
    probed = json.loads(cli("probe", "--json", "--path", site.path).stdout)
    assert [(gpu["name"], gpu["compute_capability"]) for gpu in probed["gpus"]] == [(name, capability)]


# ---------------------------------------------------------------- M10: facts/sources/common.py


@pytest.mark.parametrize("pin_file", ["requirements.txt", "pyproject.toml", "Dockerfile"])
def test_m10_wildcard_pin_declares_the_package_without_a_version(tmp_path, no_gpu, pin_file):
    """M10: ``torch==2.4.*`` in a pin file is a range, not an exact pin: torch is declared with an
    unknown version (a rule decided only where the range it records lies on one side), and no
    error. The mutant dropped ``"*" not in version`` from ``exact_version``: ``2.4.*`` was taken as
    an exact version and rejected as not PEP 440."""
    path = tmp_path / pin_file
    if pin_file == "requirements.txt":
        path.write_text("torch==2.4.*\n")
    elif pin_file == "pyproject.toml":
        path.write_text('[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["torch==2.4.*"]\n')
    else:
        path.write_text("FROM python:3.11\nRUN pip install 'torch==2.4.*'\n")
    write_rule(tmp_path / "rules", "test-torch", 'packages = { torch = "<2.5" }')
    result = cli("check", "--format", "json", "-r", path, "--rules", tmp_path / "rules")
    assert result.exit_code in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["problems"] == []
    torch = report["environment"]["packages"]["torch"]
    assert torch["version"] is None and torch["origin"].startswith(f"{path}:")
    # a file that records the range (pyproject, a Dockerfile) decides the rule by it: every 2.4.x is
    # < 2.5; a requirements file states no range, so every release is possible
    expected = "unknown" if pin_file == "requirements.txt" else "affected"
    assert findings(report)["test-torch"]["verdict"] == expected


# ---------------------------------------------------------------- M13: report/sarif.py


def test_m13_sarif_reports_an_unknown_finding_as_a_note(tmp_path, site, no_gpu):
    """M13: SARIF has a result for every finding that is not not-affected: an unknown one is a
    ``note`` whose message says what could not be decided. The mutant kept only affected findings
    (``is Verdict.AFFECTED`` for ``is not Verdict.NOT_AFFECTED``): unknown findings vanished."""
    write_rule(tmp_path / "rules", "test-pre-ampere", 'compute_capability = "<8.0"')
    result = cli("check", "--format", "sarif", "--path", site.path, "--rules", tmp_path / "rules")
    assert result.exit_code == 0, result.stderr
    run_ = json.loads(result.stdout)["runs"][0]
    results = {r["ruleId"]: r for r in run_["results"]}
    assert "test-pre-ampere" in results, sorted(results)
    entry = results["test-pre-ampere"]
    assert entry["level"] == "note"
    assert entry["properties"]["verdict"] == "unknown"
    assert entry["message"]["text"].startswith("Could not decide (no GPU found and no --gpu target): ")
    assert run_["tool"]["driver"]["rules"][entry["ruleIndex"]]["id"] == "test-pre-ampere"


# ---------------------------------------------------------------- M15: report/json_report.py


def test_m15_json_keeps_the_versions_verdict_beside_the_probes(tmp_path, no_gpu):
    """M15: where a probe (here `check --source` on a fixed FA3 checkout) overrides the versions'
    verdict, the JSON report keeps both: ``verdict`` the probe's, ``version_verdict`` what the
    facts alone say. The mutant wrote ``finding.verdict`` into both fields."""
    kernel = REPO / "tests" / "probes" / "fixtures" / "fa3" / "fixed.h"
    (tmp_path / "hopper").mkdir()
    (tmp_path / "hopper" / "flash_fwd_kernel_sm90.h").write_text(kernel.read_text())
    features = ("--feature", "source_build", "--feature", "flash_attention_3")
    report = check_json("--source", tmp_path, *features, "--fail-on", "warning")
    finding = findings(report)["fa3-hopper-pipelineparams-build"]
    assert finding["probe"]["verdict"] == "not-affected-by-probe"
    assert finding["verdict"] == "not-affected"
    assert finding["version_verdict"] == "affected"
    assert report["exit_code"] == 0


# ---------------------------------------------------------------- M16: report/junit.py


def test_m16_junit_skipped_count_includes_ignored_findings(tmp_path, site, no_gpu):
    """M16: an ignored finding is a ``<skipped>`` test case, and the suite's ``skipped=`` counts it:
    the attribute equals the number of ``<skipped>`` elements. The mutant counted only unknown
    findings, so an ignored affected finding was skipped in the body but not in the count."""
    rules = tmp_path / "rules"
    write_rule(rules, "test-ignored", 'packages = { transformers = "<4.45" }')
    write_rule(rules, "test-unknown", 'compute_capability = "<8.0"')
    site.install("transformers", "4.44.0")
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.attn-doctor.ignore]\ntest-ignored = "we never use this path"\n')
    args = ("--path", site.path, "--rules", rules, "--config", config, "--format", "junit")
    result = cli("check", *args)
    assert result.exit_code in (0, 1), result.stderr
    suite = ElementTree.fromstring(result.stdout).find("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    ignored = cases["test-ignored"].find("skipped")
    assert ignored is not None and ignored.get("message") == "ignored: we never use this path"
    assert cases["test-unknown"].find("skipped") is not None
    assert int(suite.get("skipped")) == len(suite.findall("testcase/skipped"))


# ---------------------------------------------------------------- M17: explain/rank.py


def test_m17_more_matched_patterns_rank_ahead_of_a_rarer_single_pattern(tmp_path, site, no_gpu):
    """M17: between causes that fit alike, the one more of whose patterns matched ranks first; only
    then a pattern fewer rules share. Rules a and c share two patterns, b has one of its own; all
    three match. The mutant swapped the two keys and ranked b (a rarer pattern) first."""
    rules = tmp_path / "rules"
    shared = json.dumps(["quetzal marker alpha", "quetzal marker beta"])
    write_rule(rules, "test-rank-a", symptoms=shared)
    write_rule(rules, "test-rank-c", symptoms=shared)
    write_rule(rules, "test-rank-b", symptoms=json.dumps(["okapi marker gamma"]))
    log = tmp_path / "run.log"
    log.write_text("starting\nquetzal marker alpha\nokapi marker gamma\nquetzal marker beta\nstopped\n")
    result = cli("explain", log, "--path", site.path, "--rules", rules, "--format", "json")
    assert result.exit_code == 0, result.stderr  # a cause found
    causes = json.loads(result.stdout)["causes"]
    assert [(cause["id"], cause["verdict"]) for cause in causes] == [
        ("test-rank-a", "affected"),
        ("test-rank-c", "affected"),
        ("test-rank-b", "affected"),
    ]


# ---------------------------------------------------------------- M18: fixer/search.py


def test_m18_fix_that_clears_two_rules_but_triggers_a_third_is_rejected(tmp_path, site, no_gpu):
    """M18: `fix` never proposes a change that makes a rule fail that did not fail before, even one
    that clears more rules than it triggers (demo-lib 2.0 clears two, triggers a third: fewer
    findings, still a conflict). The mutant let the new failure count as one more finding, so the
    2-for-1 trade won on cost and `fix` proposed demo-lib==2.0."""
    rules = tmp_path / "rules"
    write_rule(rules, "old-demo-one", 'packages = { demo-lib = "<2.0" }')
    write_rule(rules, "old-demo-two", 'packages = { demo-lib = "<2.0" }')
    write_rule(rules, "new-demo-any-other", 'packages = { demo-lib = ">=2.0", other-lib = "" }')
    pins = ("--pin", "demo-lib==1.5", "--pin", "other-lib==1.0")
    result = cli(
        "fix", "--format", "json", "--path", site.path, "--rules", rules, "--feature", "varlen", *pins
    )
    plan = json.loads(result.stdout)
    assert plan["failing_before"] == ["old-demo-one", "old-demo-two"]
    assert plan["changes"] == [] and plan["pip_command"] is None
    assert "new-demo-any-other" not in plan["failing_after"]
    assert {(stay["id"], stay["kind"]) for stay in plan["stays"]} == {
        ("old-demo-one", "conflict"),
        ("old-demo-two", "conflict"),
    }
    assert result.exit_code == 1


# ---------------------------------------------------------------- M19: redact.py


def _token(prefix: str, length: int = 36) -> str:
    """A token-shaped value, built here so no real-looking secret sits in the source."""
    body = ("Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2H1g0" * 2)[:length]
    return prefix + body


@pytest.mark.parametrize(
    "secret",
    [
        _token("ghp_"),
        _token("gho_"),
        _token("ghu_"),
        _token("ghs_"),
        _token("ghr_"),
        _token("github_pat_", 60),
        _token("hf_"),
        _token("glpat-", 20),
        _token("sk-", 24),
        _token("xoxb-", 24),
        _token("xoxp-", 24),
        "AKIA" + "IOSFODNN7EXAMPL1",
    ],
)
def test_m19_every_token_shape_is_redacted(secret):
    """M19: `scrub` redacts every token shape it names: all GitHub prefixes (ghp_, gho_, ghu_, ghs_,
    ghr_, github_pat_), Hugging Face, GitLab, API keys, Slack and AWS access key ids. The mutant
    narrowed ``gh[pousr]_`` to ``ghp_``: OAuth, user, server and refresh tokens leaked."""
    text = f"export TOKEN={secret} (from the CI log)"
    scrubbed = scrub(text)
    assert secret not in scrubbed
    assert scrubbed == f"export TOKEN={REDACTED} (from the CI log)"
