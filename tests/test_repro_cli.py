"""`attn-doctor repro` end to end on this machine's device (the interpreter on a CPU): every seed's
buggy configuration reproduces and its fixed configuration passes the numeric check."""

from __future__ import annotations

import json

import pytest
from support import cli

from attn_doctor.facts.gpus import probe_gpus
from attn_doctor.probes.catalogue import PROBES
from attn_doctor.repro.catalogue import REPROS

has_gpu = bool(probe_gpus()[0])


@pytest.fixture(scope="module")
def all_results() -> dict:
    result = cli("repro", "--all", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    return {(r["repro"], r["case"]): r for r in json.loads(result.stdout)["results"]}


def test_every_case_and_probe_ran(all_results):
    cases = {(repro.id, case.name) for repro in REPROS for case in repro.cases}
    probes = {(f"probe {probe.id}", rule) for probe in PROBES for rule in probe.rules}
    assert set(all_results) == cases | probes
    for key in probes:  # a probe row has no expectation; here, without the library, it says why
        assert all_results[key]["expect_bug"] is None
        assert all_results[key]["status"] in ("SKIPPED", "REPRODUCED", "NOT REPRODUCED")


@pytest.mark.parametrize(("repro", "case"), [(r.id, c.name) for r in REPROS for c in r.cases])
def test_buggy_reproduces_and_fixed_passes(all_results, repro, case):
    result = all_results[(repro, case)]
    wanted = "REPRODUCED" if result["expect_bug"] else "NOT REPRODUCED"
    assert result["status"] == wanted, result["detail"]
    assert result["device"] and result["versions"]["torch"] and result["command"]
    if not result["expect_bug"]:
        assert result["max_abs_error"] is not None and "within" in result["detail"]


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu, reason="needs a CUDA GPU: compares its verdicts with the interpreter's")
def test_cpu_and_gpu_give_the_same_verdicts(all_results):
    """The CPU path's host checks and guard regions stand in for device asserts: same verdict per case."""
    result = cli("repro", "--all", "--device", "cpu", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    cpu = {
        (r["repro"], r["case"]): r
        for r in json.loads(result.stdout)["results"]
        if r["expect_bug"] is not None
    }
    assert cpu and all(row["device"].startswith("cpu") for row in cpu.values())
    disagreeing = {
        key: (row["status"], all_results[key]["status"])
        for key, row in cpu.items()
        if row["status"] != all_results[key]["status"]
    }
    assert not disagreeing, disagreeing


def test_forked_and_fresh_children_give_the_same_verdicts(all_results, monkeypatch):
    """Forking from one process that imported the stack decides nothing: case by case, the
    verdicts of fresh processes (ATTN_DOCTOR_FORK=0) are the same, on this machine's device."""
    monkeypatch.setenv("ATTN_DOCTOR_FORK", "0")
    result = cli("repro", "--all", "--format", "json", "-v")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "repro: each child in a fresh process (ATTN_DOCTOR_FORK=0)" in result.stderr
    fresh = {(r["repro"], r["case"]): r["status"] for r in json.loads(result.stdout)["results"]}
    assert fresh == {key: row["status"] for key, row in all_results.items()}


@pytest.mark.parametrize(
    "name",
    [
        "gemma2-fa2-cu-seqlens",  # a rule id
        "huggingface/transformers#32487",  # owner/repo#N of a cited PR
        "https://github.com/huggingface/transformers/issues/32487",  # issue and pull share numbers
    ],
)
def test_aliases_resolve_to_the_seed_a_repro(name):
    result = cli("repro", name, "--case", "fixed", "--format", "json")
    assert result.exit_code == 0, result.stderr
    (only,) = json.loads(result.stdout)["results"]
    assert only["repro"] == "varlen-cu-seqlens" and only["status"] == "NOT REPRODUCED"


def test_list_and_bad_names():
    listing = cli("repro", "--list").stdout
    assert all(repro.id in listing for repro in REPROS)
    assert cli("repro", "no-such-thing").exit_code == 2
    assert cli("repro", "gemma2-fa2-cu-seqlens", "--case", "nope").exit_code == 2
    assert cli("repro", "triton-requires-sm70").exit_code == 2  # a rule with no bundled repro
    assert cli("repro", "--all", "--device", "tpu").exit_code == 2
