"""Whole-cluster check: local ranks over gloo's TCP store, started as srun or torchrun start them.

Four ranks: two alike, one with another torch/flash-attn (fake dist-info, and a flash_attn whose
import fails as a wheel built for another torch does), one that dies at start.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Site
from tests.support import REPO, cli

UNDEFINED_SYMBOL = "flash-attn-2-5-7-wheel-torch-2-3-undefined-symbol"
SOURCE_BUILD = "fa3-hopper-pipelineparams-build"  # needs source_build: a flash-attention checkout
# the GPU each node's NVML reported: what `probe --json` writes on a GPU node
GPUS = {
    "H100": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "550.54.15"},
    "A100": {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "driver": "535.104.05"},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fake_site(root: Path, torch: str, flash_attn: str) -> Path:
    site = Site(root)
    root.mkdir(parents=True)
    site.install("torch", torch, torch_cuda="12.1")
    site.install("flash-attn", flash_attn)
    return root


def start_rank(
    rank: int, world: int, port: int, args: list[str], extra_env: dict[str, str], cwd: Path | None = None
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "PYTHONPATH": os.pathsep.join([*extra_env.pop("PREPEND", "").split(os.pathsep), str(REPO)]).strip(
            os.pathsep
        ),
        **extra_env,
    }
    command = [sys.executable, "-m", "attn_doctor", "check", "--distributed", *args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
    )


@pytest.fixture
def four_ranks(tmp_path: Path) -> dict[int, tuple[int, str, str, float]]:
    """Rank -> (exit code, stdout, stderr, seconds) of a 4-rank run: rank 2 drifts, rank 3 dies."""
    good = fake_site(tmp_path / "good", "2.4.0+cu121", "2.6.3")
    drifting = fake_site(tmp_path / "drifting", "2.3.0+cu121", "2.5.7")
    broken = tmp_path / "broken-import" / "flash_attn"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "raise ImportError('flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi')\n"
    )
    port, common = free_port(), ["--gpu", "H100", "--distributed-timeout", "10", "--format", "json"]
    started = time.monotonic()
    processes = {
        0: start_rank(0, 4, port, [*common, "--path", str(good)], {}),
        1: start_rank(1, 4, port, [*common, "--path", str(good)], {}),
        2: start_rank(2, 4, port, [*common, "--path", str(drifting)], {"PREPEND": str(broken.parent)}),
    }
    dead = subprocess.run([sys.executable, "-c", "raise SystemExit('rank 3: CUDA init failed')"], check=False)
    assert dead.returncode == 1
    results = {}
    for rank, process in processes.items():
        stdout, stderr = process.communicate(timeout=120)
        results[rank] = (process.returncode, stdout, stderr, time.monotonic() - started)
    return results


def test_four_ranks_show_drift_affected_rank_and_missing_rank(four_ranks) -> None:
    code, stdout, stderr, seconds = four_ranks[0]
    assert code == 2, stderr  # a missing rank makes the picture incomplete: exit 2, as an input problem
    assert seconds < 60
    report = json.loads(stdout)
    labels = [member["label"] for member in report["members"]]
    assert [member["rank"] for member in report["members"]] == [0, 1, 2]
    assert report["missing"] == ["rank 3 (no report within 10 s)"]
    assert "attn-doctor: error: rank 3" in stderr
    drift = {item["fact"]: {v["value"]: v["members"] for v in item["values"]} for item in report["drift"]}
    assert drift["package torch"] == {"2.4.0+cu121": labels[:2], "2.3.0+cu121": [labels[2]]}
    assert drift["package flash-attn"] == {"2.6.3": labels[:2], "2.5.7": [labels[2]]}
    assert drift["import flash_attn"]["not installed"] == labels[:2]
    [failing_import] = [value for value in drift["import flash_attn"] if value.startswith("fails")]
    assert "undefined symbol" in failing_import
    assert "GPU model" not in drift  # every rank targets an H100
    findings = {finding["id"]: finding for finding in report["findings"]}
    assert findings[UNDEFINED_SYMBOL]["affected"] == [labels[2]]
    assert findings[UNDEFINED_SYMBOL]["failing"] is True


def test_the_other_ranks_only_send_their_facts(four_ranks) -> None:
    for rank in (1, 2):
        code, stdout, stderr, _ = four_ranks[rank]
        assert (code, stdout) == (0, ""), stderr


def test_torchrun_two_ranks_agree() -> None:
    port = free_port()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(port),
            "-m",
            "attn_doctor",
            "check",
            "--distributed",
            "--distributed-timeout",
            "30",
            "--pin",
            "transformers==4.44.0",
            "--gpu",
            "sm_90",
            "--feature",
            "flash_attention_2",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    report = json.loads(done.stdout)  # one report: rank 0's
    assert done.returncode == 1, done.stderr  # the Gemma-2 cu_seqlens error, on both ranks
    assert [m["rank"] for m in report["members"]] == [0, 1] and report["missing"] == []
    assert report["drift"] == []
    finding = next(f for f in report["findings"] if f["id"] == "gemma2-fa2-cu-seqlens")
    assert len(finding["affected"]) == 2


def test_a_rank_without_rank_zero_gives_up_with_one_line() -> None:
    process = start_rank(1, 2, free_port(), ["--distributed-timeout", "3"], {})
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert stderr.startswith("attn-doctor: error: --distributed: rank 1: no store at 127.0.0.1:")
    assert "Traceback" not in stderr


def test_distributed_outside_a_launcher_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    result = cli("check", "--distributed")
    assert result.exit_code == 2
    assert "start it with torchrun or srun" in result.stderr


def test_merge_probe_files(tmp_path: Path) -> None:
    files = []
    for name, torch, flash_attn in (("node3", "2.4.0+cu121", "2.6.3"), ("node7", "2.3.0+cu121", "2.5.7")):
        site = fake_site(tmp_path / name, torch, flash_attn)
        probe = cli("probe", "--json", "--path", site)
        path = tmp_path / f"{name}.json"
        path.write_text(probe.stdout)
        files.append(path)
    result = cli("merge", *files, "--format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1, result.stderr  # node7's flash-attn wheel fails against its torch
    drift = {item["fact"] for item in report["drift"]}
    assert {"package torch", "package flash-attn"} <= drift
    finding = next(f for f in report["findings"] if f["id"] == UNDEFINED_SYMBOL)
    assert finding["affected"] == [str(files[1])]


def test_merge_bad_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "node1.json"
    bad.write_text('{"schema": "attn-doctor/environment", "schema_version": 99}')
    result = cli("merge", bad)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "schema_version 99" in result.stderr


def a_project(root: Path) -> Path:
    """A training project that builds nothing from source (no flash-attention checkout)."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text('model = load(attn_implementation="flash_attention_3")\n')
    return root


