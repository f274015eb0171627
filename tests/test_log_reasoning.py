"""Reasoning from the log like a maintainer (issue 25): what the log proves is a fact, what it
does not say is unknown, and no rule wins outside its package. Each test is built on real text:
the threads quoted in the issue, or tests/cases/."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import attn_doctor.explain as explain_module
from attn_doctor._compat import tomllib
from attn_doctor.config import Config
from attn_doctor.engine.loader import RuleSet
from attn_doctor.facts.assemble import EnvironmentInputs
from tests.support import REPO, cli

CASES = REPO / "tests" / "cases"
LOGS = REPO / "tests" / "logs" / "issue25"
# Dao-AILab/flash-attention#1476, as nvcc printed it in the report
SEED_C_1476 = """hopper/flash_fwd_kernel_sm90.h(227): error: no suitable user-defined conversion from "PipelineParamsK" (aka "cutlass::PipelineTmaAsync<2>::Params") to "PipelineParamsV" (aka "cutlass::PipelineAsync<2>::Params") exists
          PipelineParamsV pipeline_params_v = pipeline_params_k;
                                              ^
"""  # noqa: E501


def explained(tmp_path: Path, text: str, *args: str) -> dict:
    log = tmp_path / "error.log"
    log.write_text(text)
    return json.loads(cli("explain", log, "--no-scan", "--format", "json", *args).stdout)


def case_log(path: str) -> str:
    return tomllib.loads((CASES / path).read_text())["log"]["error"]


def test_a_log_that_compiles_hopper_is_a_source_build(tmp_path: Path):
    """The compiler's own line proves an FA3 source build: the rule is first and not dismissed
    for want of a source tree in the folder explain runs in."""
    report = explained(tmp_path, SEED_C_1476)
    first = report["causes"][0]
    assert (first["id"], first["verdict"]) == ("fa3-hopper-pipelineparams-build", "affected")
    facts = {f["name"]: f for f in report["environment"]["features"]["facts"]}
    assert facts["source_build"]["source"] == "from the log" and facts["source_build"]["evidence"] == [
        "line 1"
    ]


def test_without_the_build_in_the_log_a_source_build_is_unknown_not_absent(tmp_path: Path):
    """The message alone (no path that shows what was compiled): the source build is unknown,
    never 'not in use' on the word of a folder that is not the reporter's."""
    line = SEED_C_1476.splitlines()[0].replace("hopper/flash_fwd_kernel_sm90.h(227): ", "")
    first = explained(tmp_path, line + "\n")["causes"][0]
    assert (first["id"], first["verdict"]) == ("fa3-hopper-pipelineparams-build", "unknown")
    assert any("applies if you use source_build" in r["text"] for r in first["reasons"])


def test_a_log_is_an_open_package_list(tmp_path: Path):
    """An RX 7900 XTX (gfx1100) refused by flash-attn's CK build (ROCm/flash-attention#93's words),
    no torch line in the log: torch is unknown, never 'not installed', and the CK rule leads."""
    log = "AssertionError: One of GPU archs of ['gfx1100'] is invalid or not supported by Flash-Attention\n"
    report = explained(tmp_path, log)
    first = report["causes"][0]
    assert first["id"] == "flash-attn-rocm-ck-gpu-unsupported" and first["verdict"] != "not-affected"
    assert "is not installed" not in json.dumps(report["causes"])


def test_a_stated_version_beats_the_one_another_package_pins(tmp_path: Path):
    """woct0rdho/ComfyUI-RadialAttn#3: triton-windows 3.4.0.post20 under torch 2.7.1. torch 2.7.1
    pins triton 3.3.1; the stated 3.4 wins, the report says both, and the rule holds."""
    text = (LOGS / "radialattn-3.log").read_text()
    report = explained(tmp_path, text)
    first = report["causes"][0]
    assert (first["id"], first["verdict"]) == ("triton-3-4-needs-torch-2-8", "affected")
    triton = report["environment"]["packages"]["triton"]
    assert triton["version"] == "3.4.0.post20" and triton["pinned_by"] == "torch 2.7.1 pins triton==3.3.1"
    plain = " ".join(cli("explain", LOGS / "radialattn-3.log", "--no-scan").stdout.split())
    assert "triton 3.4.0.post20 (line 7; but torch 2.7.1 pins triton==3.3.1)" in plain


@pytest.mark.parametrize(
    ("case", "pins"),
    [
        ("transformers/hpcaitech-colossalai-4903.toml", ()),
        ("transformers/microsoft-minference-207.toml", ("--pin", "transformers==5.17.0")),  # as reported
    ],
)
def test_a_rule_does_not_win_outside_its_package(tmp_path: Path, case: str, pins: tuple[str, ...]):
    """'got an unexpected keyword argument' in a traceback with no fla in it, nor in the stack:
    the fla rule shares the words, it is not a cause."""
    report = explained(tmp_path, case_log(case), *pins)
    assert "fla-api-moved-between-versions" not in [c["id"] for c in report["causes"]]
    assert {"id": "fla-api-moved-between-versions", "component": "flash-linear-attention"} in report[
        "elsewhere"
    ]
    assert report["causes"][0]["id"] == "transformers-downstream-attention-api-drift"


