"""Live probes: the runner on probe children that misbehave, and `check --probe` / `repro` end to end
with libraries whose import crashes or hangs (fake packages: a broken install is what's under test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attn_doctor.forkserver import Launcher
from attn_doctor.isolation import child_environment
from attn_doctor.probes.catalogue import PROBES, Probe
from attn_doctor.probes.observation import ProbeVerdict
from attn_doctor.probes.runner import CHILD_ENTRY, run_probe
from tests.conftest import Site
from tests.support import REPO, cli

TEST_PROBE = Probe(
    id="behaving",
    module="tests.probe_children.behaving",
    rules=("test-rule",),
    needs="transformers",
    summary="test",
)


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
@pytest.mark.parametrize(
    ("behaviour", "verdict", "evidence"),
    [
        ("affected", ProbeVerdict.AFFECTED, "cu_seqlens_q=[16]"),
        ("not-affected", ProbeVerdict.NOT_AFFECTED, "exact"),
        ("silent-about-rule", ProbeVerdict.ERROR, "said nothing about this rule"),
        ("skip", ProbeVerdict.SKIPPED, "needs a GPU"),
        ("raise", ProbeVerdict.ERROR, "RuntimeError: the code path moved"),
        ("segfault", ProbeVerdict.ERROR, "killed by SIGSEGV"),
        ("hang", ProbeVerdict.ERROR, "hung: no result within 3 s"),
        ("flood", ProbeVerdict.NOT_AFFECTED, "after the flood"),
        ("garbage", ProbeVerdict.ERROR, "left no result"),
    ],
)
def test_runner_turns_every_child_into_an_observation(
    behaviour: str, verdict: ProbeVerdict, evidence: str, fork: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTN_DOCTOR_TEST_PROBE", behaviour)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    with Launcher(child_environment(), [CHILD_ENTRY], fork=fork) as launcher:
        run = run_probe(TEST_PROBE, launcher, timeout_s=3)
        assert launcher.note.startswith("children forked" if fork else "each child in a fresh process")
    [observation] = run.observations
    assert observation.rule == "test-rule"
    assert observation.verdict is verdict
    assert evidence in observation.evidence


def test_every_probe_names_real_rules_and_modules() -> None:
    from attn_doctor.engine.loader import load_rules

    known = {rule.id for rule in load_rules().rules}
    for probe in PROBES:
        assert set(probe.rules) <= known, probe.id
        assert (REPO / (probe.module.replace(".", "/") + ".py")).is_file(), probe.module


def _broken_transformers(site: Site, body: str, version: str = "4.44.0") -> None:
    """A transformers whose import does ``body`` (the flex probes judge it by its metadata's release)."""
    site.install("transformers", version)
    (site.path / "transformers").mkdir(parents=True)
    (site.path / "transformers" / "__init__.py").write_text(textwrap.dedent(body))


def _doctor(site: Site, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{site.path}{os.pathsep}{REPO}"}
    return subprocess.run(
        [sys.executable, "-m", "attn_doctor", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.parametrize(
    ("body", "said", "timeout_s"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "SIGSEGV: Fatal Python error", 120),
        ("import time\ntime.sleep(600)\n", "hung: no result within 5 s", 5),
        (
            "import sys\nfor _ in range(20000): sys.stdout.write('y' * 1000 + '\\n')\nraise SystemExit(3)\n",
            "exit code 3",
            120,
        ),
        ("raise ImportError('libcudart.so.12: cannot open shared object file')\n", "libcudart.so.12", 120),
    ],
)
def test_check_probe_survives_a_library_whose_import_fails(
    site: Site, body: str, said: str, timeout_s: int
) -> None:
    """Only the hang waits for the probe's timeout; the others get one that a loaded machine's torch
    import (seconds each) cannot reach, so what they show is the failure, not a slow start."""
    _broken_transformers(site, body)
    done = _doctor(
        site,
        "check",
        "--probe",
        "--probe-timeout",
        str(timeout_s),
        "--format",
        "json",
        "--feature",
        "flash_attention_2",
    )
    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)  # the report is still whole
    by_id = {finding["id"]: finding for finding in report["findings"]}
    finding = by_id["gemma2-fa2-cu-seqlens"]
    assert finding["probe"]["verdict"] == "probe-error" and said in finding["probe"]["evidence"]
    assert finding["verdict"] == finding["version_verdict"] == "affected"  # the versions still speak
    # the flex probes read the release before importing it: 4.44.0 has no flex_attention
    for rule, lacks in (
        ("transformers-flex-blockmask-no-dim", "no flex_attention (added in 4.47.0)"),
        ("transformers-flex-pad-none-key-length", "no make_flex_block_causal_mask (added in 4.48.0)"),
    ):
        assert by_id[rule]["probe"]["verdict"] == "skipped" and lacks in by_id[rule]["probe"]["evidence"]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert errors and all(line.startswith("attn-doctor: error: probe ") for line in errors), done.stderr
    assert "Traceback" not in done.stderr


def test_check_probe_on_a_declared_environment_skips_with_the_reason() -> None:
    result = cli(
        *("check", "--probe", "--pin", "transformers==4.44.0", "--gpu", "sm_90", "--format", "json"),
        *("--feature", "flash_attention_2"),
    )
    report = json.loads(result.stdout)
    finding = next(f for f in report["findings"] if f["id"] == "gemma2-fa2-cu-seqlens")
    assert finding["probe"]["verdict"] == "skipped"
    assert "declared" in finding["probe"]["evidence"]
    assert finding["verdict"] == "affected"  # the versions still speak


def test_repro_of_a_rule_with_only_a_probe_runs_the_probe(site: Site) -> None:
    _broken_transformers(
        site, "raise ImportError('cannot import name is_torch_flex_attn_available')\n", "4.51.0"
    )
    done = _doctor(site, "repro", "transformers-flex-blockmask-no-dim", "--format", "json")
    [row] = json.loads(done.stdout)["results"]
    assert (row["repro"], row["case"]) == (
        "probe transformers-flex-blockmask",
        "transformers-flex-blockmask-no-dim",
    )
    assert row["status"] == "ERROR" and "is_torch_flex_attn_available" in row["detail"]
    assert row["device"] == "installed transformers 4.51.0"
    assert "python -m attn_doctor.probes.child" in row["command"]
    assert done.returncode == 1


@pytest.mark.parametrize(
    ("fixture", "verdict", "exit_code"),
    [("affected", "affected-by-probe", 1), ("fixed", "not-affected-by-probe", 0)],
)
def test_check_source_scans_a_checkout_before_the_build(
    tmp_path: Path, fixture: str, verdict: str, exit_code: int
) -> None:
    kernel = REPO / "tests" / "probes" / "fixtures" / "fa3" / f"{fixture}.h"
    (tmp_path / "hopper").mkdir()
    (tmp_path / "hopper" / "flash_fwd_kernel_sm90.h").write_text(kernel.read_text())
    result = cli(
        "check",
        "--source",
        tmp_path,
        "--feature",
        "source_build",
        "--feature",
        "flash_attention_3",
        "--format",
        "json",
        "--fail-on",
        "warning",
    )
    assert result.exit_code == exit_code, result.stderr  # the rule is a warning; the scan decides
    finding = next(
        f for f in json.loads(result.stdout)["findings"] if f["id"] == "fa3-hopper-pipelineparams-build"
    )
    assert finding["probe"]["verdict"] == verdict
    assert finding["verdict"] == ("affected" if verdict == "affected-by-probe" else "not-affected")
    assert "flash_fwd_kernel_sm90.h" in finding["probe"]["evidence"]


def test_check_source_on_a_missing_path_is_one_line(tmp_path: Path) -> None:
    result = cli("check", "--source", tmp_path / "nowhere")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "nowhere" in result.stderr and "Traceback" not in result.stderr
