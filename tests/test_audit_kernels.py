"""The kernel rules corrected by the 2026-11 audit (issue 26, item 1:
/work/shared/research/rules-audit-t3-kernels.md), checked through the real CLI.

Each test fails on the rule as it was before the audit: a range that matched releases that work, a
symptom that quoted no release's text, or a fix that named a release that still fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO, cli

FIXTURE = REPO / "tests/fixtures/healthy/flash-attn-current.json"
PTX_RULES = (
    "triton-ptx-version-cuda-12-6-before-3-2",
    "triton-ptx-version-vs-ptxas",
    "triton-ptx-version-cuda-13-before-3-5",
)


def findings(*args: str | Path) -> dict[str, dict]:
    result = cli("check", "--format", "json", "--no-scan", *args)
    assert result.exit_code in (0, 1), result.stderr
    return {f["id"]: f for f in json.loads(result.stdout)["findings"]}


def verdict(rule_id: str, *args: str | Path) -> str | None:
    """The rule's verdict in `check`, or None when `check` does not list it (install/usage rules)."""
    found = findings(*args).get(rule_id)
    return None if found is None else found["verdict"]


def env_file(tmp_path: Path, nvcc: str, **packages: str) -> Path:
    """A probed environment (the H100 fixture) with these packages and this CUDA toolkit on PATH."""
    document = json.loads(FIXTURE.read_text())
    document["packages"] = {
        name: {"name": name, "version": version, "distribution": name, "origin": "test"}
        for name, version in packages.items()
    }
    document["nvcc"] = nvcc
    path = tmp_path / "env.json"
    path.write_text(json.dumps(document))
    return path


def cause_verdicts(tmp_path: Path, log: str, *args: str) -> dict[str, str]:
    """The rules `explain` names for this log, most likely first, each with its verdict."""
    path = tmp_path / "error.log"
    path.write_text(log)
    result = cli("explain", path, "--format", "json", "--no-scan", *args)
    assert result.exit_code in (0, 1), result.stderr
    return {cause["id"]: cause["verdict"] for cause in json.loads(result.stdout)["causes"]}


def causes(tmp_path: Path, log: str, *args: str) -> list[str]:
    """The rule ids `explain` names for this log, most likely first."""
    return list(cause_verdicts(tmp_path, log, *args))


# triton-ptx-version-vs-ptxas (WRONG): triton < 3.5 with nvcc >= 12.6 also flagged 3.3/3.4 with a
# CUDA 12.x toolkit, which ptx_get_version maps (80 + minor - 1). Now one rule per toolkit range.
@pytest.mark.parametrize(
    ("triton", "nvcc", "expected"),
    [
        ("3.1.0", "12.6", "triton-ptx-version-cuda-12-6-before-3-2"),  # 80 + minor: .version 8.6
        ("3.2.0", "12.6", None),  # 3.2 maps 12.6 to PTX 8.5 (old rule: affected)
        ("3.1.0", "12.8", "triton-ptx-version-vs-ptxas"),
        ("3.2.0", "12.8", "triton-ptx-version-vs-ptxas"),  # 3.2 raises for 12.7+
        ("3.3.1", "12.8", None),  # old rule: affected
        ("3.4.0", "12.9", None),  # old rule: affected
        ("3.3.1", "13.0", "triton-ptx-version-cuda-13-before-3-5"),
        ("3.0.0", "13.0", "triton-ptx-version-cuda-13-before-3-5"),
        ("3.5.0", "13.0", None),
    ],
)
def test_ptx_version_rules_follow_ptx_get_version(tmp_path, triton, nvcc, expected):
    found = findings("--env-file", env_file(tmp_path, nvcc, triton=triton))
    affected = [rule for rule in PTX_RULES if found[rule]["verdict"] == "affected"]
    assert affected == ([expected] if expected else [])


