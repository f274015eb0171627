"""`check --probe` end to end against real transformers releases (cached venvs): the probe's verdict
overrides the versions', both are reported, and the exit code follows the probe."""

from __future__ import annotations

import json

import pytest

from tests.release_venvs import release_venv, run_doctor

A, A_4D = "gemma2-fa2-cu-seqlens", "transformers-fa2-4d-attention-mask"
GENERATE = "gemma2-fa2-generate-4d-mask"
D, E = "transformers-flex-blockmask-no-dim", "transformers-flex-pad-none-key-length"
AFFECTED, CLEAN, SKIPPED = "affected-by-probe", "not-affected-by-probe", "skipped"
# the code paths the probes drive, declared in use (a probe shows the library's bug, not the user's use),
# with the model whose code they drive (the Gemma-2 rules hold for Gemma-2 only)
USED = [
    *(
        arg
        for feature in ("flash_attention_2", "flex_attention", "generate", "attention_mask_4d")
        for arg in ("--feature", feature)
    ),
    *("--model", "gemma2"),
]

EXPECTED = {  # release -> (probe verdict per rule, exit code)
    "4.44.0": ({A: AFFECTED, A_4D: AFFECTED, GENERATE: AFFECTED, D: SKIPPED, E: SKIPPED}, 1),
    "4.44.1": ({A: CLEAN, A_4D: AFFECTED, D: SKIPPED, E: SKIPPED}, 0),
    "4.51.0": ({A: CLEAN, D: AFFECTED, E: AFFECTED}, 1),
    "4.51.1": ({A: CLEAN, D: AFFECTED, E: CLEAN}, 1),
    # Gemma2 generate hands FA2 a 4-D mask again in 4.52.x (see the rule's summary)
    "4.52.1": ({A: CLEAN, GENERATE: AFFECTED, D: CLEAN, E: CLEAN}, 1),
    "5.23.0": ({A: CLEAN, A_4D: AFFECTED, GENERATE: CLEAN, D: CLEAN, E: CLEAN}, 0),
}


@pytest.mark.releases
@pytest.mark.parametrize("fork", ["1", "0"], ids=["forked", "fresh"])
@pytest.mark.parametrize("release", list(EXPECTED))
def test_check_probe_on_real_release(release: str, fork: str) -> None:
    """The same verdicts whether the probes fork from one process that imported torch and
    transformers (the default) or each start a fresh Python (ATTN_DOCTOR_FORK=0)."""
    expected, exit_code = EXPECTED[release]
    with release_venv(f"transformers=={release}") as venv:
        done = run_doctor(
            venv, "check", "--probe", "--format", "json", "-v", *USED, extra_env={"ATTN_DOCTOR_FORK": fork}
        )
    assert done.returncode == exit_code, done.stderr
    how = (
        "children forked from one process that imported torch, transformers"
        if fork == "1"
        else "each child in a fresh process"
    )
    assert f"probes: {how}" in done.stderr
    findings = {finding["id"]: finding for finding in json.loads(done.stdout)["findings"]}
    for rule_id, verdict in expected.items():
        finding = findings[rule_id]
        assert finding["probe"]["verdict"] == verdict, (rule_id, finding["probe"])
        if verdict != SKIPPED:  # the probe decides; the versions' verdict is still reported
            assert finding["verdict"] == ("affected" if verdict == AFFECTED else "not-affected")
            assert finding["version_verdict"] in ("affected", "not-affected")
    assert findings["fla-rotary-dim-exceeds-head-dim"]["probe"]["evidence"] == (
        "flash-linear-attention is not installed"
    )


@pytest.mark.releases
def test_text_report_shows_both_verdicts() -> None:
    with release_venv("transformers==4.44.0") as venv:
        done = run_doctor(venv, "check", "--probe", *USED, extra_env={"NO_COLOR": "1"})
    text = done.stdout
    assert "✗ gemma2-fa2-cu-seqlens [error, affected]" in text
    assert "probe: affected-by-probe: " in text and "cu_seqlens_q=[16]" in text
    assert "versions alone: affected" in text


@pytest.mark.releases
def test_a_probed_bug_needs_the_feature_in_use() -> None:
    """The 4-D mask bug is in every release's FA2 path; a project that never uses FA2 is not told
    it is affected, only that the rule applies if it does."""
    with release_venv("transformers==5.23.0") as venv:
        done = run_doctor(venv, "check", "--probe", "--format", "json", "--fail-on", "info")
    assert done.returncode == 0, done.stderr
    finding = {f["id"]: f for f in json.loads(done.stdout)["findings"]}[A_4D]
    assert finding["probe"]["verdict"] == AFFECTED and finding["verdict"] == "unknown"
    assert finding["applies_if_used"] == ["flash_attention_2", "attention_mask_4d"]
