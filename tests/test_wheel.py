"""`attn-doctor wheel` (issue 27, started): the install command that fits a declared target, read
from the release facts (flash-attn's publish.yml matrix per tag, its wheel names per tag,
xformers' torch pins, torch's CUDA variants). The real CLI, no network."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

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
    from attn_doctor.planner.registry import PLANNERS

    result = cli("wheel", "sageattention", "--pin", "torch==2.6.0+cu124")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"attn-doctor: error: sageattention: no wheel planner for it (planned: {', '.join(PLANNERS)})"
    ]


@pytest.mark.parametrize("spelling", ["flash_attn", "Flash-Attn", "FLASH.ATTN", "flash__attn"])
def test_a_package_is_named_in_any_spelling_pip_accepts(tmp_path: Path, spelling: str):
    """PEP 503: case and runs of ``-``, ``_`` and ``.`` do not matter, as for pip and for --pin."""
    _, canonical = planned(tmp_path, "2.6.0+cu124", "flash-attn", "--python", "3.11", "--gpu", "H100")
    code, spelled = planned(tmp_path, "2.6.0+cu124", spelling, "--python", "3.11", "--gpu", "H100")
    assert code == 0 and spelled == canonical
    assert [plan["package"] for plan in spelled["plans"]] == ["flash-attn"]


def test_two_spellings_of_one_package_are_one_plan(tmp_path: Path):
    code, document = planned(
        tmp_path, "2.6.0+cu124", "flash_attn_3", "Flash-Attn-3", "--python", "3.11", "--gpu", "H100"
    )
    assert [plan["package"] for plan in document["plans"]] == ["flash-attn-3"]


def test_wheel_imports_no_torch_and_opens_no_socket(tmp_path: Path):
    """The plan comes from the release facts: every planner, with sockets refused and no torch,
    transformers or flash_attn imported."""
    import subprocess
    import sys

    (tmp_path / "r.txt").write_text("torch==2.6.0+cu124\n")
    target = [str(tmp_path / "r.txt"), "--python", "3.11", "--gpu", "H100"]
    code = (
        "import socket, sys\n"
        "def refuse(*args, **kwargs):\n    raise OSError('no network in this test')\n"
        "socket.socket = socket.create_connection = refuse\n"
        "from attn_doctor.cli import app\nfrom attn_doctor.planner.registry import PLANNERS\n"
        f"args = ['wheel', *PLANNERS, '-r', *{target!r}]\n"
        "try:\n    app(args)\nexcept SystemExit as exit:\n    print('EXIT', exit.code)\n"
        "print('LOADED', sorted(m for m in ('torch', 'transformers', 'flash_attn') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "LOADED []" in done.stdout, done.stdout + done.stderr
    assert "EXIT 0" in done.stdout and "flash_attn-2.8.3.post1+cu12torch2.6" in done.stdout, done.stdout


# --- torch, triton, ROCm, the plans together, requirements lines ---------------------------------

CU128 = "https://download.pytorch.org/whl/cu128"


def test_torch_on_a_b200_moves_to_a_cuda_12_8_variant_and_the_rest_follows(tmp_path: Path):
    """torch 2.6.0+cu126 has no Blackwell code: torch 2.7.1 (the first line with cu128, its newest
    patch) from the cu128 index; flash-attn, xformers and triton are planned on that torch."""
    code, document = planned(
        tmp_path, "2.6.0+cu126", "flash-attn", "xformers", "triton", "--python", "3.11", "--gpu", "B200"
    )
    plans = {plan["package"]: plan for plan in document["plans"]}
    assert code == 0 and list(plans) == ["torch", "flash-attn", "xformers", "triton"]
    assert plans["torch"]["command"] == f"pip install torch==2.7.1 --index-url {CU128}"
    assert plans["torch"]["why"].endswith("torch 2.6.0 has no such variant")
    assert "cu12torch2.7cxx11abiTRUE-cp311" in plans["flash-attn"]["url"]
    assert plans["xformers"]["command"] == f"pip install xformers==0.0.31.post1 --index-url {CU128}"
    assert plans["triton"]["command"] == "pip install triton==3.3.1"


def test_a_cpu_torch_on_a_gpu_target_moves_to_a_cuda_build_and_flash_attn_follows(tmp_path: Path):
    """A CPU build cannot run on the H100: torch's plan is its release in a CUDA variant with H100
    code, and flash-attn is planned on that torch, not refused as "a CPU build"."""
    code, document = planned(tmp_path, "2.5.1+cpu", "flash-attn", "--python", "3.11", "--gpu", "H100")
    plans = {plan["package"]: plan for plan in document["plans"]}
    assert code == 0 and list(plans) == ["torch", "flash-attn"]
    torch = plans["torch"]
    assert torch["command"].startswith(
        "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu"
    )
    assert "code for every target GPU" in torch["why"]
    assert plans["flash-attn"]["url"] and "torch2.5" in plans["flash-attn"]["url"]
    assert f"(on {torch['requirement']}, the torch plan)" in plans["flash-attn"]["why"]


def test_a_cpu_torch_where_no_gpu_is_known_stays(tmp_path: Path):
    """Without a GPU the CPU build may be meant: flash-attn says why nothing fits, torch stays."""
    code, document = planned(tmp_path, "2.5.1+cpu", "flash-attn", "--python", "3.11")
    (plan,) = document["plans"]
    assert code == 1 and "is a CPU build" in plan["why"]


def test_requirements_lines_pin_torch_s_variant_and_take_its_index_as_an_extra(tmp_path: Path):
    (tmp_path / "r.txt").write_text("torch==2.6.0+cu126\n")
    args = ("-r", tmp_path / "r.txt", "--python", "3.11", "--gpu", "B200", "--format", "requirements")
    result = cli("wheel", "flash-attn", "triton", *args)
    lines = result.stdout.splitlines()
    assert result.exit_code == 0 and lines[0].startswith("# attn-doctor wheel (target: ")
    assert lines[1:3] == [f"--extra-index-url {CU128}", "torch==2.7.1+cu128"]
    assert lines[3].startswith(f"flash-attn @ {RELEASES}/v2.8.3.post1/flash_attn-2.8.3.post1+cu12torch2.7")
    assert lines[4:] == ["triton==3.3.1"]


def test_a_plan_with_no_line_is_a_comment_saying_why(tmp_path: Path):
    (tmp_path / "r.txt").write_text("torch==2.9.1+cu130\n")
    args = ("-r", tmp_path / "r.txt", "--python", "3.12", "--gpu", "RTX 5090", "--format", "requirements")
    result = cli("wheel", "flash-attn", *args)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1].startswith(
        "# flash-attn: nothing fits: no flash-attn release has a wheel"
    )


def test_triton_is_torch_s_pin_and_triton_windows_on_windows(tmp_path: Path):
    code, document = planned(tmp_path, "2.7.1+cu128", "triton", "--python", "3.11")
    assert code == 0 and document["plans"][0]["command"] == "pip install triton==3.3.1"
    code, document = planned(tmp_path, "2.7.1+cu128", "triton", "--python", "3.11", "--platform", "windows")
    assert code == 0 and document["plans"][0]["command"] == 'pip install "triton-windows<3.4"'


def test_flash_attn_on_rocm_is_a_build_of_the_ck_or_triton_backend(tmp_path: Path):
    code, document = planned(tmp_path, "2.5.1+rocm6.2", "flash-attn", "--python", "3.11", "--gpu", "MI300X")
    (plan,) = document["plans"]
    assert code == 1 and plan["command"] is None
    ck, triton = plan["ways_out"]
    assert ck["commands"] == [
        "GPU_ARCHS=gfx942 MAX_JOBS=4 pip install flash-attn==2.8.3.post1 --no-build-isolation"
    ]
    assert triton["commands"][0].startswith(
        'FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE" pip install flash-attn=='
    )


def _env(torch: str, gpu: str, driver: str | None):
    from attn_doctor.facts.model import Environment, Gpu, Package, torch_build_from_version

    return Environment(
        packages={"torch": Package("torch", torch, "torch", "test")},
        torch_build=torch_build_from_version(torch),
        gpus=[Gpu(gpu, "10.0" if gpu == "B200" else "9.0", driver=driver)],
        python="3.11",
        platform="linux",
    )


def test_torch_keeps_a_cuda_the_driver_runs():
    """Driver 535 runs CUDA 12.x, not 13.0 (NVIDIA's minimum 580.65.06): torch 2.9.1 in its
    lowest 12.x variant with code for the H100, not its cu130 build."""
    from attn_doctor.planner.torch import TorchPlanner
    from attn_doctor.releases.facts import snapshot

    plan = TorchPlanner().plan(_env("2.9.1+cu130", "H100", "535.104.05"), snapshot())
    assert plan.command == "pip install torch==2.9.1 --index-url https://download.pytorch.org/whl/cu126"
    assert "run on NVIDIA driver 535.104.05" in plan.why


def test_torch_says_upgrade_the_driver_when_only_the_driver_stands_in_the_way():
    """A B200 needs CUDA 12.8+; driver 520 runs no CUDA 12 (minimum 525.60.13)."""
    from attn_doctor.planner.torch import TorchPlanner
    from attn_doctor.releases.facts import snapshot

    plan = TorchPlanner().plan(_env("2.7.1+cu126", "B200", "520.61.05"), snapshot())
    assert plan.command is None and plan.why.endswith("upgrade the NVIDIA driver")
    (way,) = plan.ways_out
    assert way.title.startswith(
        "upgrade the NVIDIA driver to 525.60.13 or newer, then install torch 2.7.1 (cu128)"
    )


def test_this_machine_without_a_gpu_gets_torch_s_cpu_wheel_and_says_why_the_rest_do_not_fit(site, no_gpu):
    """A CPU-only machine (no GPU found) with torch's CPU build: the CPU index, no triton (the CPU
    wheel requires none), and no CUDA extension."""
    site.install("torch", "2.13.0+cpu", torch_cuda=None)
    result = cli("wheel", "torch", "triton", "flash-attn", "--path", site.path, "--format", "json")
    plans = {plan["package"]: plan for plan in json.loads(result.stdout)["plans"]}
    assert result.exit_code == 1
    cpu = "https://download.pytorch.org/whl/cpu"
    assert plans["torch"]["command"] == f"pip install torch==2.13.0 --index-url {cpu}"
    assert plans["triton"]["command"] is None and "is a CPU build" in plans["triton"]["why"]
    assert plans["flash-attn"]["why"].startswith("torch 2.13.0+cpu is a CPU build: no CUDA wheel fits")


@pytest.mark.parametrize(
    ("cpus", "memory_gb", "jobs"),
    [(64, 512.0, 21), (16, 32.0, 1), (8, 256.0, 4), (None, None, 4)],
)
def test_source_build_sizes_max_jobs_to_the_host(cpus, memory_gb, jobs):
    """About 20 GB a job with max(16 GB, 15%) free, at most half the CPUs (flash-attn's own sizing,
    flash-attention#2079, #2493); the README's MAX_JOBS=4 where the host is not known."""
    from dataclasses import replace

    from attn_doctor.planner.flash_attn import FlashAttnPlanner
    from attn_doctor.releases.facts import snapshot

    env = replace(_env("2.9.1+cu130", "H100", None), cpus=cpus, memory_gb=memory_gb, nvcc="12.8")
    plan = FlashAttnPlanner().plan(env, snapshot())
    build = plan.ways_out[-1]
    assert build.commands == (
        f"pip install ninja && MAX_JOBS={jobs} pip install flash-attn==2.8.3.post1 --no-build-isolation",
    )
    assert "nvcc of CUDA 13.x, torch's (the target has another: 12.8)" in build.why


def test_a_probe_file_with_a_bad_cpu_count_is_one_line_and_exit_2(tmp_path: Path):
    from attn_doctor.facts.model import Environment

    document = json.loads(Environment(python="3.11").to_json())
    document["cpus"] = "many"
    (tmp_path / "env.json").write_text(json.dumps(document))
    result = cli("wheel", "torch", "--env-file", tmp_path / "env.json")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "'many' is not a positive number" in result.stderr


def test_xformers_from_a_torch_floor_and_the_torch_a_pinned_release_needs(tmp_path: Path):
    """xformers 0.0.35 requires torch>=2.10 (one wheel for every torch since): it fits torch 2.11;
    0.0.30 asked for on torch 2.6 pins torch 2.7.0: that torch, from the target's CUDA index."""
    from attn_doctor.planner.xformers import XformersPlanner
    from attn_doctor.releases.facts import snapshot

    code, document = planned(tmp_path, "2.11.0+cu130", "xformers", "--python", "3.12")
    index = "https://download.pytorch.org/whl/cu130"
    assert (
        code == 0 and document["plans"][0]["command"] == f"pip install xformers==0.0.35 --index-url {index}"
    )
    plan = XformersPlanner().plan(_env("2.6.0+cu126", "H100", None), snapshot(), "0.0.30")
    assert (
        plan.command is None and plan.why == "xformers 0.0.30 pins torch==2.7.0, not the target's torch 2.6.0"
    )
    (way,) = plan.ways_out
    assert way.commands == (
        "pip install torch==2.7.0 xformers==0.0.30 --index-url https://download.pytorch.org/whl/cu126",
    )


def test_an_ngc_image_s_pre_release_torch_is_kept_and_flash_attn_is_built_against_it():
    """NGC's torch 2.7.0a0+6c54963f75 is served by no index: the torch plan does not replace it
    (and plans nothing else on another torch); flash-attn's way is the build against it."""
    target = ("--image", "nvcr.io/nvidia/pytorch:25.02-py3", "--gpu", "H100")
    result = cli("wheel", "torch", "flash-attn", *target, "--format", "json")
    plans = {plan["package"]: plan for plan in json.loads(result.stdout)["plans"]}
    assert result.exit_code == 1 and list(plans) == ["torch", "flash-attn"]
    assert plans["torch"]["command"] is None and "pre-release build" in plans["torch"]["why"]
    (build,) = plans["flash-attn"]["ways_out"]
    assert build["commands"][0].endswith("pip install flash-attn==2.8.3.post1 --no-build-isolation")


def test_an_installed_torch_whose_version_is_not_pep_440_gets_no_plan_and_no_crash(site, no_gpu):
    """An installed torch's METADATA with a version pip never wrote: wheel says no wheel can be
    matched (exit 1) and check reports the version (exit 2), never an internal error."""
    site.install("torch", "2.6.0+cu124")
    metadata = next(site.path.glob("torch-*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 2.6.0+cu124", "Version: 2.6.0-final-build!x"))
    result = cli("wheel", "flash-attn", "--path", site.path, "--format", "json")
    assert result.exit_code == 1, result.stderr
    assert "is not a PEP 440 version" in json.loads(result.stdout)["plans"][0]["why"]
    checked = cli("check", "--path", site.path)  # exit 2: the version is reported as a problem
    assert checked.exit_code == 2 and "internal error" not in checked.stderr


def test_a_columns_value_of_other_digits_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "²")
    assert cli("wheel", "torch", "--pin", "torch==2.6.0+cu124").exit_code in (0, 1)
    monkeypatch.setenv("COLUMNS", "9" * 5000)
    assert cli("wheel", "torch", "--pin", "torch==2.6.0+cu124").exit_code in (0, 1)
