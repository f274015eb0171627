"""Container images and Dockerfiles as targets (attn_doctor/facts/images.py, sources/dockerfile.py):
what an NGC or official PyTorch image ships, with a Dockerfile's pinned installs laid over it, and
-r files laid over both."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest
from support import REPO, cli
from test_bad_input import assert_one_line_error

NGC = "nvcr.io/nvidia/pytorch:25.12-py3"
NGC_TABLE = json.loads((REPO / "tools" / "ngc_pytorch_images.json").read_text())["images"]


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


# the table's package facts -> the names rules use (attn_doctor/facts/images.py reads these)
NGC_PACKAGE_FACTS = {
    "torch": "torch",
    "triton": "triton",
    "transformer_engine": "transformer-engine",
    "flash_attn": "flash-attn",
}


@pytest.mark.parametrize("tag", sorted(NGC_TABLE))
def test_every_ngc_tag_of_the_table_is_known_with_its_torch_and_cuda(tag: str) -> None:
    """Each tag of tools/ngc_pytorch_images.json is accepted with its torch and CUDA, every fact it
    records has an https page and the words that state it, and the check cites that page (and the
    copy the words were read in) for each; what the record leaves out is unknown, not the runner's."""
    record = NGC_TABLE[tag]
    facts = {name: fact for name, fact in record.items() if name != "notes"}
    assert {"torch", "cuda"} <= set(facts)
    for name, fact in facts.items():
        assert fact["source"].startswith("https://") and fact.get("via", "https://").startswith("https://")
        assert fact["value"] in urllib.parse.unquote(fact["quote"]), (name, fact["quote"])  # the words say it
    image = f"nvcr.io/nvidia/pytorch:{tag}-py3"
    env = environment("--image", image)["environment"]
    assert env["torch_build"] == {"cuda": ".".join(record["cuda"]["value"].split(".")[:2]), "hip": None}
    origins = {"cuda": env["origins"]["torch_build"]}
    for name, package in NGC_PACKAGE_FACTS.items():
        if name in record:
            assert env["packages"][package]["version"] == record[name]["value"]
            origins[name] = env["packages"][package]["origin"]
        else:
            assert package not in env["packages"]  # the record does not name it
    if "python" in record:
        assert env["python"] == record["python"]["value"]
        origins["python"] = env["origins"]["python"]
    else:
        assert env["python"] is None and "python" not in env["origins"]
    for name, origin in origins.items():
        assert origin.startswith(f"image {image} (") and record[name]["source"] in origin, (name, origin)
        assert record[name].get("via", "") in origin


def test_the_table_of_docs_release_facts_md_is_the_tables() -> None:
    """docs/release-facts.md lists each tag with the torch, CUDA and Python of the table, no more."""
    text = (REPO / "docs" / "release-facts.md").read_text()
    rows = re.findall(r"^\| (\d\d\.\d\d) \| (\S+) \| (\S+) \| (\S+) \|", text, flags=re.MULTILINE)
    columns = ("torch", "cuda", "python")
    expected = {
        tag: tuple(record[name]["value"] if name in record else "unknown" for name in columns)
        for tag, record in NGC_TABLE.items()
    }
    assert {tag: (torch, cuda, python) for tag, torch, cuda, python in rows} == expected


def test_25_02_cites_nvidias_release_notes_and_25_01_is_known() -> None:
    """25.02's torch and CUDA are NVIDIA's words (rel-25-02.html, read where a thread quotes them);
    25.01, the tag of the README's docker build example, is no longer refused."""
    env = environment("--image", "nvcr.io/nvidia/pytorch:25.02-py3")["environment"]
    for origin in (env["packages"]["torch"]["origin"], env["origins"]["torch_build"]):
        assert (
            "https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/rel-25-02.html" in origin
        )
    env = environment("--image", "nvcr.io/nvidia/pytorch:25.01-py3")["environment"]
    assert env["packages"]["torch"]["version"] == "2.6.0a0+ecf3bae40a.nv25.1"
    assert (env["torch_build"]["cuda"], env["python"]) == ("12.8", "3.12")


def test_every_ngc_tag_the_readme_and_docs_use_is_known() -> None:
    texts = [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "deploy" / "kubernetes" / "Dockerfile"]
    tags = {
        tag
        for path in texts
        for tag in re.findall(r"nvcr\.io/nvidia/pytorch:(\d\d\.\d\d)-py3", path.read_text())
    }
    assert "25.01" in tags
    for tag in tags:
        assert cli("check", "--image", f"nvcr.io/nvidia/pytorch:{tag}-py3").exit_code in (0, 1), tag


