"""deploy/slurm: the Prolog drains a node for node-level findings only, and the TaskProlog writes
the job's findings as `print` lines. Both run as the shell scripts they are, with the real CLI on
env files (tests/fixtures/deploy/README.md) and a fake `scontrol` on PATH that records its
arguments, one per line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attn_doctor._compat import tomllib

REPO = Path(__file__).resolve().parents[1]
PROLOG = REPO / "deploy" / "slurm" / "attn-doctor-prolog.sh"
TASK_PROLOG = REPO / "deploy" / "slurm" / "attn-doctor-taskprolog.sh"
FIXTURES = REPO / "tests" / "fixtures"
HEALTHY = FIXTURES / "healthy" / "h100-current.json"
OLD_DRIVER = FIXTURES / "deploy" / "h100-driver-550-torch-cu132.json"
BLACKWELL = FIXTURES / "deploy" / "b200-torch-2.6-cu124.json"
PYTHON_ONLY = FIXTURES / "deploy" / "h100-xformers-built-for-other-torch.json"
DOCTOR = Path(sys.executable).parent / "attn-doctor"

FAKE_SCONTROL = """#!/bin/sh
for word in "$@"; do printf '%s\\n' "$word"; done >>"$SCONTROL_CALLS"
printf -- '--\\n' >>"$SCONTROL_CALLS"
"""


@pytest.fixture
def node(tmp_path: Path) -> dict[str, str]:
    """A compute node's environment: a fake scontrol first on PATH, the log in a file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    assert DOCTOR.is_file(), f"the CLI under test is {DOCTOR}"
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "SCONTROL_CALLS": str(tmp_path / "scontrol.calls"),
        "ATTN_DOCTOR": str(DOCTOR),
        "ATTN_DOCTOR_CONF": str(tmp_path / "no-such.conf"),
        "ATTN_DOCTOR_LOG": str(tmp_path / "prolog.log"),
        "ATTN_DOCTOR_CACHE": os.environ["ATTN_DOCTOR_CACHE"],
        "SLURMD_NODENAME": "gpu017",
        "SLURM_JOB_ID": "4242",
    }


def run_prolog(env: dict[str, str], **more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(PROLOG)], env={**env, **more}, capture_output=True, text=True, timeout=120
    )


def scontrol_calls(env: dict[str, str]) -> list[list[str]]:
    calls = Path(env["SCONTROL_CALLS"])
    if not calls.exists():
        return []
    return [call.strip("\n").split("\n") for call in calls.read_text().split("--\n") if call.strip()]


