"""The files real projects write their stack in, as they are upstream (tests/fixtures/real_pinfiles,
its README names each file's repository and commit): Dockerfiles, setup.py and requirements files
that `check` refused whole or misread (issue 37, cause 3). A line it cannot read is a problem with
its FILE:LINE and the rest of the file is still facts; what it cannot know stays unknown."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import REPO, cli
from test_bad_input import assert_one_line_error

from attn_doctor.report.locations import requirement_location

REAL = REPO / "tests" / "fixtures" / "real_pinfiles"
LLAMA_FACTORY = REAL / "LLaMA-Factory" / "docker" / "docker-cuda"
VERL = REAL / "verl" / "docker"
OPENRLHF = REAL / "OpenRLHF" / "dockerfile" / "Dockerfile"
AXOLOTL = REAL / "axolotl" / "docker"
TEXTGEN = REAL / "text-generation-webui" / "requirements" / "full" / "requirements.txt"


def checked(*args: str | Path) -> tuple[int, dict, list[str]]:
    """The exit code, the JSON report and the problems printed (one line each)."""
    result = cli("check", *args, "--no-scan", "--format", "json")
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    # a Dockerfile's lines not read are notes of the report (the exit code is the findings'); a
    # requirements file's are problems (stderr, exit 2)
    problems = [line.removeprefix("attn-doctor: error: ") for line in result.stderr.splitlines()]
    problems += [note for note in report["notes"] if "newer than" not in note]
    return result.exit_code, report, problems


def packages(report: dict) -> dict[str, tuple[str | None, str]]:
    """Each package the files state (not those implied), with its version and origin."""
    return {
        name: (package["version"], package["origin"])
        for name, package in report["environment"]["packages"].items()
        if not package["origin"].startswith("implied by")
    }


def verdicts(report: dict) -> dict[str, str]:
    return {finding["id"]: finding["verdict"] for finding in report["findings"]}


# ---- Dockerfiles -------------------------------------------------------------------------------


def test_llama_factory_an_unknown_base_image_and_unread_installs_are_problems_and_unknown() -> None:
    """LLaMA-Factory's docker-cuda/Dockerfile: FROM ${BASE_IMAGE} (its ARG default, an image whose
    contents are not known), ``pip install -e .`` and ``-r requirements/...`` (not beside the
    Dockerfile) were one refusal, exit 2 and no report. Now each is a problem with its line, the
    flash-attn of the ``if [ "${INSTALL_FLASHATTN}" == "true" ]`` branch is not installed (the ARG
    defaults to false), and what the image may ship is unknown, never "not installed"."""
    code, report, problems = checked(
        "--dockerfile", LLAMA_FACTORY / "Dockerfile", "--feature", "flash_attention_2"
    )
    dockerfile = LLAMA_FACTORY / "Dockerfile"
    assert code in (0, 1)  # lines not read are notes, not input errors: the findings decide
    assert problems == [
        f"{dockerfile}:3: FROM hiyouga/pytorch:th2.6.0-cu124-flashattn2.7.4-cxx11abi0-devel: an image whose"
        " contents are not known: what it ships is unknown",
        f"{dockerfile}:35: pip install -e .: the project itself, not read",
        f"{dockerfile}:35: pip install -r requirements/metrics.txt: not a file beside the Dockerfile (the"
        " build context is not known): not read; give it with -r",
        f"{dockerfile}:35: pip install -r requirements/deepspeed.txt: not a file beside the Dockerfile (the"
        " build context is not known): not read; give it with -r",
    ]
    assert packages(report)["setuptools"] == (None, f"{dockerfile}:27")
    assert "flash-attn" not in report["environment"]["packages"]
    assert report["environment"]["origins"]["packages"].startswith("the Dockerfile's lines")
    # flash-attn may be in the image: no rule on it is decided by its absence
    held = {
        reason["holds"]
        for finding in report["findings"]
        for reason in finding["reasons"]
        if reason["condition"] == "flash-attn"
    }
    assert held == {None}


def test_a_requirements_file_beside_the_dockerfile_is_read(tmp_path: Path) -> None:
    """The same Dockerfile at the root of its build context (where LLaMA-Factory's README builds it
    from): ``-r requirements/deepspeed.txt`` is read, each package with its own file's line."""
    shutil.copy(LLAMA_FACTORY / "Dockerfile", tmp_path / "Dockerfile")
    shutil.copytree(REAL / "LLaMA-Factory" / "requirements", tmp_path / "requirements")
    code, report, problems = checked("--dockerfile", tmp_path / "Dockerfile")
    assert packages(report)["deepspeed"] == (None, f"{tmp_path}/requirements/deepspeed.txt:1")
    assert packages(report)["rouge-chinese"] == (None, f"{tmp_path}/requirements/metrics.txt:3")
    assert not any("requirements/" in problem for problem in problems)


