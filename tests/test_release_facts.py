"""The shipped release-facts snapshot, end to end through the real CLI: implied facts, the checks
it drives (xformers and triton pins, flash-attn's wheel matrix), fixes that name only real
releases, and the rules' own versions checked against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from support import cli

from attn_doctor.engine.loader import load_rules
from attn_doctor.releases.facts import snapshot


def check(*args: str | Path) -> tuple[int, dict]:
    result = cli("check", "--format", "json", "--no-scan", *args)
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def finding(document: dict, rule_id: str) -> dict:
    return next(f for f in document["findings"] if f["id"] == rule_id)


def requirements(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_declared_torch_implies_its_triton_and_cuda_build(tmp_path):
    _, document = check("-r", requirements(tmp_path, "torch==2.5.1"))
    triton = document["environment"]["packages"]["triton"]
    assert triton["version"] == "3.1.0"
    assert triton["origin"].startswith("implied by torch 2.5.1 (Requires-Dist: triton==3.1.0")
    assert document["environment"]["torch_build"] == {"cuda": "12.4", "hip": None}
    assert document["environment"]["origins"]["torch_build"].startswith("implied by torch 2.5.1")
    text = cli("check", "-v", "--no-scan", "-r", tmp_path / "requirements.txt").stdout
    assert "implied by torch 2.5.1" in text


def test_xformers_built_for_another_torch(tmp_path):
    target = requirements(tmp_path, "torch==2.7.0+cu126", "xformers==0.0.29.post3")
    code, document = check("-r", target, "--gpu", "A100")
    found = finding(document, "xformers-built-for-another-torch")
    assert code == 1 and found["verdict"] == "affected" and found["failing"]
    reason = next(r for r in found["reasons"] if r["condition"] == "release")
    assert "xformers 0.0.29.post3 requires torch==2.6.0" in reason["text"]
    assert "torch==2.6.0" in reason["suggestion"] and "xformers==0.0.30" in reason["suggestion"]
    plan = json.loads(cli("fix", "--format", "json", "--no-scan", "-r", target, "--gpu", "A100").stdout)
    assert plan["failing_after"] == []
    assert plan["constraints"] in (["xformers==0.0.30"], ["torch==2.6.0"])


def test_matching_xformers_and_torch_are_clean(tmp_path):
    _, document = check("-r", requirements(tmp_path, "torch==2.7.0", "xformers==0.0.30"), "--gpu", "A100")
    assert finding(document, "xformers-built-for-another-torch")["verdict"] == "not-affected"


def test_flash_attn_without_a_wheel_for_the_targets_torch(tmp_path):
    target = requirements(tmp_path, "torch==2.5.1+cu121", "flash-attn==2.6.3", "transformers==4.51.0")
    _, document = check("-r", target, "--gpu", "A100")
    found = finding(document, "flash-attn-no-prebuilt-wheel-for-torch")
    assert found["verdict"] == "affected"
    reason = next(r for r in found["reasons"] if r["condition"] == "release")
    assert "no prebuilt wheel for torch 2.5 with CUDA 12" in reason["text"]
    assert "flash-attn==2.7.0.post2 (has a wheel" in reason["suggestion"]
    assert "torch==2.4.0 (the newest torch flash-attn 2.6.3 has a wheel for)" in reason["suggestion"]
    plan = json.loads(
        cli(
            "fix", "--format", "json", "--no-scan", "-r", target, "--gpu", "A100", "--fail-on", "warning"
        ).stdout
    )
    versions = {c["package"]: c["proposed"] for c in plan["changes"]}
    flash_attn = Version(versions.get("flash-attn", "2.6.3"))
    torch = Version(versions.get("torch", "2.5.1"))
    assert flash_attn >= Version("2.7.0") or torch < Version("2.5")  # never 2.6.3 with torch >= 2.5
    assert "flash-attn-no-prebuilt-wheel-for-torch" not in plan["failing_after"]


def test_installed_triton_that_torch_does_not_pin(site):
    site.install("torch", "2.5.1+cu121", torch_cuda="12.1")
    site.install("triton", "3.9.0")
    _, document = check("--path", site.path)
    found = finding(document, "torch-requires-other-triton")
    assert found["verdict"] == "affected"
    assert "torch 2.5.1+cu121 requires triton==3.1.0" in found["reasons"][-1]["text"]
    site.path.joinpath("triton-3.9.0.dist-info").rename(site.path / "triton-3.1.0.dist-info")
    (site.path / "triton-3.1.0.dist-info" / "METADATA").write_text("Name: triton\nVersion: 3.1.0\n")
    assert finding(check("--path", site.path)[1], "torch-requires-other-triton")["verdict"] == "not-affected"


def test_a_release_newer_than_the_snapshot_is_said_so(tmp_path):
    _, document = check("-r", requirements(tmp_path, "torch==2.7.0", "xformers==0.9.0"))
    found = finding(document, "xformers-built-for-another-torch")
    assert found["verdict"] == "unknown"
    assert f"newer than the release database (snapshot of {snapshot().generated})" in json.dumps(found)


def test_db_info_names_the_snapshot():
    text = cli("db", "info").stdout
    assert f"snapshot of {snapshot().generated}" in text and "tools/refresh_release_facts.py" in text
    document = json.loads(cli("db", "info", "--format", "json").stdout)
    assert document["generated"] == snapshot().generated
    assert document["packages"]["torch"]["releases"] >= 30


def _named_versions() -> list[tuple[str, str, str]]:
    """(rule, package, version) for every version a shipped rule's ranges and pins name."""
    named = []
    for rule in load_rules().rules:
        sets = list(rule.affects.packages.items())
        for pin in rule.fix_pins:
            name = pin.split(">")[0].split("<")[0].split("=")[0].split("!")[0].split("~")[0].strip()
            sets.append((name, SpecifierSet(pin[len(name) :])))
        for package, specifiers in sets:
            for specifier in specifiers:
                if not specifier.version.endswith(".*"):
                    named.append((rule.id, package, specifier.version))
    return named