def log_lines(env: dict[str, str]) -> list[str]:
    log = Path(env["ATTN_DOCTOR_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def check_json(env_file: Path) -> dict:
    done = subprocess.run(
        [str(DOCTOR), "check", "--no-scan", "--format", "json", "--env-file", str(env_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def affected_ids(env_file: Path) -> set[str]:
    return {f["id"] for f in check_json(env_file)["findings"] if f["verdict"] == "affected"}


def test_the_prolog_drains_a_node_whose_driver_is_too_old_for_the_stacks_cuda(node: dict[str, str]) -> None:
    done = run_prolog(node, ATTN_DOCTOR_ENV_FILE=str(OLD_DRIVER))

    assert done.returncode == 1, done.stderr  # SLURM requeues the job off this node
    reason = (
        "reason=attn-doctor: cuda-driver-too-old-for-torch: NVIDIA driver 550.144.03 is older than the"
        " minimum for CUDA 13.x (580.65.06; torch is built with CUDA 13.2)"
    )
    assert scontrol_calls(node) == [["update", "nodename=gpu017", "state=drain", reason]]
    assert any(line.endswith(f"drained gpu017: {reason.removeprefix('reason=')}") for line in log_lines(node))


def test_the_prolog_drains_a_node_whose_gpu_the_stacks_binaries_lack(node: dict[str, str]) -> None:
    done = run_prolog(node, ATTN_DOCTOR_ENV_FILE=str(BLACKWELL))

    assert done.returncode == 1, done.stderr
    [call] = scontrol_calls(node)
    assert call[:3] == ["update", "nodename=gpu017", "state=drain"]
    assert call[3] == (
        "reason=attn-doctor: torch-wheel-lacks-gpu-arch: torch 2.6.0+cu124 has code for sm_50 sm_60 sm_70"
        " sm_75 sm_80 sm_86 sm_90, not sm_100 (NVIDIA B200) (+2 more)"
    )
    logged = "\n".join(log_lines(node))
    for rule in (
        "torch-wheel-lacks-gpu-arch",
        "gpu-blackwell-needs-cuda-12-8",
        "triton-bundled-ptxas-lacks-gpu-arch",
    ):
        assert f"job 4242 on gpu017: {rule}: " in logged


def test_the_prolog_does_not_drain_for_a_python_stack_finding(node: dict[str, str]) -> None:
    assert affected_ids(PYTHON_ONLY) == {"xformers-built-for-another-torch"}  # a real, failing finding

    done = run_prolog(node, ATTN_DOCTOR_ENV_FILE=str(PYTHON_ONLY))

    assert done.returncode == 0, done.stderr
    assert scontrol_calls(node) == []


def test_the_prolog_does_not_drain_a_healthy_node(node: dict[str, str]) -> None:
    assert affected_ids(HEALTHY) == set()

    done = run_prolog(node, ATTN_DOCTOR_ENV_FILE=str(HEALTHY))

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert scontrol_calls(node) == []
    assert log_lines(node) == []


@pytest.mark.parametrize(
    "content",
    [
        '{"schema": "attn-doctor/environment", "schema_version": 99}',
        "{not json",
    ],
)
def test_a_broken_input_is_logged_and_never_drains(
    node: dict[str, str], tmp_path: Path, content: str
) -> None:
    broken = tmp_path / "node7.json"
    broken.write_text(content)

    done = run_prolog(node, ATTN_DOCTOR_ENV_FILE=str(broken))

    assert done.returncode == 0, done.stderr  # the tool's failure is not the node's
    assert scontrol_calls(node) == []
    [line] = log_lines(node)
    assert re.search(r"job 4242 on gpu017: attn-doctor check failed \(exit 2\): .*node7\.json", line), line


def test_a_missing_attn_doctor_is_logged_and_never_drains(node: dict[str, str], tmp_path: Path) -> None:
    done = run_prolog(
        node, ATTN_DOCTOR=str(tmp_path / "nowhere" / "attn-doctor"), ATTN_DOCTOR_ENV_FILE=str(OLD_DRIVER)
    )

    assert done.returncode == 0
    assert scontrol_calls(node) == []
    assert log_lines(node)[0].endswith("attn-doctor is not an executable: not checked")


def test_a_failing_scontrol_still_fails_the_prolog(node: dict[str, str], tmp_path: Path) -> None:
    """SLURM then drains the node itself (reason "Prolog error"): the job must not run there."""
    done = run_prolog(node, ATTN_DOCTOR_ENV_FILE=str(OLD_DRIVER), SCONTROL="false")

    assert done.returncode == 1
    assert "scontrol could not drain gpu017" in log_lines(node)[-1]


def test_the_prolog_reads_its_settings_file(node: dict[str, str], tmp_path: Path) -> None:
    conf = tmp_path / "attn-doctor.conf"
    conf.write_text(f"ATTN_DOCTOR_ENV_FILE={OLD_DRIVER}\n")

    done = run_prolog(node, ATTN_DOCTOR_CONF=str(conf))

    assert done.returncode == 1
    assert len(scontrol_calls(node)) == 1


def _node_rules_in_prolog() -> list[str]:
    block = re.search(r'NODE_RULES=\$\{NODE_RULES:-"([^"]*)"\}', PROLOG.read_text())
    assert block, "the prolog's default NODE_RULES"
    return block.group(1).split()


_DRIVER_OR_BINARY_KEYS = {
    "driver",
    "driver_below_cuda_minimum",
    "torch_variant_lacks_gpu",
    "prebuilt_wheel_lacks_gpu",
    "bundled_ptxas_lacks_gpu",
}


def _node_level(affects: dict) -> bool:
    """A rule decided by the node's driver, or by the GPU against the build of the stack: a GPU
    condition with a CUDA/ROCm build condition, no feature, and no package range (a version range
    is a bug of those releases on that GPU: the job's stack, not the node)."""
    if _DRIVER_OR_BINARY_KEYS & affects.keys():
        return True
    gpu = {"compute_capability", "gfx"} & affects.keys()
    build = {"cuda", "rocm"} & affects.keys()
    any_version = all(spec == "" for spec in affects.get("packages", {}).values())
    return bool(gpu and build and any_version and not affects.get("features"))


def test_node_rules_are_the_rules_decided_by_the_driver_or_the_gpu_against_the_build() -> None:
    rules = {path.stem: tomllib.loads(path.read_text()) for path in (REPO / "rules").glob("*.toml")}
    derived = sorted(rule_id for rule_id, rule in rules.items() if _node_level(rule.get("affects", {})))

    assert sorted(_node_rules_in_prolog()) == derived
    assert "cuda-driver-too-old-for-torch" in derived and "xformers-built-for-another-torch" not in derived


def run_task_prolog(env: dict[str, str], **more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(TASK_PROLOG)], env={**env, **more}, capture_output=True, text=True, timeout=120
    )


def assert_only_print_lines(stdout: str) -> list[str]:
    """slurmstepd reads `export`/`unset` lines of a TaskProlog as environment changes: every line
    must be a `print` line."""
    lines = stdout.splitlines()
    assert all(line.startswith("print attn-doctor: ") for line in lines), stdout
    return [line.removeprefix("print ") for line in lines]


def test_the_task_prolog_prints_the_jobs_findings(node: dict[str, str]) -> None:
    done = run_task_prolog(node, ATTN_DOCTOR_ENV_FILE=str(PYTHON_ONLY), SLURM_LOCALID="0")

    assert done.returncode == 0
    lines = assert_only_print_lines(done.stdout)
    assert lines[0] == f"attn-doctor: 1 known problem(s) in {PYTHON_ONLY}:"
    assert lines[1].startswith("attn-doctor: xformers-built-for-another-torch [error]: xformers wheels")
    assert lines[2].startswith(
        "attn-doctor:   found: pip cannot install these together: xformers 0.0.28.post3"
    )
    assert lines[3].startswith("attn-doctor:   fix: ")
    assert lines[-1] == "attn-doctor: more: attn-doctor rules show ID"


def test_the_task_prolog_prints_node_level_findings_too(node: dict[str, str]) -> None:
    done = run_task_prolog(node, ATTN_DOCTOR_ENV_FILE=str(OLD_DRIVER))

    lines = assert_only_print_lines(done.stdout)
    assert (
        "attn-doctor:   found: NVIDIA driver 550.144.03 is older than the minimum for CUDA 13.x"
        in "\n".join(lines)
    )


def test_the_task_prolog_checks_the_jobs_venv(node: dict[str, str], site, tmp_path: Path) -> None:
    site.install("torch", "2.6.0+cu124", torch_cuda="12.4")
    site.install("xformers", "0.0.28.post3")
    venv = tmp_path / "job-venv"  # a venv whose site-packages is the fake one
    (venv / "lib" / "python3.11").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages").symlink_to(site.path)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")

    done = run_task_prolog(node, VIRTUAL_ENV=str(venv))

    lines = assert_only_print_lines(done.stdout)
    assert lines[0] == f"attn-doctor: 1 known problem(s) in {venv}:", done.stdout + done.stderr
    assert lines[1].startswith("attn-doctor: xformers-built-for-another-torch [error]")


def test_the_task_prolog_checks_the_site_packages_of_the_jobs_python3(node: dict[str, str], site) -> None:
    """No venv: the job's python3 names its site-packages (here a stand-in python3 first on PATH)."""
    site.install("torch", "2.6.0+cu124", torch_cuda="12.4")
    site.install("xformers", "0.0.28.post3")
    python3 = Path(node["PATH"].split(os.pathsep)[0]) / "python3"
    python3.write_text(f"#!/bin/sh\necho {site.path}\n")
    python3.chmod(0o755)

    done = run_task_prolog(node)

    lines = assert_only_print_lines(done.stdout)
    assert lines[0] == f"attn-doctor: 1 known problem(s) in {site.path}:", done.stdout + done.stderr


def test_the_task_prolog_is_silent_on_a_healthy_stack_and_on_other_tasks(node: dict[str, str]) -> None:
    assert run_task_prolog(node, ATTN_DOCTOR_ENV_FILE=str(HEALTHY)).stdout == ""
    other_task = run_task_prolog(node, ATTN_DOCTOR_ENV_FILE=str(PYTHON_ONLY), SLURM_LOCALID="3")
    assert (other_task.returncode, other_task.stdout) == (0, "")
    every_task = run_task_prolog(
        node, ATTN_DOCTOR_ENV_FILE=str(PYTHON_ONLY), SLURM_LOCALID="3", ATTN_DOCTOR_TASKS="all"
    )
    assert "xformers-built-for-another-torch" in every_task.stdout


def test_the_task_prolog_says_in_one_line_when_it_cannot_check(node: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "node7.json"
    broken.write_text("{not json")

    done = run_task_prolog(node, ATTN_DOCTOR_ENV_FILE=str(broken))

    assert done.returncode == 0  # a failing TaskProlog would cancel the task
    [line] = assert_only_print_lines(done.stdout)
    assert re.fullmatch(r"attn-doctor: not checked \(exit 2\): .*node7\.json.*", line), line


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_scripts_are_shellcheck_clean() -> None:
    scripts = [*sorted((REPO / "deploy").rglob("*.sh"))]
    done = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
