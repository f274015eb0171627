"""``--driver`` and ``--nvcc`` (or ``driver`` and ``nvcc`` in ``[tool.attn-doctor]``): a declared
target's driver and CUDA toolkit, which no pin file states, given once instead of left unknown in
every CI run (issue 37, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cli

DRIVER_RULE = "cuda-driver-too-old-for-torch"  # torch's CUDA build against the driver's family
NVCC_RULE = "fa3-build-requires-nvcc-12-3"  # an FA3 source build against the toolkit


def check(tmp_path: Path, *more: str) -> dict:
    pins = tmp_path / "requirements.txt"
    pins.write_text("torch==2.7.1+cu128\n")
    result = cli("check", "-r", pins, "--no-scan", "--format", "json", *more)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def verdicts(document: dict) -> dict[str, str]:
    return {finding["id"]: finding["verdict"] for finding in document["findings"]}


def test_without_them_the_driver_and_toolkit_are_unknown(tmp_path: Path):
    document = check(tmp_path, "--gpu", "H100")
    assert verdicts(document)[DRIVER_RULE] == "unknown"
    assert document["environment"]["nvcc"] is None


@pytest.mark.parametrize(
    ("driver", "verdict"),
    [("470.256.02", "affected"), ("535.183.01", "not-affected"), ("570.86.15", "not-affected")],
)
def test_a_stated_driver_decides_the_driver_rule(tmp_path: Path, driver: str, verdict: str):
    """torch 2.7.1+cu128 needs a driver of the CUDA 12 family (525.60.13 or later): 535 and 570
    are, 470 (CUDA 11.4) is not."""
    document = check(tmp_path, "--gpu", "H100", "--driver", driver)
    assert {gpu["driver"] for gpu in document["environment"]["gpus"]} == {driver}
    assert document["environment"]["origins"]["driver"] == "--driver"
    assert verdicts(document)[DRIVER_RULE] == verdict


def test_a_stated_toolkit_and_none(tmp_path: Path):
    document = check(tmp_path, "--nvcc", "12.8")
    assert document["environment"]["nvcc"] == "12.8"
    assert document["environment"]["origins"]["nvcc"] == "--nvcc"
    none = check(tmp_path, "--nvcc", "none")
    assert none["environment"]["nvcc"] is None
    assert none["environment"]["origins"]["nvcc"] == "the target (--nvcc none)"
    assert verdicts(none)[NVCC_RULE] == "not-affected"


def test_the_pyproject_states_them_and_the_options_win(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.attn-doctor]\ngpus = ["H100"]\ndriver = "470.256.02"\nnvcc = "12.4"\n'
    )
    config = ("--config", str(tmp_path / "pyproject.toml"))
    document = check(tmp_path, *config)
    assert verdicts(document)[DRIVER_RULE] == "affected"
    assert document["environment"]["nvcc"] == "12.4"
    assert document["environment"]["origins"]["nvcc"].endswith("[tool.attn-doctor] nvcc")
    assert verdicts(check(tmp_path, *config, "--driver", "570.86.15"))[DRIVER_RULE] == "not-affected"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--gpu", "H100", "--driver", "latest"), "--driver 'latest': expected an NVIDIA driver version"),
        (("--driver", "570.86.15"), "--driver 570.86.15: is the driver of the target's GPUs: give --gpu too"),
        (("--nvcc", "twelve"), "--nvcc 'twelve': expected a CUDA toolkit version such as 12.8, or none"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], words: str):
    pins = tmp_path / "requirements.txt"
    pins.write_text("torch==2.7.1+cu128\n")
    result = cli("check", "-r", pins, "--no-scan", *args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