@pytest.mark.parametrize(("rule", "package", "version"), _named_versions())
def test_every_version_a_rule_names_is_a_release(rule, package, version):
    facts = snapshot()
    distribution = {"flash-linear-attention": "fla-core", "flash-attn-3": ""}.get(package, package)
    releases = facts.releases(distribution) if distribution else {}
    if not releases or Version(version).is_prerelease:
        pytest.skip(f"{package} {version}: not in the snapshot, or a nightly named on purpose")
    known = {Version(v) for v in releases} | {Version(v) for v in facts.releases(package)}
    assert Version(version) in known, f"{rule}: {package} {version} was never released"


def test_an_installed_release_newer_than_the_snapshot_is_never_called_clean(site):
    site.install("transformers", "9.0.0")
    _, document = check("--path", site.path)
    assert document["notes"] == [
        f"transformers 9.0.0 is newer than the release database (snapshot of {snapshot().generated}): "
        "checks drawn from release facts cannot judge it"
    ]
    assert "note: transformers 9.0.0 is newer" in cli("check", "--path", site.path, "--no-scan").stdout


def test_a_wheel_without_code_for_the_gpu(tmp_path):
    """2.7.4.post1's wheels were built with CUDA 12.4.1: no sm_120 code, though its source has it."""
    target = requirements(tmp_path, "torch==2.6.0+cu124", "flash-attn==2.7.4.post1")
    _, document = check("-r", target, "--gpu", "RTX 5090")
    found = finding(document, "flash-attn-wheel-lacks-gpu-arch")
    assert found["verdict"] == "affected"
    reason = next(r for r in found["reasons"] if r["condition"] == "release")
    assert "built with CUDA 12.4.1) has code for sm_80, sm_90, not RTX 5090 (sm_120)" in reason["text"]
    assert reason["suggestion"] == "flash-attn==2.8.0.post2 (its wheel has sm_120 code)"
    _, same_on_hopper = check("-r", target, "--gpu", "H100")
    assert finding(same_on_hopper, "flash-attn-wheel-lacks-gpu-arch")["verdict"] == "not-affected"
    _, ampere = check("-r", target, "--gpu", "RTX 4090")  # sm_80 code runs on 8.9
    assert finding(ampere, "flash-attn-wheel-lacks-gpu-arch")["verdict"] == "not-affected"