def test_llama_factory_base_local_wheels_are_read_by_their_file_names() -> None:
    """Dockerfile.base ``wget``s flash-attn's and flashinfer's wheels and installs the local files:
    refused whole before; now each is read from its file name (PEP 427), over pytorch/pytorch's
    torch 2.6.0 (CUDA 12.4), and the file has no problem."""
    code, report, problems = checked("--dockerfile", LLAMA_FACTORY / "Dockerfile.base")
    dockerfile = LLAMA_FACTORY / "Dockerfile.base"
    assert problems == [] and code in (0, 1)
    found = packages(report)
    assert found["flash-attn"] == (
        "2.7.4.post1+cu12torch2.6cxx11abifalse",
        f"{dockerfile}:46 (flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl)",
    )
    assert found["flashinfer-python"][0] == "0.2.2.post1+cu124torch2.6"
    wheel = report["environment"]["packages"]["flash-attn"]["wheel"]
    assert wheel == "flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    assert verdicts(report)["flash-attn-no-prebuilt-wheel-for-torch"] == "not-affected"  # a wheel, no build
    assert found["torch"] == ("2.6.0", "image pytorch/pytorch:2.6.0-cuda12.4-cudnn9-devel (its tag)")
    assert report["environment"]["torch_build"]["cuda"] == "12.4"


def test_verl_an_ngc_tag_unknown_uninstall_then_install_and_the_index_variant() -> None:
    """verl's Dockerfile.base: FROM nvcr.io/nvidia/pytorch:25.03-py3 (a tag the release facts lack:
    refused whole before) uninstalls NGC's torch, transformer_engine and flash_attn, then installs
    ``torch==2.8.0 --index-url .../whl/cu128`` and ``flash_attn==2.7.4.post1``."""
    code, report, problems = checked("--dockerfile", VERL / "Dockerfile.base")
    dockerfile = VERL / "Dockerfile.base"
    assert code in (0, 1)  # lines not read are notes, not input errors: the findings decide
    assert problems[0].startswith(
        f"{dockerfile}:3: FROM nvcr.io/nvidia/pytorch:25.03-py3: unknown tag '25.03-py3'"
    )
    assert problems[0].endswith(": what it ships is unknown")
    assert problems[1:] == [
        f"{dockerfile}:98: git+https://github.com/NVIDIA/apex.git: a URL that names no package (a VCS or"
        " archive install), not read",
        f"{dockerfile}:101: git+https://github.com/NVIDIA/TransformerEngine.git@v2.2.1: a URL that names no"
        " package (a VCS or archive install), not read",
        f"{dockerfile}:104: pip install -e .: the project itself, not read",
        f"{dockerfile}:108: git+https://github.com/ISEEKYAN/mbridge.git: a URL that names no package (a VCS"
        " or archive install), not read",
    ]
    found = packages(report)
    assert found["torch"] == (
        "2.8.0+cu128",
        f"{dockerfile}:48 (+cu128 from --index-url https://download.pytorch.org/whl/cu128)",
    )
    assert report["environment"]["torch_build"]["cuda"] == "12.8"
    assert found["flash-attn"] == ("2.7.4.post1", f"{dockerfile}:51")
    assert found["transformers"] == ("4.55.4", f"{dockerfile}:39")
    origins = report["environment"]["origins"]
    assert origins["absent: transformer-engine"] == f"{dockerfile}:33"  # uninstalled, never reinstalled
    assert "absent: torch" not in origins


def test_verl_nvidia_cuda_devel_states_nvcc_and_cu129_is_torchs_build() -> None:
    """Dockerfile.stable.vllm: FROM nvidia/cuda:12.9.1-devel-ubuntu22.04 is a CUDA 12.9 toolkit and
    no Python packages; ``torch==2.9.1 --index-url .../whl/cu129`` is torch 2.9.1+cu129 (it was
    refused whole at line 35's ``cd vllm && pip install -r requirements/build.txt``)."""
    code, report, problems = checked("--dockerfile", VERL / "Dockerfile.stable.vllm")
    dockerfile = VERL / "Dockerfile.stable.vllm"
    env = report["environment"]
    assert (env["nvcc"], env["origins"]["nvcc"]) == (
        "12.9",
        "image nvidia/cuda:12.9.1-devel-ubuntu22.04 (its tag: a devel image holds the CUDA toolkit)",
    )
    assert packages(report)["torch"][0] == "2.9.1+cu129" and env["torch_build"]["cuda"] == "12.9"
    assert packages(report)["flash-attn"] == ("2.8.1", f"{dockerfile}:60")
    assert f"{dockerfile}:35: pip install -e .: the project itself, not read" in problems
    assert env["origins"]["absent: verl"] == f"{dockerfile}:102"  # installed, then uninstalled
    assert code in (0, 1)  # lines not read are notes, not input errors: the findings decide


