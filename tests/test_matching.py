"""Matching semantics on purpose-made rule files: versions (local labels, nightlies, post
releases), GPUs, CUDA builds, features, and the tri-state verdict."""

from __future__ import annotations

import json

import pytest
from support import cli, write_rule


def verdict(rules_dir, site, *args: str) -> dict:
    """``site`` None: no --path (a declared target, -r or --env-file, reads no installed packages)."""
    installed = () if site is None else ("--path", site.path)
    result = cli("check", "--format", "json", *installed, "--rules", rules_dir, *args)
    assert result.exit_code in (0, 1), result.stderr
    return {f["id"]: f for f in json.loads(result.stdout)["findings"]}


@pytest.mark.parametrize(
    ("installed", "spec", "expected"),
    [
        ("2.5.1+cu121", ">=2.5,<2.6", "affected"),  # local label ignored by the ordering
        ("2.5.1+cu121", "==2.5.1", "affected"),
        ("2.7.0.post2", ">=2.7.0", "affected"),  # post release
        ("2.7.0.post2", "<2.7.0", "not-affected"),
        ("2.6.0.dev20240901+cu124", ">=2.6.0.dev0", "affected"),  # nightly
        ("2.6.0.dev20240901+cu124", "<2.7.0", "affected"),
        ("2.6.0.dev20240901+cu124", "<2.5.0", "not-affected"),
        ("2.6.0.dev20240901+cu124", "<2.6.0", "unknown"),  # has the 2.6.0 fix or not? only the code knows
        ("2.6.0.dev20240901+cu124", ">=2.6.0", "unknown"),
        ("2.6.0rc1", ">=2.5,<2.6.0", "unknown"),
        ("2.4.0", ">=2.5", "not-affected"),
        ("2.4.0", "", "affected"),  # any installed version
    ],
)
def test_package_versions(tmp_path, site, installed, spec, expected):
    write_rule(tmp_path / "rules", "test-torch-range", f'packages = {{ torch = "{spec}" }}')
    site.install("torch", installed, torch_cuda="12.4")
    assert verdict(tmp_path / "rules", site)["test-torch-range"]["verdict"] == expected


@pytest.mark.parametrize(("spec", "expected"), [("", "affected"), (">=2.0", "unknown")])
def test_a_package_declared_without_a_version_is_any_version(tmp_path, spec, expected):
    """``""`` asks only that the package be there: an unpinned line in a requirements file states
    that; a range needs the version, which the line does not state."""
    write_rule(tmp_path / "rules", "test-any-flash-attn", f'packages = {{ flash-attn = "{spec}" }}')
    (tmp_path / "requirements.txt").write_text("flash-attn\n")
    found = verdict(tmp_path / "rules", None, "-r", str(tmp_path / "requirements.txt"))
    assert found["test-any-flash-attn"]["verdict"] == expected


def test_not_installed_is_not_affected(tmp_path, site):
    write_rule(tmp_path / "rules", "test-needs-xformers", 'packages = { xformers = "<0.0.29" }')
    finding = verdict(tmp_path / "rules", site)["test-needs-xformers"]
    assert finding["verdict"] == "not-affected"
    assert "not installed" in finding["reasons"][0]["text"]


@pytest.mark.parametrize("distribution", ["flash_attn", "flash-attn", "Flash_Attn"])
def test_two_spellings_of_one_project(tmp_path, site, distribution):
    write_rule(tmp_path / "rules", "test-fa", 'packages = { flash-attn = "<2.6" }')
    site.install(distribution, "2.5.8")
    assert verdict(tmp_path / "rules", site)["test-fa"]["verdict"] == "affected"


def test_pytorch_triton_counts_as_triton(tmp_path, site):
    write_rule(tmp_path / "rules", "test-triton", 'packages = { triton = ">=3.2" }')
    site.install("pytorch-triton", "3.2.0+git4b3bb1f8")
    assert verdict(tmp_path / "rules", site)["test-triton"]["verdict"] == "affected"


def test_gpu_condition_is_unknown_without_a_gpu(tmp_path, site, no_gpu):
    write_rule(tmp_path / "rules", "test-pre-ampere", 'compute_capability = "<8.0"')
    finding = verdict(tmp_path / "rules", site)["test-pre-ampere"]
    assert finding["verdict"] == "unknown"
    assert "no GPU" in finding["reasons"][0]["text"]


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        ("V100", "affected"),
        ("T4", "affected"),
        ("sm_75", "affected"),
        ("7.0", "affected"),
        ("A100", "not-affected"),
        ("RTX 4090", "not-affected"),
        ("sm_90", "not-affected"),
        ("H100", "not-affected"),
    ],
)
def test_target_gpus(tmp_path, site, gpu, expected):
    write_rule(tmp_path / "rules", "test-pre-ampere", 'compute_capability = "<8.0"')
    assert verdict(tmp_path / "rules", site, "--gpu", gpu)["test-pre-ampere"]["verdict"] == expected


def test_any_of_several_gpus(tmp_path, site):
    write_rule(tmp_path / "rules", "test-hopper", 'compute_capability = "==9.0"')
    assert (
        verdict(tmp_path / "rules", site, "--gpu", "A100", "--gpu", "H100")["test-hopper"]["verdict"]
        == "affected"
    )


