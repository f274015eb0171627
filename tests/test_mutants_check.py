"""Tests for the mutants of attn_doctor/check.py that survived mutmut (benchmarks/mutation_score.py
--part check; docs/mutation-testing.md). Each docstring names the mutant it kills (mutmut's name,
``x_<function>__mutmut_<n>``, or ``xǁClassǁmethod__mutmut_<n>``) and what the mutant would have let
through. The real CLI, real rules and real probe children; the library under the probes is a fake
transformers whose import fails, as tests/test_probes.py does."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from support import REPO, cli

from attn_doctor.probes.catalogue import PROBES

FA3 = REPO / "tests" / "probes" / "fixtures" / "fa3"


@pytest.fixture
def broken_transformers(site, monkeypatch: pytest.MonkeyPatch):
    """transformers 4.44.0 installed, whose import fails as a CUDA library that is not there."""
    site.install("transformers", "4.44.0")
    (site.path / "transformers").mkdir(exist_ok=True)
    (site.path / "transformers" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.12: cannot open shared object file')\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{site.path}{os.pathsep}{REPO}")  # the probe children import it
    monkeypatch.syspath_prepend(str(site.path))  # this machine's facts see it installed
    return site


@pytest.mark.usefixtures("broken_transformers")
def test_check_probe_reports_each_failed_probe_once_and_no_skipped_one():
    """x_observe__mutmut_16, 17: every probe that failed (an ERROR observation) is an input
    problem of its own, with the probe's evidence, and a probe that was skipped is none. The
    mutants kept the evidence of the observations that are *not* errors (``is not``: the skipped
    flex probes became problems, the failures vanished) or only the last probe's problems
    (``problems =`` for ``+=``); either way exit code 2 and "probe ..." lines still came out."""
    result = cli(
        *("check", "--probe", "--probe-timeout", "60"),
        *("--feature", "flash_attention_2", "--format", "json"),
    )
    assert result.exit_code == 2, result.stderr
    report = json.loads(result.stdout)
    probe_of = {finding["id"]: finding["probe"] for finding in report["findings"] if finding.get("probe")}
    errored = {
        probe.id
        for probe in PROBES
        if any(probe_of.get(rule, {}).get("verdict") == "probe-error" for rule in probe.rules)
    }
    skipped = {
        probe.id
        for probe in PROBES
        if probe.rules and all(probe_of.get(rule, {}).get("verdict") == "skipped" for rule in probe.rules)
    }
    assert len(errored) >= 2 and skipped  # the premise: some probes failed, others were skipped
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    named = [re.match(r"attn-doctor: error: probe (\S+) ", line) for line in lines]
    assert all(named), lines
    assert sorted(match[1] for match in named if match) == sorted(errored)
    assert all("libcudart.so.12" in line for line in lines), lines


def test_two_source_checkouts_give_the_same_verdict_in_either_order(tmp_path: Path):
    """x_observe__mutmut_20 (``observations =`` for ``+=``: only the last --source is kept). It
    found a bug: run_check kept the last observation of a rule, so ``check --source buggy --source
    fixed`` said not affected and ``--source fixed --source buggy`` affected. One checkout with the
    bug is enough, in either order (check.deciding_observations)."""
    checkouts = {}
    for name in ("affected", "fixed"):
        (tmp_path / name / "hopper").mkdir(parents=True)
        kernel = (FA3 / f"{name}.h").read_text()
        (tmp_path / name / "hopper" / "flash_fwd_kernel_sm90.h").write_text(kernel)
        checkouts[name] = tmp_path / name

    def verdict(*order: str) -> str:
        sources = [arg for name in order for arg in ("--source", checkouts[name])]
        result = cli(
            *("check", *sources, "--feature", "source_build", "--feature", "flash_attention_3"),
            *("--format", "json", "--fail-on", "never"),
        )
        [finding] = [
            f for f in json.loads(result.stdout)["findings"] if f["id"] == "fa3-hopper-pipelineparams-build"
        ]
        return finding["verdict"]

    assert verdict("affected", "fixed") == verdict("fixed", "affected") == "affected"


def test_the_check_times_itself_from_its_start():
    """x_checkup__mutmut_34 (``monotonic() + started``: a duration of days): the Prometheus
    format publishes how long the check took, which the golden files replace as varying."""
    text = cli(
        "check",
        "--env-file",
        REPO / "tests/fixtures/healthy/h100-current.json",
        "--no-scan",
        "--format",
        "prometheus",
    ).stdout
    (seconds,) = re.findall(r"^attn_doctor_check_duration_seconds ([0-9.e+-]+)$", text, re.M)
    assert 0 < float(seconds) < 60