def test_openrlhf_an_environment_prefix_is_read_and_the_later_install_wins() -> None:
    """OpenRLHF's Dockerfile: ``RUN MAX_JOBS=8 pip install flash-attn==2.8.3`` was skipped (flash-attn
    "not installed"); it follows ``pip uninstall ... flash_attn`` of NGC 26.03's (a tag the release
    facts lack, so the rest of the image is unknown)."""
    code, report, problems = checked("--dockerfile", OPENRLHF)
    found = packages(report)
    assert found["flash-attn"] == ("2.8.3", f"{OPENRLHF}:22")
    assert found["vllm"] == ("0.27.1", f"{OPENRLHF}:19") and found["transformers"][0] == "5.15.0"
    assert report["environment"]["origins"]["absent: transformer-engine"] == f"{OPENRLHF}:17"
    assert len(problems) == 1 and problems[0].startswith(
        f"{OPENRLHF}:1: FROM nvcr.io/nvidia/pytorch:26.03-py3"
    )
    assert code in (0, 1)  # lines not read are notes, not input errors: the findings decide


def test_axolotl_arg_defaults_if_else_and_uv_torch_backend() -> None:
    """axolotl's Dockerfile-uv-base: ``FROM nvidia/cuda:$CUDA_VERSION-cudnn$CUDNN_VERSION-devel-...``
    from the global ARGs, ``if [ -n "$TORCH_INDEX_URL" ]`` (its ARG default is empty: the else
    branch) ``UV_TORCH_BACKEND=$TORCH_BACKEND uv pip install torch==${PYTORCH_VERSION}``: torch
    2.6.0+cu126, saying which ARG defaults it took. It read as torch "not installed", exit 0."""
    code, report, problems = checked("--dockerfile", AXOLOTL / "Dockerfile-uv-base")
    dockerfile = AXOLOTL / "Dockerfile-uv-base"
    assert problems == [] and code in (0, 1)
    version, origin = packages(report)["torch"]
    assert version == "2.6.0+cu126" and origin.startswith(f"{dockerfile}:39 (")
    assert "PYTORCH_VERSION=2.6.0, the ARG default of line 12" in origin
    assert "+cu126 from UV_TORCH_BACKEND=cu126 (TORCH_BACKEND=cu126, the ARG default of line 14)" in origin
    assert report["environment"]["nvcc"] == "12.6"
    assert "packages" not in report["environment"]["origins"]  # CUDA image + its installs: closed
    assert packages(report)["mamba-ssm"][1].endswith(
        "(TARGETARCH=amd64, BuildKit's for the target's platform)"
    )
    arm = checked("--dockerfile", dockerfile, "--platform", "linux-aarch64")[1]
    assert "mamba-ssm" not in arm["environment"]["packages"]


def test_axolotl_an_arg_without_a_default_leaves_the_version_unknown(tmp_path: Path) -> None:
    """The same file with ``ARG PYTORCH_VERSION`` (no default; CI passes --build-arg): torch is
    installed at a version not known here; with ``ARG TORCH_INDEX_URL`` (no default) the if's
    branches are alternatives (2.6.0 from an unknown index, or 2.6.0+cu126): unknown between them."""
    text = (AXOLOTL / "Dockerfile-uv-base").read_text()
    (tmp_path / "Dockerfile").write_text(text.replace('ARG PYTORCH_VERSION="2.6.0"', "ARG PYTORCH_VERSION"))
    version, origin = packages(checked("--dockerfile", tmp_path / "Dockerfile")[1])["torch"]
    assert version is None
    assert origin.endswith("(torch==${PYTORCH_VERSION}: PYTORCH_VERSION has no value here: version unknown)")
    (tmp_path / "Dockerfile").write_text(text.replace('ARG TORCH_INDEX_URL=""', "ARG TORCH_INDEX_URL"))
    torch = checked("--dockerfile", tmp_path / "Dockerfile")[1]["environment"]["packages"]["torch"]
    assert (torch["version"], torch["releases"]) == (None, ["2.6.0", "2.6.0+cu126"])
    assert "one of 2.6.0, 2.6.0+cu126: the branches of a shell if or || install each" in torch["origin"]


