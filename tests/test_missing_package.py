"""Code that cannot run without a package the target does not install is a finding of `check`, not
a green "[✓] flash-attn not installed" (issue 37, item 4: LLaVA trains with
attn_implementation="flash_attention_2" and its pyproject's dependencies do not list flash-attn).
An import under try, if or def is optional (Megatron-LM, text-generation-inference)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cli

RULE = "usage-flash-attn-not-installed"
# LLaVA's llava/train/train_mem.py at c121f04, as the repository has it
LLAVA_TRAIN_MEM = """\
from llava.train.train import train

if __name__ == "__main__":
    train(attn_implementation="flash_attention_2")
"""
# Megatron-LM's megatron/core/utils.py at d98e8a6: flash_attn imported where it is used, if there
MEGATRON_OPTIONAL = """\
def get_flash_attn_version():
    try:
        import flash_attn as fa
    except ImportError:
        return None
    return fa.__version__
"""
OPEN_SORA_IMPORT = "from flash_attn import flash_attn_func\n"


def check(tmp_path: Path, code: str, requirements: str) -> dict:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(code)
    pins = tmp_path / "requirements.txt"
    pins.write_text(requirements)
    result = cli("check", "-r", pins, "--gpu", "A100", "--project", project, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return {finding["id"]: finding for finding in json.loads(result.stdout)["findings"]}


@pytest.mark.parametrize("code", [LLAVA_TRAIN_MEM, OPEN_SORA_IMPORT])
def test_required_and_not_installed_is_affected(tmp_path: Path, code: str):
    finding = check(tmp_path, code, "torch==2.1.2\ntransformers==4.37.2\n")[RULE]
    assert finding["verdict"] == "affected"
    texts = [reason["text"] for reason in finding["reasons"]]
    assert "flash-attn is not installed" in texts
    assert any(text.startswith("flash_attn_required in use") for text in texts), texts


def test_installed_is_not_affected(tmp_path: Path):
    finding = check(tmp_path, LLAVA_TRAIN_MEM, "torch==2.1.2\ntransformers==4.37.2\nflash-attn==2.5.8\n")[
        RULE
    ]
    assert finding["verdict"] == "not-affected"


def test_an_optional_import_is_not_a_requirement(tmp_path: Path):
    finding = check(tmp_path, MEGATRON_OPTIONAL, "torch==2.1.2\n")[RULE]
    assert finding["verdict"] == "unknown"  # applies if the code requires flash_attn
    assert finding["applies_if_used"] == ["flash_attn_required"]


def test_an_image_that_does_not_list_it_leaves_it_unknown(tmp_path: Path):
    """An image's record is an open list: a package it does not name may be there."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(LLAVA_TRAIN_MEM)
    result = cli(
        "check", "--image", "nvcr.io/nvidia/pytorch:25.01-py3", "--project", project, "--format", "json"
    )
    assert result.exit_code in (0, 1), result.stderr
    finding = {f["id"]: f for f in json.loads(result.stdout)["findings"]}[RULE]
    assert finding["verdict"] == "unknown"
