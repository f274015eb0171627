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
    env.machine, env.python = "x86_64", "3.11"  # the fix runs' target: torch pins triton by markers on both
    return exact_pins(env, snapshot(), "torch", version).get("triton")


def test_every_planned_package_has_a_planner_and_each_rule_plan_names_one():
    from attn_doctor.engine.loader import database_path, load_rules
    from attn_doctor.planner.interface import PLANNED
    from attn_doctor.planner.registry import PLANNERS

    assert tuple(PLANNERS) == PLANNED
    planned = {rule.id: rule.fix_plan for rule in load_rules([database_path()]).rules if rule.fix_plan}
    assert set(planned.values()) <= set(PLANNED)
    assert planned["flash-attn-no-prebuilt-wheel-for-torch"] == "flash-attn"
    assert planned["gpu-blackwell-needs-cuda-12-8"] == "torch"


def test_check_names_the_wheel_no_line_above(tmp_path: Path):
    """torch 2.9.1+cu130 with flash-attn 2.8.3 on an RTX 5090 (issue 27's example): the finding's
    fix names each way out complete, the same plan `wheel flash-attn` prints."""
    (tmp_path / "r.txt").write_text("torch==2.9.1+cu130\nflash-attn==2.8.3\n")
    target = ("-r", tmp_path / "r.txt", "--python", "3.12", "--gpu", "RTX 5090")
    report = json.loads(cli("check", *target, "--format", "json").stdout)
    (finding,) = [f for f in report["findings"] if f["id"] == "flash-attn-no-prebuilt-wheel-for-torch"]
    (plan,) = finding["fix"]["install"]
    wheel = json.loads(cli("wheel", "flash-attn", *target, "--format", "json").stdout)
    assert plan == wheel["plans"][0] and plan["command"] is None
    assert [way["commands"][0].split(" --")[0] for way in plan["ways_out"]] == [
        "pip install torch==2.8.0",
        "pip install ninja && MAX_JOBS=4 pip install flash-attn==2.8.3.post1",
    ]
    text = cli("check", *target).stdout
    assert "    install: no flash-attn command fits: no flash-attn release has a wheel for torch 2.9" in text
    assert "        pip install torch==2.8.0 --index-url https://download.pytorch.org/whl/cu129" in text


UNDEFINED_SYMBOL = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 10, in <module>
    import flash_attn_2_cuda as flash_attn_cuda
ImportError: /usr/local/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: \
undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs
"""


def test_explain_names_the_wheel_for_an_undefined_symbol(tmp_path: Path):
    """The log proves Python 3.10 and Linux; with the torch the user names, the fix line is the
    wheel's URL; without it, the plan says which fact is missing rather than guess."""
    log = tmp_path / "log.txt"
    log.write_text(UNDEFINED_SYMBOL)
    explained = json.loads(cli("explain", log, "--format", "json").stdout)
    first = explained["causes"][0]
    assert first["id"] == "flash-attn-binary-cxx11-abi-mismatch"
    assert first["fix"]["install"][0]["why"].startswith("torch's version is not known")
    given = json.loads(
        cli("explain", log, "--pin", "torch==2.7.1+cu126", "--gpu", "H100", "--format", "json").stdout
    )
    (plan,) = given["causes"][0]["fix"]["install"]
    name = "flash_attn-2.8.3.post1+cu12torch2.7cxx11abiTRUE-cp310-cp310-linux_x86_64.whl"
    assert plan["command"] == f"pip install '{RELEASES}/v2.8.3.post1/{name}'"


def test_explain_names_the_wheel_for_a_missing_flash_attn(tmp_path: Path):
    """ "No module named 'flash_attn'" with the stack given: the wheel that fits; the log alone
    states no Python, and the plan says so instead of assuming one."""
    log = tmp_path / "log.txt"
    log.write_text(
        "  File \"train.py\", line 3, in <module>\nModuleNotFoundError: No module named 'flash_attn'\n"
    )
    stack = ("--pin", "torch==2.6.0+cu124", "--gpu", "H100")
    unknown = json.loads(cli("explain", log, *stack, "--format", "json").stdout)["causes"][0]
    assert unknown["id"] == "usage-flash-attn-not-installed"
    assert unknown["fix"]["install"][0]["why"] == "the target's Python is not known (--python 3.11)"
    known = json.loads(cli("explain", log, *stack, "--python", "3.11", "--format", "json").stdout)["causes"][
        0
    ]
    name = "flash_attn-2.8.3.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    assert known["fix"]["install"][0]["url"] == f"{RELEASES}/v2.8.3.post1/{name}"
