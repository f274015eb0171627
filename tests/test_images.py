"""Container images and Dockerfiles as targets (attn_doctor/facts/images.py, sources/dockerfile.py):
what an NGC or official PyTorch image ships, with a Dockerfile's pinned installs laid over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cli
from test_bad_input import assert_one_line_error

NGC = "nvcr.io/nvidia/pytorch:25.12-py3"


def environment(*args: str | Path) -> dict:
    result = cli("check", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_an_ngc_image_by_nvidias_release_notes() -> None:
    env = environment("--image", NGC)["environment"]
    assert env["packages"]["torch"]["version"] == "2.10.0a0+b4e4ee81d3"
    assert env["torch_build"] == {"cuda": "13.1", "hip": None}
    assert "pytorch-release-notes/rel-25-12.html" in env["origins"]["torch_build"]
    assert env["python"] == "3.12"


def test_an_official_pytorch_tag_states_its_torch_and_cuda() -> None:
    env = environment("--image", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime")["environment"]
    assert env["packages"]["torch"]["version"] == "2.5.1"
    assert env["torch_build"] == {"cuda": "12.4", "hip": None}


@pytest.mark.parametrize(
    ("image", "needle"),
    [
        ("nvcr.io/nvidia/pytorch:19.01-py3", "the release facts know: 25.02-py3, 25.10-py3, 25.12-py3"),
        ("pytorch/pytorch:2.5.1-cuda11.2-cudnn9-runtime", "newest torch known"),
        ("pytorch/pytorch:latest", "unknown tag 'latest'"),
        ("ubuntu:22.04", "not an image whose contents are known"),
    ],
)
def test_unknown_images_and_tags_are_refused(image: str, needle: str) -> None:
    assert_one_line_error(cli("check", "--image", image), f"--image {image}", needle)


DOCKERFILE = """\
# syntax=docker/dockerfile:1
FROM nvcr.io/nvidia/pytorch:25.12-py3 AS base
RUN pip install --no-cache-dir transformers==4.51.0 \\
    && pip install accelerate

FROM base AS train
RUN uv pip install --system "peft==0.15.0" && python -m pip install transformers==4.52.1

FROM python:3.11-slim AS tools
RUN pip install torch==2.5.1 && conda install -y pytorch-cuda=12.1
"""


@pytest.fixture
def dockerfile(tmp_path: Path) -> Path:
    path = tmp_path / "Dockerfile"
    path.write_text(DOCKERFILE)
    return path


def test_a_dockerfile_lays_its_installs_over_its_from_image(dockerfile: Path) -> None:
    report = environment("--dockerfile", dockerfile, "--stage", "base", "--feature", "flex_attention")
    packages = report["environment"]["packages"]
    assert packages["torch"]["version"] == "2.10.0a0+b4e4ee81d3"
    assert (packages["transformers"]["version"], packages["transformers"]["origin"]) == (
        "4.51.0",
        f"{dockerfile}:3",
    )
    verdicts = {f["id"]: f["verdict"] for f in report["findings"]}
    assert verdicts["transformers-flex-pad-none-key-length"] == "affected"


def test_the_last_stage_by_default_and_a_stage_built_on_another(dockerfile: Path) -> None:
    train = environment("--dockerfile", dockerfile, "--stage", "train")["environment"]["packages"]
    assert train["transformers"]["version"] == "4.52.1"  # the later install wins
    assert train["peft"]["version"] == "0.15.0" and train["torch"]["version"] == "2.10.0a0+b4e4ee81d3"
    tools = environment("--dockerfile", dockerfile)["environment"]  # the last stage
    assert tools["packages"]["torch"]["version"] == "2.5.1" and "transformers" not in tools["packages"]
    assert tools["torch_build"]["cuda"] == "12.1"  # conda install pytorch-cuda=12.1


def test_a_dockerfile_given_as_a_pin_file(dockerfile: Path) -> None:
    packages = environment("-r", dockerfile)["environment"]["packages"]
    assert packages["torch"]["version"] == "2.5.1"


def test_stage_errors(dockerfile: Path) -> None:
    assert_one_line_error(
        cli("check", "--dockerfile", dockerfile, "--stage", "nope"), "--stage nope", "train"
    )
    assert_one_line_error(cli("check", "--stage", "base"), "--stage", "--dockerfile")


def test_sarif_points_at_the_dockerfile_line(dockerfile: Path) -> None:
    result = cli(
        "check",
        "--dockerfile",
        dockerfile,
        "--stage",
        "base",
        "--feature",
        "flex_attention",
        "--format",
        "sarif",
    )
    run = json.loads(result.stdout)["runs"][0]
    rules = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    found = next(
        r for r in run["results"] if rules[r["ruleIndex"]] == "transformers-flex-pad-none-key-length"
    )
    location = found["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("Dockerfile") and location["region"]["startLine"] == 3