@pytest.mark.parametrize(
    ("triton", "nvcc", "rule", "pin"),
    [
        ("3.1.0", "12.6", "triton-ptx-version-cuda-12-6-before-3-2", "triton>=3.2"),
        ("3.1.0", "12.8", "triton-ptx-version-vs-ptxas", "triton>=3.3"),  # old pin: triton>=3.5
        ("3.4.0", "13.0", "triton-ptx-version-cuda-13-before-3-5", "triton>=3.5"),
    ],
)
def test_ptx_version_fix_names_the_first_triton_that_knows_the_toolkit(tmp_path, triton, nvcc, rule, pin):
    found = findings("--env-file", env_file(tmp_path, nvcc, triton=triton))[rule]
    assert found["verdict"] == "affected" and found["fix"]["pins"] == [pin]


def test_cuda_13_message_of_triton_3_0_and_3_1_is_named(tmp_path):
    """3.0/3.1 raise 'Triton only support CUDA 10.0 or higher' with no version: the old symptom
    (', but got CUDA version: 1[2-9]') missed it."""
    log = "RuntimeError: Triton only support CUDA 10.0 or higher\n"
    assert causes(tmp_path, log, "--pin", "triton==3.1.0")[:1] == ["triton-ptx-version-cuda-13-before-3-5"]


# fla-triton-hopper-mma-layout (WRONG): the assertion is in libtriton.so of 3.0.0/3.1.0, not 3.2.0.
@pytest.mark.parametrize(("triton", "expected"), [("3.1.0", "affected"), ("3.2.0", "not-affected")])
def test_fla_mma_layout_assertion_ends_with_triton_3_1(triton, expected):
    args = ("--pin", "flash-linear-attention==0.1.1", "--pin", f"triton=={triton}", "--gpu", "H100")
    assert verdict("fla-triton-hopper-mma-layout", *args, "--feature", "backward") == expected


# flash-attn-build-requires-nvcc (WRONG): the module-level raise stayed in 2.0.7-2.1.1 (#509).
def test_nvcc_rule_fix_names_2_1_2_post3_and_issue_509(tmp_path):
    log = (
        '  File "/tmp/pip-install-x/flash-attn_4b/setup.py", line 120, in <module>\n'
        '    raise_if_cuda_home_none("flash_attn")\n'
        "RuntimeError: flash_attn was requested, but nvcc was not found.  Are you sure your "
        "environment has nvcc available?\n"
    )
    path = tmp_path / "error.log"
    path.write_text(log)
    result = cli("explain", path, "--format", "json", "--no-scan", "--pin", "flash-attn==2.1.1")
    cause = json.loads(result.stdout)["causes"][0]
    assert cause["id"] == "flash-attn-build-requires-nvcc"
    assert "2.1.2.post3" in cause["fix"]["summary"] and "2.0.7 or later" not in cause["fix"]["summary"]
    assert "https://github.com/Dao-AILab/flash-attention/issues/509" in cause["references"]


# flash-attn-2-5-7-wheel-torch-2-3-undefined-symbol (PARTLY): 2.5.1.post1-2.5.6 built their torch-2.3
# wheels on older torch 2.3 nightlies too (publish.yml), so they carry the same int SetDevice symbol.
@pytest.mark.parametrize(
    ("flash_attn", "expected"),
    [("2.5.1.post1", "affected"), ("2.5.6", "affected"), ("2.5.7", "affected"), ("2.5.8", "not-affected")],
)
def test_torch_2_3_nightly_built_wheels(flash_attn, expected):
    args = ("--pin", f"flash-attn=={flash_attn}", "--pin", "torch==2.3.0+cu121", "--gpu", "A100")
    assert verdict("flash-attn-2-5-7-wheel-torch-2-3-undefined-symbol", *args) == expected


# flash-attn-windows-msvc-constexpr-c2975 (PARTLY): 0.2.1-1.0.9 carry the #52 fix.
@pytest.mark.parametrize(
    ("flash_attn", "expected"),
    [
        ("0.2.0", "affected"),
        ("0.2.1", "not-affected"),
        ("0.2.6.post1", "not-affected"),
        ("1.0.9", "not-affected"),
        ("2.0.0.post1", "affected"),
        ("2.3.1", "affected"),
        ("2.3.2", "not-affected"),
    ],
)
def test_msvc_c2975_skips_the_fixed_0_x_and_1_x_releases(tmp_path, flash_attn, expected):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"flash-attn=={flash_attn}\n")
    args = ("-r", requirements, "--platform", "windows", "--feature", "source_build")
    assert verdict("flash-attn-windows-msvc-constexpr-c2975", *args) == expected