def test_axolotl_an_image_not_known_leaves_its_packages_unknown_not_clean() -> None:
    """Dockerfile-uv: FROM axolotlai/axolotl-base-uv:$BASE_TAG, then ``uv pip install -e .[...]``:
    exit 0 and every rule "not affected" before (1 package, torch "not installed"); now torch is
    "not named" and the rules on it unknown."""
    code, report, problems = checked("--dockerfile", AXOLOTL / "Dockerfile-uv")
    dockerfile = AXOLOTL / "Dockerfile-uv"
    assert code in (0, 1)  # lines not read are notes, not input errors: the findings decide
    assert problems[0] == (
        f"{dockerfile}:3: FROM axolotlai/axolotl-base-uv:main-base: an image whose contents are not known:"
        " what it ships is unknown"
    )
    assert f"{dockerfile}:20: pip install -e .[${{BASE_EXTRAS}}]: the project itself, not read" in problems
    assert "torch" not in report["environment"]["packages"]
    assert verdicts(report)["cuda-driver-too-old-for-torch"] == "unknown"
    text = cli("check", "--dockerfile", dockerfile, "--no-scan", "-v").stdout
    assert re.search(r"\[!\] torch +not named", text)
    assert "torch: not named in the Dockerfile's lines (installed or not)" in text


def test_a_dockerfile_named_dockerfile_dot_something_is_read_by_r() -> None:
    """verl names its files Dockerfile.base, axolotl Dockerfile-uv-base: -r reads them as Dockerfiles."""
    assert packages(checked("-r", VERL / "Dockerfile.base")[1])["torch"][0] == "2.8.0+cu128"
    assert packages(checked("-r", AXOLOTL / "Dockerfile-uv-base")[1])["torch"][0] == "2.6.0+cu126"


@pytest.mark.parametrize(
    ("line", "name", "version"),
    [
        ("env MAX_JOBS=8 pip install flash-attn==2.8.3", "flash-attn", "2.8.3"),
        ("python -m pip install flash-attn==2.8.3", "flash-attn", "2.8.3"),
        ("python3.12 -m pip install --no-cache-dir flash-attn==2.8.3", "flash-attn", "2.8.3"),
        ("pip3 install --resume-retries 999 flash-attn==2.8.3", "flash-attn", "2.8.3"),
        ("/opt/venv/bin/pip install -U flash-attn==2.8.3", "flash-attn", "2.8.3"),
        ("uv pip install --system --python /opt/venv/bin/python flash-attn==2.8.3", "flash-attn", "2.8.3"),
        (
            "pip install torch==2.7.1 --extra-index-url https://download.pytorch.org/whl/cu126",
            "torch",
            "2.7.1+cu126",
        ),
        (
            "PIP_INDEX_URL=https://download.pytorch.org/whl/cu118 pip install torch==2.5.1",
            "torch",
            "2.5.1+cu118",
        ),
        ("uv pip install --torch-backend cu128 torch==2.7.1", "torch", "2.7.1+cu128"),
        (
            "pip install torch==2.5.1+cu121 --index-url https://download.pytorch.org/whl/cu124",
            "torch",
            "2.5.1+cu121",
        ),
        (
            "pip install 'flash_attn @ https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/"
            "flash_attn-2.8.3%2Bcu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl'",
            "flash-attn",
            "2.8.3+cu12torch2.8cxx11abitrue",
        ),
        ("pip install torch==2.5.1 && pip uninstall -y torch && pip install torch==2.6.0", "torch", "2.6.0"),
    ],
)
def test_each_way_of_calling_an_installer(tmp_path: Path, line: str, name: str, version: str) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM ubuntu:22.04\nRUN {line}\n")
    code, report, problems = checked("--dockerfile", tmp_path / "Dockerfile")
    assert packages(report)[name][0] == version and problems == []


def test_image_nvidia_cuda_is_known_and_an_unknown_image_is_still_refused() -> None:
    env = checked("--image", "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04")[1]["environment"]
    assert env["nvcc"] == "12.8" and env["packages"] == {}
    assert checked("--image", "nvidia/cuda:12.8.1-runtime-ubuntu22.04")[1]["environment"]["nvcc"] is None
    assert_one_line_error(
        cli("check", "--image", "ghcr.io/org/img:1"),
        "--image ghcr.io/org/img:1",
        "not an image whose contents",
    )