def test_the_same_rule_wins_where_the_log_names_its_package(tmp_path: Path):
    text = case_log("transformers/hpcaitech-colossalai-4903.toml")
    text = '  File "/venv/lib/python3.10/site-packages/fla/layers/attn.py", line 3, in forward\n' + text
    report = explained(tmp_path, text)
    assert "fla-api-moved-between-versions" in [c["id"] for c in report["causes"]]


def test_ranking_does_not_depend_on_the_order_rules_are_read(monkeypatch: pytest.MonkeyPatch):
    """Ties break on evidence, then on the rule id: never on file order (seed B: one cause, two rules
    matched elsewhere)."""
    real = explain_module.load_rules

    def ranked(order: random.Random | None) -> list[str]:
        def shuffled(paths: list[Path]) -> RuleSet:
            ruleset = real(paths)
            if order is not None:
                order.shuffle(ruleset.rules)
            return ruleset

        monkeypatch.setattr(explain_module, "load_rules", shuffled)
        log = REPO / "tests" / "logs" / "seed_b.log"
        result = explain_module.explain(str(log), EnvironmentInputs(scan=False), Config(), [])
        return [cause.finding.rule.id for cause in [*result.causes, *result.elsewhere]]

    baseline = ranked(None)
    assert len(baseline) >= 3
    assert all(ranked(random.Random(seed)) == baseline for seed in range(5))


def test_a_package_is_absent_only_where_the_log_says_so(tmp_path: Path):
    """The H100 run without xformers: Python's own words make xformers absent (from the log, line
    N); a rule about a package the log never names stays unknown, never 'not installed'."""
    text = tomllib.loads(next(CASES.glob("*/produced-xformers-not-installed.toml")).read_text())["log"][
        "error"
    ]
    report = explained(tmp_path, text)
    origins = report["environment"]["origins"]
    assert origins["absent: xformers"].startswith("from the log, line ")
    assert "absent: flash-attn" not in origins
    rules = tmp_path / "rules"
    from tests.support import write_rule

    write_rule(
        rules, "needs-fa", 'packages = { flash-attn = "" }', symptoms="[\"No module named 'xformers'\"]"
    )
    write_rule(rules, "needs-xf", 'packages = { xformers = "" }', symptoms="[\"No module named 'xformers'\"]")
    verdicts = {c["id"]: c["verdict"] for c in explained(tmp_path, text, "--rules", str(rules))["causes"]}
    assert verdicts["needs-fa"] == "unknown" and verdicts["needs-xf"] == "not-affected"


def test_the_error_line_itself_outranks_a_warning_far_above_it(tmp_path: Path):
    """Two rules that fit alike: the one matching the error the run died of ranks first, though
    the other's words are longer; JSON says why."""
    from tests.support import write_rule

    rules = tmp_path / "rules"
    # both lines as torch 2.11 and flash-attn print them (tests/cases/produced/, flash_api.cpp)
    warning = (
        "UserWarning: Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query "
        "dtype: float, Key dtype: float, and Value dtype: float instead."
    )
    error = "RuntimeError: FlashAttention only supports Ampere GPUs or newer."
    write_rule(rules, "from-the-warning", symptoms="['Expected query, key and value to all be of dtype']")
    write_rule(rules, "from-the-error", symptoms="['only supports Ampere GPUs']")
    text = warning + "\n" + "step 1 loss 2.3\n" * 500 + error + "\n"
    report = explained(tmp_path, text, "--rules", str(rules))
    ours = [c for c in report["causes"] if c["id"] in ("from-the-warning", "from-the-error")]
    assert [c["id"] for c in ours] == ["from-the-error", "from-the-warning"]
    assert "it matches the log's last error line" in ours[0]["why"]


def test_a_fit_on_stated_versions_outranks_one_on_versions_another_pin_implies(tmp_path: Path):
    """torch 2.5.1 stated in the log (pip list), triton 3.1.0 only implied by torch's pin (which
    holds on Python < 3.13: the log states 3.11): two rules that fit alike on one message, the
    one that rests on the stated version ranks first (though the other's id sorts first)."""
    from tests.support import write_rule

    rules = tmp_path / "rules"
    symptoms = "['only supports Ampere GPUs']"
    write_rule(rules, "a-on-triton", 'packages = { triton = "==3.1.0" }', symptoms=symptoms)
    write_rule(rules, "b-on-torch", 'packages = { torch = "==2.5.1" }', symptoms=symptoms)
    text = (
        "Python version: 3.11.9\ntorch              2.5.1\n"
        "RuntimeError: FlashAttention only supports Ampere GPUs or newer.\n"
    )
    report = explained(tmp_path, text, "--rules", str(rules))
    ours = [c for c in report["causes"] if c["id"] in ("a-on-triton", "b-on-torch")]
    assert [(c["id"], c["verdict"]) for c in ours] == [
        ("b-on-torch", "affected"),
        ("a-on-triton", "affected"),
    ]
    assert any("only implied by another's pin" in why for why in ours[1]["why"])