# flash-attn-rocm-before-2-6-2 (PARTLY): an installation fault named from the log, not a `check` bug.
def test_rocm_rule_is_an_install_rule(tmp_path):
    args = ("--pin", "flash-attn==2.5.8", "--pin", "torch==2.3.0+rocm6.0")
    assert verdict("flash-attn-rocm-before-2-6-2", *args) is None
    log = (
        "RuntimeError: flash_attn was requested, but nvcc was not found.\n"
        "      torch.__version__  = 1.13.1+rocm5.2\n"
    )
    assert "flash-attn-rocm-before-2-6-2" in causes(tmp_path, log, "--pin", "flash-attn==1.0.4")


# flash-attn-rocm-ck-gpu-unsupported (turn 4, nit): setup.py's CK target list changed in 2.8.0 (PR
# #1586): gfx950 is refused before it, gfx940/gfx941 from it. Each is its own rule now.
CK_GFX950 = "flash-attn-rocm-ck-gfx950-before-2-8"
CK_GFX941 = "flash-attn-rocm-ck-gfx940-gfx941-from-2-8"


@pytest.mark.parametrize(
    ("gfx", "flash_attn", "rule", "expected"),
    [
        ("gfx950", "2.6.2", CK_GFX950, "affected"),
        ("gfx950", "2.7.4.post1", CK_GFX950, "affected"),
        ("gfx950", "2.8.0", CK_GFX950, "not-affected"),
        ("gfx941", "2.7.4.post1", CK_GFX941, "not-affected"),
        ("gfx941", "2.8.0", CK_GFX941, "affected"),
        ("gfx940", "2.8.3", CK_GFX941, "affected"),
    ],
)
def test_ck_target_list_changed_in_2_8(tmp_path, gfx, flash_attn, rule, expected):
    log = f"AssertionError: One of GPU archs of ['{gfx}'] is invalid or not supported by Flash-Attention\n"
    args = ("--pin", f"flash-attn=={flash_attn}", "--pin", "torch==2.7.1+rocm6.3")
    found = cause_verdicts(tmp_path, log, *args)
    assert found[rule] == expected
    if expected == "affected":
        assert next(iter(found)) == rule


# flash-attn-v1-backward-headdim-requires-sm80 (PARTLY): 1.0.0-1.0.3.post0 check is_sm80 || is_sm90.
def test_v1_backward_message_of_1_0_0_to_1_0_3(tmp_path):
    log = "RuntimeError: Expected is_sm80 || is_sm90 to be true, but got false.\n"
    args = ("--pin", "flash-attn==1.0.3", "--gpu", "RTX 3090")
    assert causes(tmp_path, log, *args)[:1] == ["flash-attn-v1-backward-headdim-requires-sm80"]


# triton-fp8e4nv-requires-sm89 (PARTLY): 2.2-3.1 say "fp8e4nv data type is not supported on CUDA arch < 89".
def test_fp8e4nv_message_of_triton_3_1(tmp_path):
    log = "AssertionError: fp8e4nv data type is not supported on CUDA arch < 89\n"
    args = ("--pin", "triton==3.1.0", "--gpu", "A100")
    assert causes(tmp_path, log, *args)[:1] == ["triton-fp8e4nv-requires-sm89"]


# usage-triton-dot-dim-below-16 (PARTLY): from 3.2 the assertion is "Input shapes should have M >= 16, ...".
def test_dot_dim_message_of_triton_3_2(tmp_path):
    log = "AssertionError: Input shapes should have M >= 16, N >= 16 and K >= 16\n"
    assert causes(tmp_path, log, "--pin", "triton==3.2.0")[:1] == ["usage-triton-dot-dim-below-16"]