def test_a_wheel_built_against_a_torch_nightly_is_no_wheel_for_the_release(tmp_path):
    """flash-attn 2.7.3's matrix builds for torch 2.6.0.dev20241001: torch 2.6.0 has no wheel there."""
    target = requirements(tmp_path, "torch==2.6.0+cu124", "flash-attn==2.7.3")
    _, document = check("-r", target, "--gpu", "A100")
    assert finding(document, "flash-attn-no-prebuilt-wheel-for-torch")["verdict"] == "affected"


def test_python_and_platform_choose_the_markers_read(tmp_path):
    """torch 2.5.1 pins triton only on Linux x86_64 for Python < 3.13 (its metadata's markers)."""
    target = requirements(tmp_path, "torch==2.5.1")
    assert "triton" in check("-r", target, "--python", "3.12")[1]["environment"]["packages"]
    assert "triton" not in check("-r", target, "--python", "3.13")[1]["environment"]["packages"]
    assert "triton" not in check("-r", target, "--platform", "windows")[1]["environment"]["packages"]
    env = check("-r", target, "--platform", "linux-aarch64")[1]["environment"]
    assert (env["platform"], env["machine"], env["origins"]["machine"]) == ("linux", "aarch64", "--platform")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--python", "3.12"), "--python: describes a declared target"),
        (("-r", "REQ", "--python", "three"), "--python 'three': expected a Python version"),
        (("-r", "REQ", "--platform", "solaris"), "--platform 'solaris': expected one of linux"),
    ],
)
def test_python_and_platform_are_checked(tmp_path, args, needle):
    target = requirements(tmp_path, "torch==2.5.1")
    result = cli("check", *[str(target) if a == "REQ" else a for a in args])
    assert result.exit_code == 2 and needle in result.stderr


@pytest.mark.parametrize(
    ("torch", "cuda", "driver", "verdict"),
    [
        ("2.5.1+cu121", "12.1", "520.61.05", "affected"),  # a CUDA 11 driver
        ("2.5.1+cu121", "12.1", "525.60.13", "not-affected"),  # NVIDIA's minimum for 12.x
        ("2.11.0+cu130", "13.0", "575.57.08", "affected"),  # a CUDA 12 driver
        ("2.11.0+cu130", "13.0", "580.159.04", "not-affected"),
        ("2.1.0+cu118", "11.8", "450.80.02", "not-affected"),
    ],
)
def test_driver_against_the_table(tmp_path, torch, cuda, driver, verdict):
    document = json.loads((Path(__file__).parent / "fixtures/healthy/h100-device.json").read_text())
    document["packages"]["torch"]["version"] = torch
    document["torch_build"]["cuda"] = cuda
    document["gpus"][0]["driver"] = driver
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps(document))
    found = finding(check("--env-file", env_file)[1], "cuda-driver-too-old-for-torch")
    assert found["verdict"] == verdict
    if verdict == "affected":
        major = cuda.split(".")[0]
        assert f"NVIDIA driver {driver} is older than the minimum for CUDA {major}.x" in json.dumps(found)