def test_probed_gpu_from_nvidia_smi(tmp_path, site, fake_nvidia_smi):
    write_rule(tmp_path / "rules", "test-hopper", 'compute_capability = "==9.0"')
    fake_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 550.54.15\nNVIDIA H100 80GB HBM3, 9.0, 550.54.15")
    result = cli("probe", "--json", "--path", site.path)
    facts = json.loads(result.stdout)
    assert facts["gpu_source"] == "nvidia-smi" and len(facts["gpus"]) == 2
    assert facts["gpus"][0] == {
        "name": "NVIDIA H100 80GB HBM3",
        "compute_capability": "9.0",
        "driver": "550.54.15",
        "gfx": None,
        "capabilities": [],  # a probed GPU's capability is known exactly
    }
    assert verdict(tmp_path / "rules", site)["test-hopper"]["verdict"] == "affected"


def test_old_driver_without_compute_cap_field(tmp_path, site, fake_nvidia_smi):
    fake_nvidia_smi("Tesla V100-SXM2-16GB, 470.82.01", knows_compute_cap=False)
    facts = json.loads(cli("probe", "--json", "--path", site.path).stdout)
    assert facts["gpus"][0]["compute_capability"] == "7.0"


@pytest.mark.parametrize(
    ("version", "torch_cuda", "expected"),
    [
        ("2.5.1+cu121", "12.1", "not-affected"),
        ("2.7.0+cu128", "12.8", "affected"),
        ("2.7.0+cpu", None, "not-affected"),
    ],
)
def test_torch_cuda_build_from_version_py(tmp_path, site, version, torch_cuda, expected):
    write_rule(tmp_path / "rules", "test-cu128", 'cuda = ">=12.8"')
    site.install("torch", version, torch_cuda=torch_cuda)
    assert verdict(tmp_path / "rules", site)["test-cu128"]["verdict"] == expected


def test_torch_cuda_build_from_a_pin_label(tmp_path, site):
    write_rule(tmp_path / "rules", "test-cu128", 'cuda = ">=12.8"')
    site.install("torch", "2.5.1+cu121", torch_cuda="12.1")
    found = verdict(tmp_path / "rules", site, "--pin", "torch==2.7.0+cu128")
    assert found["test-cu128"]["verdict"] == "affected"
    unlabelled = verdict(tmp_path / "rules", site, "--pin", "torch==2.7.0")
    assert unlabelled["test-cu128"]["verdict"] == "unknown"


@pytest.mark.parametrize(
    ("pin", "expected"),
    [
        ("torch==2.1.2+cpu", "affected"),
        ("torch==2.1.2+cu121", "not-affected"),
        ("torch==2.5.1+rocm6.2", "not-affected"),
        ("torch==2.1.2", "unknown"),  # no label: the build is not known
    ],
)
def test_torch_build_condition(tmp_path, site, pin, expected):
    """xformers-torch-cpu-build: 'can't load C++/CUDA extensions' is the CPU build's only on one."""
    write_rule(tmp_path / "rules", "cpu-only", 'torch_build = ["cpu"]')
    found = verdict(tmp_path / "rules", None, "--pin", pin)
    assert found["cpu-only"]["verdict"] == expected
    bad = write_rule(tmp_path / "bad", "bad-build", 'torch_build = ["xpu"]')
    assert "affects.torch_build" in cli("rules", "validate", bad).output


def test_any_false_condition_wins_over_unknown(tmp_path, site, no_gpu):
    write_rule(tmp_path / "rules", "test-mixed", 'compute_capability = "<8.0"\npackages = { xformers = "" }')
    assert verdict(tmp_path / "rules", site)["test-mixed"]["verdict"] == "not-affected"


def test_python_and_platform_conditions(tmp_path, site):
    write_rule(tmp_path / "rules", "test-py", 'python = "<3.0"')
    write_rule(tmp_path / "rules", "test-linux", 'platform = ["linux", "windows", "darwin"]')
    found = verdict(tmp_path / "rules", site)
    assert found["test-py"]["verdict"] == "not-affected"
    assert found["test-linux"]["verdict"] == "affected"


def test_unpinned_requirement_is_unknown(tmp_path, site):
    write_rule(tmp_path / "rules", "test-tf", 'packages = { transformers = "<4.45" }')
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("transformers>=4.40\n")
    finding = verdict(tmp_path / "rules", None, "-r", requirements)["test-tf"]
    assert finding["verdict"] == "unknown"
    assert "requirements.txt:1" in finding["reasons"][0]["text"]


@pytest.mark.parametrize(
    ("distribution", "version", "name"),
    [
        ("flash_attn_3", "3.0.0b1", "flash-attn-3"),
        ("flashattn-hopper", "3.0.0b1", "flash-attn-3"),
        ("flash_attn", "3.0.0b1", "flash-attn-3"),  # early FA3 builds took FA2's name
        ("flash_attn", "2.7.4.post1", "flash-attn"),
        ("fla-core", "0.3.2", "flash-linear-attention"),
    ],
)
def test_fa3_and_fla_names(site, distribution, version, name):
    site.install(distribution, version)
    facts = json.loads(cli("probe", "--json", "--path", site.path).stdout)
    assert facts["packages"][name]["version"] == version