def test_what_an_image_does_not_state_is_unknown_not_the_runners_or_absent() -> None:
    """The official tag states torch and CUDA only: its Python is unknown (never the runner's), and
    triton, which its record does not name, may be installed: rules on it are unknown, not passed."""
    image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    report = environment("--image", image, "--feature", "torch_compile")
    env = report["environment"]
    assert env["python"] is None and "python" not in env["origins"]
    verdicts = {f["id"]: f["verdict"] for f in report["findings"]}
    assert verdicts["triton-3-2-needs-torch-2-6"] == "unknown"
    text = cli("check", "--image", image, "-v").stdout
    assert re.search(r"\[!\] triton +not named ", text)
    assert "triton: not named in the image's record (installed or not)" in text
    assert "need a package the image's record or the Dockerfile does not name: state it with" in text
    pinned = environment("--image", image, "--pin", "triton==3.2.0", "--feature", "torch_compile")
    assert {f["id"]: f["verdict"] for f in pinned["findings"]}["triton-3-2-needs-torch-2-6"] == "affected"


@pytest.mark.parametrize(
    ("base", "python", "origin"),
    [
        ("python:3.11-slim", "3.11", "image python:3.11-slim (its tag)"),
        ("docker.io/library/python:3.12.4-bookworm", "3.12.4", "image docker.io/library/python:3.12.4"),
        ("ubuntu:22.04", None, None),
    ],
)
def test_a_dockerfiles_python_is_its_images(
    tmp_path: Path, base: str, python: str | None, origin: str | None
):
    """A python:X.Y image states its Python in the tag; another image states none: unknown."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {base}\nRUN pip install torch==2.5.1\n")
    env = environment("--dockerfile", dockerfile)["environment"]
    assert env["python"] == python and (origin or "") in env["origins"].get("python", "")
    assert (
        env["origins"].get("python") is None if origin is None else "runner" not in env["origins"]["python"]
    )


def test_an_official_pytorch_tag_states_its_torch_and_cuda() -> None:
    env = environment("--image", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime")["environment"]
    assert env["packages"]["torch"]["version"] == "2.5.1"
    assert env["torch_build"] == {"cuda": "12.4", "hip": None}


@pytest.mark.parametrize(
    ("image", "needle"),
    [
        (
            "nvcr.io/nvidia/pytorch:19.01-py3",
            "the release facts know: " + ", ".join(f"{tag}-py3" for tag in sorted(NGC_TABLE)),
        ),
        ("pytorch/pytorch", "unknown tag 'latest'"),
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


REQUIREMENTS_OVER_DOCKERFILE = """\
FROM nvcr.io/nvidia/pytorch:25.02-py3
RUN pip install transformers==4.51.0 accelerate==1.2.0
"""


def test_a_requirements_file_is_laid_over_the_dockerfile_over_its_image(tmp_path: Path) -> None:
    """-r wins for what it states (torch, with its own CUDA, not the image's 12.8), the Dockerfile's
    other pins stay (transformers), and its image is below both (Python)."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(REQUIREMENTS_OVER_DOCKERFILE)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.1+cu124\naccelerate==1.3.0\n")
    env = environment("--dockerfile", dockerfile, "-r", requirements)["environment"]
    packages = env["packages"]
    assert (packages["torch"]["version"], packages["torch"]["origin"]) == ("2.5.1+cu124", f"{requirements}:1")
    assert (
        env["torch_build"]["cuda"] == "12.4"
        and env["origins"]["torch_build"] == "the local label of 2.5.1+cu124"
    )
    assert (packages["transformers"]["version"], packages["transformers"]["origin"]) == (
        "4.51.0",
        f"{dockerfile}:2",
    )
    assert packages["accelerate"]["version"] == "1.3.0" and env["python"] == "3.12"
    assert env["origins"]["over: accelerate"] == f"1.2.0 from {dockerfile}:2"


def test_check_v_says_which_layer_won_each_fact(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(REQUIREMENTS_OVER_DOCKERFILE.replace("transformers", "torch==2.6.0 transformers"))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.1+cu124\n")
    result = cli("check", "--dockerfile", dockerfile, "-r", requirements, "-v", "--python", "3.11")
    text = re.sub(r"\s+", " ", result.stdout)
    torch = (
        f"torch 2.5.1+cu124 {requirements}:1 won over 2.6.0 from {dockerfile}:2 won over 2.7.0a0+6c54963f75"
    )
    assert torch + " from image nvcr.io/nvidia/pytorch:25.02-py3 (https://docs.nvidia.com/" in text
    assert "torch build CUDA 12.4 the local label of 2.5.1+cu124 won over CUDA 12.8 from image" in text
    assert "python 3.11 --python won over 3.12 from image nvcr.io/nvidia/pytorch:25.02-py3" in text


def test_the_layers_example_of_features_md_is_the_real_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = (REPO / "docs" / "features.md").read_text().split("```text\nFacts (target: requirements.txt")[1]
    expected = "Facts (target: requirements.txt" + example.split("```")[0]
    (tmp_path / "Dockerfile").write_text(
        "FROM nvcr.io/nvidia/pytorch:25.02-py3\nRUN pip install torch==2.6.0 transformers==4.51.0\n"
    )
    (tmp_path / "requirements.txt").write_text("torch==2.5.1+cu124\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    output = cli("check", "--dockerfile", "Dockerfile", "-r", "requirements.txt", "-v", "--no-scan").stdout
    facts = output[output.index("Facts (target:") :]
    assert facts[: facts.index("  gpu source")] == expected
