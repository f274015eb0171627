"""One planner behind every fix (issue 27): `fix`'s pip commands come from the wheel planners, a
torch that cannot run on the target's GPUs moves to a variant that can, and no plan ever breaks a
pin between two packages (torch's triton). The real CLI and release facts, declared targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from attn_doctor.planner.pins import exact_pins
from attn_doctor.releases.facts import snapshot
from tests.support import cli

RELEASES = "https://github.com/Dao-AILab/flash-attention/releases/download"
CU128 = "https://download.pytorch.org/whl/cu128"


def fix(tmp_path: Path, pins: str, *args: str) -> tuple[int, dict]:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(pins)
    result = cli(
        "fix", "-r", requirements, "--python", "3.11", "--platform", "linux", *args, "--format", "json"
    )
    return result.exit_code, json.loads(result.stdout)


def test_fix_with_flash_attn_2_6_3_on_torch_2_6_cu124_installs_the_wheel_by_its_url(tmp_path: Path):
    """flash-attn 2.6.3 has no wheel for torch 2.6 (pip would build it): the plan's release is
    installed from its asset URL, the one `wheel` computes, not by a bare pin pip would build."""
    code, plan = fix(
        tmp_path, "torch==2.6.0+cu124\nflash-attn==2.6.3\n", "--gpu", "H100", "--fail-on", "warning"
    )
    (change,) = plan["changes"]
    assert code == 0 and change["package"] == "flash-attn"
    name = f"flash_attn-{change['proposed']}+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    assert plan["pip_commands"] == [f"pip install '{RELEASES}/v{change['proposed']}/{name}'"]


def test_fix_below_fail_on_says_how_to_plan_it(tmp_path: Path):
    (tmp_path / "r.txt").write_text("torch==2.6.0+cu124\nflash-attn==2.6.3\n")
    result = cli("fix", "-r", tmp_path / "r.txt", "--python", "3.11", "--gpu", "H100")
    assert result.exit_code == 0
    below = "(1 finding below it: --fail-on warning plans it)."
    assert f"Nothing to fix: no finding at or above --fail-on error {below}" in result.stdout


def test_fix_torch_2_6_cu126_on_a_b200_moves_torch_to_a_cuda_12_8_build_from_its_index(tmp_path: Path):
    """Blackwell needs CUDA 12.8+: torch 2.7.1 from the cu128 index, with the triton it pins
    (3.3.1), never triton 3.3.0 beside torch 2.6.0 (which pins 3.2.0)."""
    code, plan = fix(tmp_path, "torch==2.6.0+cu126\ntriton==3.2.0\n", "--gpu", "B200")
    changes = {c["package"]: c for c in plan["changes"]}
    assert code == 0 and plan["failing_after"] == []
    assert changes["torch"]["proposed"] == "2.7.1+cu128" and changes["torch"]["build"] == "CUDA 12.8"
    assert changes["triton"]["proposed"] == "3.3.1"
    assert plan["pip_commands"] == [f"pip install 'torch==2.7.1' 'triton==3.3.1' --index-url {CU128}"]


def test_fix_torch_alone_lets_its_triton_follow(tmp_path: Path):
    """With only torch stated, the triton it implies follows it: one package to change."""
    code, plan = fix(tmp_path, "torch==2.6.0+cu126\n", "--gpu", "B200")
    assert code == 0 and [c["requirement"] for c in plan["changes"]] == ["torch==2.7.1+cu128"]
    assert plan["pip_commands"] == [f"pip install 'torch==2.7.1' --index-url {CU128}"]


TORCHES = (
    "2.4.1+cu121",
    "2.5.1+cu124",
    "2.6.0+cu124",
    "2.6.0+cu126",
    "2.7.0+cu126",
    "2.7.1+cu128",
    "2.8.0+cu128",
)
GPUS = ("T4", "A100", "H100", "B200", "RTX 5090")


@pytest.mark.parametrize("torch", TORCHES)
def test_no_plan_breaks_a_pin_over_many_targets(tmp_path: Path, torch: str):
    """For every torch x GPU x (triton stated at torch's pin, or at another release): the plan
    keeps each exact pin between its packages, and torch moves only through its own index."""
    public = torch.split("+")[0]
    pinned = exact_pins_of_torch(public)
    other = "3.3.0" if pinned != "3.3.0" else "3.2.0"
    for gpu in GPUS:
        for triton in (pinned, other):
            code, plan = fix(tmp_path, f"torch=={torch}\ntriton=={triton}\n", "--gpu", gpu)
            assert code in (0, 1), (torch, gpu, triton)
            after = {c["package"]: c["proposed"] for c in plan["changes"]}
            torch_after = after.get("torch", torch).split("+")[0]
            triton_after = after.get("triton", triton)
            if "torch" in after or "triton" in after:  # what the plan moves must hold together
                assert exact_pins_of_torch(torch_after) in (None, triton_after), (torch, gpu, triton, after)
            for command in plan["pip_commands"]:
                if "'torch==" in command:
                    assert "--index-url https://download.pytorch.org/whl/cu" in command, command
            for change in plan["changes"]:
                Requirement(change["requirement"])  # each a valid requirement


def exact_pins_of_torch(version: str) -> str | None:
    from attn_doctor.facts.model import Environment, Package

    env = Environment(packages={"triton": Package("triton", "0", "triton", "test")}, platform="linux")
    env.machine = "x86_64"
    return exact_pins(env, snapshot(), "torch", version).get("triton")
