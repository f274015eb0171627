"""Every report, word for word: the real CLI on fixed targets, compared with tests/golden/
(exit code, stdout, stderr).

The other tests check what a report must say (a rule id, an exit code, a schema); these catch
every change of what it says that nobody meant: a key renamed in JSON, a label dropped from the
text, a SARIF level or a JUnit attribute misspelt (mutation testing found such changes surviving
the suite: docs/mutation-testing.md). A change that is meant, a rule's new text or a new field,
shows here as a diff to read in review, then to accept:

    ATTN_DOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py

Targets are declared (env files, requirements), never this machine, and the project is not
scanned, so the output is the same on every machine; the inputs are paths relative to the
checkout (GitLab's fingerprints hash them); tests/fixtures/golden/repro.json is a real
`repro varlen-cu-seqlens --device cpu --format json`, kept as it was, and its *.log files are
error text: a torch ValueError no rule covers, two runs of tests/cases/ on the H100, and CUDA's
"no kernel image" line. What changes from run to run (the time a check took and ended, this
checkout's and the test's folders) is replaced before comparing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from support import REPO, cli

import attn_doctor
from attn_doctor.report.env_vars import RELEVANT_NAMES, RELEVANT_PREFIXES

GOLDEN = REPO / "tests" / "golden"
PACKAGE = str(Path(attn_doctor.__file__).parent)  # in the checkout, or in site-packages (a wheel)
UPDATE = os.environ.get("ATTN_DOCTOR_UPDATE_GOLDEN") == "1"

AFFECTED = ["--env-file", "tests/fixtures/fleet/h100-xformers-mismatch.json", "--no-scan"]
HEALTHY = ["--env-file", "tests/fixtures/healthy/h100-current.json", "--no-scan"]
INPUTS = "tests/fixtures/golden"
# a requirements file that leaves the GPU, driver and nvcc unknown; a config that ignores a finding
UNKNOWN = ["-r", f"{INPUTS}/requirements.txt", "--python", "3.11", "--platform", "linux", "--no-scan"]
# a requirement without a version: its facts line shows "?"
UNPINNED = [
    "-r",
    f"{INPUTS}/unpinned-requirements.txt",
    "--python",
    "3.11",
    "--platform",
    "linux",
    "--no-scan",
]
IGNORED = [*AFFECTED, "--config", f"{INPUTS}/pyproject.toml", "--feature", "flash_attention_2"]
PROBLEM = [*AFFECTED, "--rules", f"{INPUTS}/broken-rule.toml"]  # a rule file with three broken fields
DEVICE = ["--env-file", "tests/fixtures/healthy/h100-device.json"]  # the H100 of `device`: no FA2 wheel
TWO_NODES = ["tests/fixtures/healthy/h100-current.json", "tests/fixtures/fleet/h100-xformers-mismatch.json"]
WHEEL = ["wheel", "flash-attn", "xformers", "-r", f"{INPUTS}/requirements.txt", "--python", "3.11"]
MACHINE_FORMATS = ["json", "markdown", "sarif", "junit", "github", "gitlab", "npd", "prometheus", "verdict"]

CASES: dict[str, list[str]] = {
    "check-affected.txt": ["check", *AFFECTED],
    "check-affected-verbose.txt": ["check", "-v", *AFFECTED],
    "check-healthy.txt": ["check", *HEALTHY],
    "check-unknown.txt": ["check", *UNKNOWN],
    "check-unknown-verbose.txt": ["check", "-v", *UNKNOWN],
    "check-ignored.txt": ["check", *IGNORED],
    "check-unpinned-verbose.txt": ["check", "-v", *UNPINNED],
    **{f"check-affected.{f}": ["check", *AFFECTED, "--format", f] for f in MACHINE_FORMATS},
    **{f"check-unknown.{f}": ["check", *UNKNOWN, "--format", f] for f in MACHINE_FORMATS},
    **{f"check-ignored.{f}": ["check", *IGNORED, "--format", f] for f in ("json", "junit", "sarif")},
    **{
        f"check-problem.{f}": ["check", *PROBLEM, "--format", f] for f in ("json", "junit", "sarif", "github")
    },
    "check-problem.txt": ["check", *PROBLEM],
    "check-healthy.verdict": ["check", *HEALTHY, "--format", "verdict"],
    "report-affected.md": ["report", *AFFECTED, "--repro-json", f"{INPUTS}/repro.json"],
    "report-unknown.md": ["report", *UNKNOWN],
    "wheel-device.txt": ["wheel", "flash-attn", *DEVICE],
    "wheel-requirements.txt": [*WHEEL, "--platform", "linux"],
    "wheel-requirements.json": [*WHEEL, "--platform", "linux", "--format", "json"],
    "wheel-requirements.requirements": [*WHEEL, "--platform", "linux", "--format", "requirements"],
    "merge-two.txt": ["merge", *TWO_NODES, "--no-scan"],
    "merge-two.json": ["merge", *TWO_NODES, "--no-scan", "--format", "json"],
    "fix-affected.txt": ["fix", *AFFECTED],
    "fix-affected-verbose.txt": ["fix", "-v", *AFFECTED],
    "fix-affected.json": ["fix", *AFFECTED, "--format", "json"],
    "fix-unknown.txt": ["fix", *UNKNOWN],
    "explain-seed_a.txt": ["explain", "tests/logs/seed_a.log", "--no-scan"],
    "explain-seed_c-verbose.txt": ["explain", "-v", "tests/logs/seed_c.log", "--no-scan"],
    "explain-seed_e.json": ["explain", "tests/logs/seed_e.log", "--no-scan", "--format", "json"],
    "explain-flex-gqa.txt": ["explain", f"{INPUTS}/flex-gqa.log", "--no-scan"],
    "explain-flex-gqa.json": ["explain", f"{INPUTS}/flex-gqa.log", "--no-scan", "--format", "json"],
    "explain-fa2-not-installed.txt": ["explain", f"{INPUTS}/fa2-not-installed.log", "--no-scan"],
    # a generic CUDA message on a stack three rules fit: shown as causes, not folded away
    "explain-no-kernel-image.txt": [
        "explain",
        f"{INPUTS}/no-kernel-image.log",
        *("--pin", "flash-attn==2.7.4", "--pin", "torch==2.6.0", "--gpu", "B200", "--no-scan"),
    ],
    "explain-attn-implementation-typo.json": [
        "explain",
        f"{INPUTS}/attn-implementation-typo.log",
        "--no-scan",
        "--format",
        "json",
    ],
    "db-info.txt": ["db", "info"],
    "db-info.json": ["db", "info", "--format", "json"],
}

_VARYING = [
    (re.compile(r"(attn_doctor_check_(?:duration|timestamp)_seconds) [0-9.e+-]+"), r"\1 <number>"),
    (re.compile(r'("(?:duration_s|finished_at|elapsed_s)": )[^,\n}]+'), r"\1<varies>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
]


def normalised(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<tmp>").replace(PACKAGE, "<package>").replace(str(REPO), "<repo>")
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return text


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_report_is_the_golden_one(name: str, monkeypatch: pytest.MonkeyPatch):
    # a folder whose name has the same length on every run (pytest's tmp_path is longer under
    # pytest-xdist), since reports wrap lines that hold it before it is normalised
    tmp_path = Path(tempfile.mkdtemp(prefix="golden", dir="/tmp"))
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "100")
    for variable in list(os.environ):  # `report` lists these: the same ones on every machine
        if variable in RELEVANT_NAMES or variable.startswith(RELEVANT_PREFIXES):
            monkeypatch.delenv(variable)
    monkeypatch.setenv("ATTN_DOCTOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)  # withheld, name and all
    result = cli(*CASES[name])
    got = normalised(f"exit code {result.exit_code}\n{result.stdout}--- stderr\n{result.stderr}", tmp_path)
    golden = GOLDEN / name
    if UPDATE:
        golden.write_text(got)
    assert golden.exists(), f"no {golden.relative_to(REPO)}: ATTN_DOCTOR_UPDATE_GOLDEN=1 writes it"
    shutil.rmtree(tmp_path)
    assert got == golden.read_text(), f"{name} changed: read the diff, then ATTN_DOCTOR_UPDATE_GOLDEN=1"


def test_every_golden_file_has_its_case():
    """A case removed leaves no file behind that nothing compares."""
    assert sorted(path.name for path in GOLDEN.iterdir()) == sorted(CASES)
