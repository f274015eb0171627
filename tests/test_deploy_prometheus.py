"""deploy/prometheus: the textfile script publishes `check --format prometheus` atomically with the
real CLI on env files, keeps the last file when the check cannot run, and the alert rules select
series and labels the real output has."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS = REPO / "deploy" / "prometheus"
SCRIPT = PROMETHEUS / "attn-doctor-textfile.sh"
HEALTHY = REPO / "tests" / "fixtures" / "healthy" / "h100-current.json"
OLD_DRIVER = REPO / "tests" / "fixtures" / "deploy" / "h100-driver-550-torch-cu132.json"
DOCTOR = Path(sys.executable).parent / "attn-doctor"


def publish(directory: Path, env_file: Path) -> subprocess.CompletedProcess[str]:
    assert DOCTOR.is_file(), f"the CLI under test is {DOCTOR}"
    env = {
        **os.environ,
        "ATTN_DOCTOR": str(DOCTOR),
        "ATTN_DOCTOR_ENV_FILE": str(env_file),
        "ATTN_DOCTOR_TEXTFILE_DIR": str(directory),
    }
    return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)


def samples(path: Path) -> list:
    return [
        sample for family in text_string_to_metric_families(path.read_text()) for sample in family.samples
    ]


def test_a_failing_node_is_published(tmp_path: Path) -> None:
    done = publish(tmp_path, OLD_DRIVER)

    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["attn_doctor.prom"]  # no temporary file left
    failing = [
        s for s in samples(tmp_path / "attn_doctor.prom") if s.name == "attn_doctor_finding" and s.value == 1
    ]
    assert [s.labels["rule"] for s in failing] == ["cuda-driver-too-old-for-torch"]
    [exit_code] = [
        s.value for s in samples(tmp_path / "attn_doctor.prom") if s.name == "attn_doctor_check_exit_code"
    ]
    assert exit_code == 1


def test_a_check_that_cannot_run_keeps_the_last_file(tmp_path: Path) -> None:
    assert publish(tmp_path, HEALTHY).returncode == 0
    before = (tmp_path / "attn_doctor.prom").read_text()
    broken = tmp_path / "node7.json.in"
    broken.write_text("{not json")

    done = publish(tmp_path, broken)

    assert done.returncode == 2
    assert "node7.json.in" in done.stderr
    assert (tmp_path / "attn_doctor.prom").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attn_doctor.prom", "node7.json.in"]


def test_the_alerts_select_what_the_metrics_have(tmp_path: Path) -> None:
    assert publish(tmp_path, OLD_DRIVER).returncode == 0
    published = samples(tmp_path / "attn_doctor.prom")
    labels = {}
    for sample in published:
        labels.setdefault(sample.name, set()).update(sample.labels)

    rules = yaml.safe_load((PROMETHEUS / "attn-doctor-alerts.yml").read_text())["groups"][0]["rules"]
    assert {rule["alert"] for rule in rules} == {"AttnStackFinding", "AttnDoctorCheckStale"}
    for rule in rules:
        names = set(re.findall(r"\battn_doctor_[a-z_]+", rule["expr"]))
        assert names and names <= labels.keys(), rule["expr"]
        grouped = re.search(r"by \(([^)]*)\)", rule["expr"])
        used = {label.strip() for label in grouped.group(1).split(",")} if grouped else set()
        templated = set(re.findall(r"\$labels\.(\w+)", yaml.safe_dump(rule)))
        for name in names:
            # instance is the scrape's label, added by Prometheus
            assert (used | templated) - {"instance"} <= labels[name], rule


@pytest.mark.parametrize("unit", ["attn-doctor-textfile.service", "attn-doctor-textfile.timer"])
def test_the_systemd_units_parse(unit: str) -> None:
    parser = configparser.ConfigParser(strict=True, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((PROMETHEUS / unit).read_text())
    if unit.endswith(".service"):
        assert parser["Service"]["Type"] == "oneshot"
        assert parser["Service"]["ExecStart"].endswith("/" + SCRIPT.name)
    else:
        assert parser["Timer"]["OnUnitActiveSec"] and parser["Install"]["WantedBy"] == "timers.target"