def test_fix_says_why_each_alternative_was_not_proposed(tmp_path):
    target = requirements(tmp_path, "torch==2.5.1+cu121", "flash-attn==2.6.3", "transformers==4.51.0")
    args = ("fix", "--no-scan", "-r", target, "--python", "3.11", "--gpu", "A100", "--fail-on", "warning")
    text = cli(*args, "-v").stdout
    wheel = "releases/download/v2.7.0.post2/flash_attn-2.7.0.post2+cu12torch2.5cxx11abiFALSE-cp311-cp311"
    assert f"pip install 'https://github.com/Dao-AILab/flash-attention/{wheel}-linux_x86_64.whl'" in text
    assert (
        "  torch==2.8: triggers flash-attn-no-prebuilt-wheel-for-torch (flash-attn 2.7.0.post2 has no "
        "prebuilt wheel for torch 2.8 with CUDA 12" in text
    )
    plan = json.loads(cli(*args, "--format", "json").stdout)
    rejected = {(r["package"], r["version"]): r["reason"] for r in plan["rejected"]}
    no_wheel = "triggers flash-attn-no-prebuilt-wheel-for-torch"
    assert rejected[("flash-attn", "2.6.0.post1")].startswith(no_wheel)
    assert "Not proposed:" not in cli(*args).stdout  # only with -v


@pytest.mark.parametrize(
    ("triton", "gpu", "verdict", "needle"),
    [
        ("3.2.0", "RTX 5090", "affected", "triton 3.2.0 bundles ptxas 12.4.99, which has no sm_120"),
        ("3.3.0", "RTX 5090", "not-affected", "bundled ptxas knows every GPU here"),  # its Blackwell ptxas
        ("3.5.0", "sm_121", "affected", "triton 3.5.0 bundles ptxas 12.8.93, which has no sm_121"),
        ("3.6.0", "sm_121", "not-affected", "bundled ptxas knows every GPU here"),
        ("3.2.0", "H100", "not-affected", "bundled ptxas knows every GPU here"),
    ],
)
def test_triton_bundled_ptxas_against_the_gpu(tmp_path, triton, gpu, verdict, needle):
    target = requirements(tmp_path, "torch==2.6.0+cu126", f"triton=={triton}")
    found = finding(check("-r", target, "--gpu", gpu)[1], "triton-bundled-ptxas-lacks-gpu-arch")
    assert found["verdict"] == verdict and needle in json.dumps(found)
    if verdict == "affected" and triton == "3.2.0":
        assert "triton==3.3.0 (bundles a ptxas with sm_120)" in json.dumps(found)


@pytest.mark.parametrize(
    "torch, gpu, affected, names",
    [
        # the 2.7.0 cu126 wheel on PyPI has sm_50..sm_90; cu128 has sm_75..sm_120 (pytorch PR #145792)
        ("2.7.0+cu126", "sm_120", True, "cu128"),
        ("2.7.0+cu128", "V100", True, "cu126"),
        # sm_70 came back to cu128 in 2.8 (pytorch#157517) and left again in 2.11 (pytorch#182250)
        ("2.9.0+cu128", "V100", False, ""),
        ("2.11.0+cu128", "V100", True, "cu126"),
        ("2.11.0+cu130", "H100", False, ""),
        ("2.11.0+cu130", "sm_121", False, ""),  # sm_120 code runs on 12.1 (DGX Spark)
    ],
)
def test_torch_variant_lacks_gpu(torch: str, gpu: str, affected: bool, names: str) -> None:
    result = cli("check", "--no-scan", "--pin", f"torch=={torch}", "--gpu", gpu, "--format", "json")
    finding = next(
        f for f in json.loads(result.stdout)["findings"] if f["id"] == "torch-wheel-lacks-gpu-arch"
    )
    assert finding["verdict"] == ("affected" if affected else "not-affected")
    if affected:
        assert names in json.dumps(finding)


def test_torch_variant_unknown_when_only_inferred() -> None:
    """2.7.0's cu118 list is inferred, not read from a wheel or script: unknown, never a guess."""
    result = cli("check", "--no-scan", "--pin", "torch==2.7.0+cu118", "--gpu", "sm_120", "--format", "json")
    finding = next(
        f for f in json.loads(result.stdout)["findings"] if f["id"] == "torch-wheel-lacks-gpu-arch"
    )
    assert finding["verdict"] == "unknown"
