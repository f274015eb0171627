"""`attn-doctor wheel` (issue 27, started): the install command that fits a declared target, read
from the release facts (flash-attn's publish.yml matrix per tag, its wheel names per tag,
xformers' torch pins, torch's CUDA variants). The real CLI, no network."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from tests.support import REPO, cli

RELEASES = "https://github.com/Dao-AILab/flash-attention/releases/download"
SCHEMA = json.loads((REPO / "attn_doctor" / "schemas" / "wheel.schema.json").read_text())


def planned(tmp_path: Path, torch: str, *args: str) -> tuple[int, dict]:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch=={torch}\n")
    result = cli("wheel", *args, "-r", requirements, "--format", "json")
    document = json.loads(result.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return result.exit_code, document


def test_flash_attn_for_torch_2_6_cu124_on_an_h100(tmp_path: Path):
    """The newest release with such a wheel (2.8.3.post1 in the snapshot) for cu12, torch 2.6,
    cp311, and the pre-C++11 ABI torch 2.6's wheels use."""
    code, document = planned(tmp_path, "2.6.0+cu124", "flash-attn", "--python", "3.11", "--gpu", "H100")
    (plan,) = document["plans"]
    name = "flash_attn-2.8.3.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    assert code == 0 and plan["url"] == f"{RELEASES}/v2.8.3.post1/{name}"
    assert plan["command"] == f"pip install '{RELEASES}/v2.8.3.post1/{name}'"


def test_flash_attn_for_torch_2_9_1_cu130_on_an_rtx_5090_says_every_way_out(tmp_path: Path):
    code, document = planned(tmp_path, "2.9.1+cu130", "flash-attn", "--python", "3.12", "--gpu", "RTX 5090")
    (plan,) = document["plans"]
    assert code == 1 and plan["command"] is None
    assert plan["why"].startswith("no flash-attn release has a wheel for torch 2.9, CUDA 13, Python 3.12")
    other_torch, source = plan["ways_out"]
    assert other_torch["commands"][0].startswith("pip install torch==2.8.")
    assert "--index-url https://download.pytorch.org/whl/cu12" in other_torch["commands"][0]
    assert "sm_120" in other_torch["why"]  # that torch's wheels run on the RTX 5090
    assert other_torch["commands"][1].startswith(f"pip install '{RELEASES}/v")
    assert "cp312-cp312-linux_x86_64.whl" in other_torch["commands"][1]
    assert source["commands"] == [
        "pip install ninja && MAX_JOBS=4 pip install flash-attn==2.8.3.post1 --no-build-isolation"
    ]


def test_xformers_for_torch_2_7_0_cu126_is_0_0_30_from_the_cu126_index(tmp_path: Path):
    code, document = planned(tmp_path, "2.7.0+cu126", "xformers", "--python", "3.11")
    (plan,) = document["plans"]
    assert code == 0
    assert (
        plan["command"] == "pip install xformers==0.0.30 --index-url https://download.pytorch.org/whl/cu126"
    )


def test_a_package_without_a_planner_is_one_line_and_exit_2(tmp_path: Path):
    result = cli("wheel", "torch", "--pin", "torch==2.6.0+cu124")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "attn-doctor: error: torch: no wheel planner for it (planned: flash-attn, xformers)"
    ]


def test_wheel_imports_no_torch(tmp_path: Path):
    """The plan comes from the release facts: a target's torch is never imported."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom attn_doctor.cli import app\n"
        "try:\n    app(['wheel', 'flash-attn', '--pin', 'torch==2.6.0+cu124', '--python', '3.11'])\n"
        "except SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in ('torch', 'transformers', 'flash_attn') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "LOADED []" in done.stdout, done.stdout + done.stderr