def node_file(tmp_path: Path, name: str, gpu: str, torch: str, flash_attn: str) -> Path:
    """`probe --json` of a node: its packages probed for real, its GPU as that node's NVML gave it."""
    probe = cli("probe", "--json", "--path", fake_site(tmp_path / name, torch, flash_attn))
    data = json.loads(probe.stdout)
    data["gpus"], data["gpu_source"] = [{**GPUS[gpu], "gfx": None, "capabilities": []}], "nvml"
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_merge_keeps_each_nodes_own_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: merge said the source-build rule was unknown on every node, while each node's own
    check, in the same project, says source_build is not in use."""
    monkeypatch.chdir(a_project(tmp_path / "project"))
    nodes = [
        node_file(tmp_path, "node3", "H100", "2.4.0+cu121", "2.6.3"),
        node_file(tmp_path, "node7", "A100", "2.3.0+cu121", "2.5.7"),
    ]
    own = {}
    for node in nodes:
        report = json.loads(cli("check", "--env-file", node, "--format", "json").stdout)
        own[str(node)] = {f["id"]: f["verdict"] for f in report["findings"]}
        [source_build] = [f for f in report["findings"] if f["id"] == SOURCE_BUILD]
        assert source_build["verdict"] == "not-affected"
        assert "source_build not in use" in source_build["reasons"][0]["text"]
    merged = json.loads(cli("merge", *nodes, "--format", "json").stdout)
    for node, verdicts in own.items():
        affected = {f["id"] for f in merged["findings"] if node in f["affected"]}
        unknown = {f["id"] for f in merged["findings"] if node in f["unknown"]}
        assert affected == {rule for rule, verdict in verdicts.items() if verdict == "affected"}
        assert unknown == {rule for rule, verdict in verdicts.items() if verdict == "unknown"}
    assert SOURCE_BUILD not in {f["id"] for f in merged["findings"]}
    unscanned = json.loads(cli("merge", *nodes, "--no-scan", "--format", "json").stdout)
    [unknown] = [f for f in unscanned["findings"] if f["id"] == SOURCE_BUILD]
    assert unknown["unknown"] == [str(node) for node in nodes]  # no scan: whether it builds is unknown


def test_distributed_ranks_keep_their_source_build_verdict(tmp_path: Path) -> None:
    """Each rank's check scans the project it runs in; rank 0 merges what the ranks sent."""
    root = a_project(tmp_path / "project")
    port, site = free_port(), fake_site(tmp_path / "site", "2.4.0+cu121", "2.6.3")
    args = ["--gpu", "H100", "--distributed-timeout", "30", "--format", "json", "--path", str(site)]
    ranks = [start_rank(rank, 2, port, args, {}, cwd=root) for rank in (0, 1)]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    report = json.loads(outputs[0][0])
    assert SOURCE_BUILD not in {finding["id"] for finding in report["findings"]}
    assert [member["environment"]["features"]["searched"] for member in report["members"]] == [True, True]