# ---- setup.py ----------------------------------------------------------------------------------


def test_setup_py_install_requires_as_a_literal_list() -> None:
    """state-spaces/mamba's setup.py: ``install_requires=[...]`` in the call ("setup.py:2: not a
    requirement" before: it was read as a requirements file)."""
    setup = REAL / "mamba" / "setup.py"
    found = packages(checked("-r", setup)[1])
    assert found["tilelang"] == ("0.1.8", f"{setup}:402")
    assert found["torch"] == (None, f"{setup}:396") and found["triton"] == (None, f"{setup}:400")
    assert "causal-conv1d" not in found  # a comment in the list


def test_setup_py_install_requires_as_a_module_list() -> None:
    """mosaicml/llm-foundry's setup.py: ``install_requires = [...]`` at module level, named by the call;
    its extras (``extra_deps['gpu-flash2'] = ['flash-attn==2.7.4.post1']``) are not installed."""
    setup = REAL / "llm-foundry" / "setup.py"
    found = packages(checked("-r", setup)[1])
    assert found["torch"] == (None, f"{setup}:59") and found["fsspec"] == ("2023.6.0", f"{setup}:61")
    assert "flash-attn" not in found


def test_setup_py_install_requires_from_a_requirement_table() -> None:
    """huggingface/open-r1's setup.py builds install_requires from a table (``deps["trl"]``) of its
    literal ``_deps`` list, as transformers does: each entry is the list's string, at its line;
    what only extras_require takes (torch, in extras["torch"]) is not installed by it."""
    setup = REAL / "open-r1" / "setup.py"
    found = packages(checked("-r", setup)[1])
    line = setup.read_text().splitlines().index('    "transformers==4.52.3",') + 1
    assert found["transformers"] == ("4.52.3", f"{setup}:{line}")
    assert found["trl"][0] == "0.18.0" and found["deepspeed"][0] == "0.16.8"
    assert "torch" not in found or found["torch"][1].startswith("implied by")


def test_setup_py_install_requires_not_a_literal_list_is_refused(tmp_path: Path) -> None:
    """A list built by a function call (or appended to) is not read: one line, exit 2."""
    setup = tmp_path / "setup.py"
    setup.write_text(
        "from setuptools import setup\n\nsetup(name='x', install_requires=load('requirements.txt'))\n"
    )
    assert_one_line_error(
        cli("check", "-r", setup), f"{setup}: install_requires is not a literal list; not supported"
    )


# ---- requirements ------------------------------------------------------------------------------


def test_bare_wheel_urls_in_a_requirements_file() -> None:
    """oobabooga/text-generation-webui's requirements/full/requirements.txt lists wheels by their
    URLs, one per platform and Python: refused whole before ("requirements.txt:37: not a
    requirement"); now each is its wheel's name and version, its marker read for the target, its URL
    the fact's source, and a finding still points at the file's line."""
    _, report, problems = checked("-r", TEXTGEN, "--python", "3.13")
    found = packages(report)
    url = (
        "https://github.com/kingbri1/flash-attention/releases/download/v2.8.3/"
        "flash_attn-2.8.3+cu128torch2.9.0cxx11abiFALSE-cp313-cp313-linux_x86_64.whl"
    )
    assert found["flash-attn"] == ("2.8.3+cu128torch2.9.0cxx11abifalse", f"{TEXTGEN}:53 ({url})")
    assert found["gradio"] == (
        "4.37.2+custom.20",
        f"{TEXTGEN}:37 (https://github.com/oobabooga/gradio/releases/download/4.37.2-custom.20/"
        "gradio-4.37.2+custom.20-py3-none-any.whl)",
    )
    assert problems == []
    assert "flash-attn" not in checked("-r", TEXTGEN, "--python", "3.12")[1]["environment"]["packages"]
    reason = SimpleNamespace(origin=found["flash-attn"][1])
    assert requirement_location(SimpleNamespace(reasons=[reason])) == (str(TEXTGEN), 53)  # type: ignore[arg-type]


def test_a_bare_url_that_names_no_package_is_a_problem(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.1\nhttps://example.invalid/pkg.tar.gz\n")
    code, report, problems = checked("-r", requirements)
    assert packages(report)["torch"][0] == "2.5.1" and code == 2
    assert problems == [
        f"{requirements}:2: https://example.invalid/pkg.tar.gz: a URL that names no package (a VCS or"
        " archive), not read"
    ]
