"""Spot checks of the tier-3 rules audit (components transformers, torch, sdpa, flex-attention, cuda,
gpu; /work/shared/research/rules-audit-t3-transformers-torch.md) and of the turn-4 audit's corrections
to the same components (/work/shared/research/rules-audit-t4.md): the real CLI on the real rules
database, each case a version the audit read in the release wheels."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from support import cli

from attn_doctor.engine.loader import load_rules


@pytest.fixture
def check(site, no_gpu):
    """`check --format json` (no project scan) over an empty site-packages, no nvidia-smi: only the
    pins, GPUs and features a test gives. Returns the findings by rule id."""

    def run(*args: str) -> dict[str, dict]:
        result = cli("check", "--format", "json", "--no-scan", "--path", site.path, *args)
        assert result.exit_code in (0, 1), result.stdout + result.stderr
        return {f["id"]: f for f in json.loads(result.stdout)["findings"]}

    return run


@pytest.fixture
def explain(site, no_gpu, tmp_path):
    """`explain --format json` of a log on the pinned stack: each cause's verdict, in rank order."""

    def run(log: str, *args: str) -> dict[str, str]:
        path = tmp_path / "error.log"
        path.write_text(log)
        result = cli("explain", path, "--format", "json", "--no-scan", "--path", site.path, *args)
        assert result.exit_code in (0, 1), result.stdout + result.stderr
        return {cause["id"]: cause["verdict"] for cause in json.loads(result.stdout)["causes"]}

    return run


def pins(*requirements: str) -> list[str]:
    return [arg for requirement in requirements for arg in ("--pin", requirement)]


def features(*names: str) -> list[str]:
    return [arg for name in names for arg in ("--feature", name)]


def gemma2_features(*names: str) -> list[str]:
    """The Gemma-2 rules hold for a Gemma-2 model only: these stacks declare one."""
    return [*features(*names), "--model", "gemma2"]


def verdict(found: dict[str, dict], rule_id: str) -> str:
    assert rule_id in found, f"{rule_id} is not in the database"
    return found[rule_id]["verdict"]


# --- ROCm-only SDPA rules on a CUDA torch --------------------------------------------------------

ROCM_RULES = ("sdpa-rocm-fused-kernels-unavailable", "sdpa-rocm-compile-flash-backward-lse-shape")


def test_cuda_torch_2_1_on_an_a100_with_sdpa_has_no_rocm_finding(check):
    found = check(*pins("torch==2.1.0+cu121"), "--gpu", "A100", *features("sdpa"))
    assert {rule: verdict(found, rule) for rule in ROCM_RULES} == dict.fromkeys(ROCM_RULES, "not-affected")


def test_cuda_nightly_of_the_rocm_lse_window_is_not_affected(check):
    stack = (*pins("torch==2.6.0.dev20241001+cu124"), "--gpu", "H100")
    found = check(*stack, *features("sdpa", "torch_compile", "backward"))
    assert verdict(found, "sdpa-rocm-compile-flash-backward-lse-shape") == "not-affected"


def test_rocm_torch_2_1_with_sdpa_is_still_affected(check):
    found = check(*pins("torch==2.1.0+rocm5.6"), "--gpu", "MI250X", *features("sdpa"))
    assert verdict(found, "sdpa-rocm-fused-kernels-unavailable") == "affected"


# --- flex_attention ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "expected"),
    [
        ("2.5.1+cu124", "affected"),
        ("2.6.0+cu124", "affected"),
        ("2.7.0+cu126", "not-affected"),  # `_validate_embed_dim` returns before the check
        ("2.7.1+cu126", "not-affected"),
    ],
)
def test_flex_non_power_of_2_head_dim_ends_with_2_7(check, torch, expected):
    found = check(*pins(f"torch=={torch}"), "--gpu", "H100", *features("flex_attention"))
    assert verdict(found, "flex-attention-non-power-of-2-head-dim") == expected


@pytest.mark.parametrize(
    ("torch", "expected"), [("2.5.1+cu124", "not-affected"), ("2.6.0+cu124", "affected")]
)
def test_flex_block_mask_device_check_starts_with_2_6(explain, torch, expected):
    log = "ValueError: Expect q/k/v and block_mask to be on the same device but got cpu and cuda:0.\n"
    causes = explain(log, *pins(f"torch=={torch}"), *features("flex_attention"))
    assert causes["usage-flex-block-mask-device-mismatch"] == expected


# --- Gemma-2 with FlashAttention-2 (transformers) ----------------------------------------------

GEMMA2_FA2_GENERATE = gemma2_features("flash_attention_2", "sliding_window", "generate")


@pytest.mark.parametrize(
    ("transformers", "expected"),
    [
        ("4.44.0", "not-affected"),  # its every-forward form: gemma2-fa2-sliding-window-slice-4-44-0
        ("4.44.1", "affected"),  # the prefill already has the HybridCache: still sliced
        ("4.45.2", "affected"),
        ("4.46.1", "affected"),
        ("4.46.3", "affected"),
        ("4.48.2", "not-affected"),
    ],
)
def test_gemma2_fa2_prefill_slice_survives_4_44_1_in_generate(check, transformers, expected):
    found = check(*pins(f"transformers=={transformers}"), "--gpu", "A100", *GEMMA2_FA2_GENERATE)
    assert verdict(found, "gemma2-fa2-sliding-window-prefill-slice") == expected


def test_gemma2_fa2_prefill_slice_fix_is_4_48_2(check):
    found = check(*pins("transformers==4.46.1"), "--gpu", "A100", *GEMMA2_FA2_GENERATE)
    assert found["gemma2-fa2-sliding-window-prefill-slice"]["fix"]["pins"] == ["transformers>=4.48.2"]


def test_gemma2_fa2_4_44_0_every_forward(check):
    training = gemma2_features("flash_attention_2", "sliding_window", "backward")
    for transformers, expected in (("4.44.0", "affected"), ("4.44.1", "not-affected")):
        found = check(*pins(f"transformers=={transformers}"), "--gpu", "A100", *training)
        assert verdict(found, "gemma2-fa2-sliding-window-slice-4-44-0") == expected


@pytest.mark.parametrize(
    ("transformers", "expected"), [("4.46.3", "not-affected"), ("4.47.0", "affected"), ("4.47.1", "affected")]
)
def test_gemma2_fa2_4_47_attribute_error(check, transformers, expected):
    found = check(
        *pins(f"transformers=={transformers}"),
        "--gpu",
        "A100",
        *gemma2_features("flash_attention_2", "softcap"),
    )
    assert verdict(found, "gemma2-fa2-missing-top-left-mask-attribute") == expected


def test_gemma2_4_47_attribute_error_is_named_from_the_log(explain):
    log = "AttributeError: 'Gemma2Attention' object has no attribute '_flash_attn_uses_top_left_mask'\n"
    causes = explain(log, *pins("transformers==4.47.1"), *gemma2_features("flash_attention_2", "softcap"))
    assert next(iter(causes)) == "gemma2-fa2-missing-top-left-mask-attribute"
    assert causes["gemma2-fa2-missing-top-left-mask-attribute"] == "affected"


@pytest.mark.parametrize(
    ("transformers", "expected"),
    [("4.47.1", "not-affected"), ("4.48.0", "affected"), ("4.48.2", "not-affected")],
)
def test_gemma2_4_48_sliding_layer_index_error_any_attention(check, transformers, expected):
    """Eager crashes as well: no attention feature is needed."""
    found = check(
        *pins(f"transformers=={transformers}"), *gemma2_features("generate", "sliding_window", "softcap")
    )
    assert verdict(found, "gemma2-hybrid-cache-sliding-layer-index-error") == expected


def test_gemma2_4_48_index_error_from_a_cpu_log(explain):
    log = (
        '  File "/venv/lib/python3.11/site-packages/transformers/cache_utils.py", line 1690,'
        " in _static_update\n"
        "    k_out[:, :, cache_position] = key_states\n"
        "IndexError: index 4096 is out of bounds for dimension 0 with size 4096\n"
    )
    causes = explain(
        log, *pins("transformers==4.48.1"), *gemma2_features("generate", "sliding_window", "softcap")
    )
    assert causes["gemma2-hybrid-cache-sliding-layer-index-error"] == "affected"


@pytest.mark.parametrize(
    ("transformers", "expected"), [("4.42.0", "affected"), ("4.43.4", "affected"), ("4.44.0", "not-affected")]
)
def test_gemma2_fa2_static_cache_keys_before_4_44(check, transformers, expected):
    stack = gemma2_features("flash_attention_2", "generate", "softcap")
    found = check(*pins(f"transformers=={transformers}"), "--gpu", "A100", *stack)
    assert verdict(found, "gemma2-fa2-static-cache-keys-not-cut") == expected


# --- other transformers ranges ----------------------------------------------------------------


@pytest.mark.parametrize(("transformers", "expected"), [("4.37.2", "not-affected"), ("4.38.0", "affected")])
def test_cache_position_reaches_custom_forward_from_4_38(explain, transformers, expected):
    log = "TypeError: LlavaLlamaForCausalLM.forward() got an unexpected keyword argument 'cache_position'\n"
    causes = explain(log, *pins(f"transformers=={transformers}"))
    assert causes["transformers-custom-attention-module-interface"] == expected


@pytest.mark.parametrize(("transformers", "expected"), [("4.46.3", "not-affected"), ("4.47.0", "affected")])
def test_flex_attention_uncompiled_from_4_47(check, transformers, expected):
    found = check(*pins(f"transformers=={transformers}", "torch==2.5.1+cu124"), *features("flex_attention"))
    assert verdict(found, "transformers-flex-attention-uncompiled") == expected


# turn 4: flex_attention began in 4.47.0 with GPT-NeoX, whose mask code calls .dim() on a BlockMask
@pytest.mark.parametrize(("transformers", "expected"), [("4.46.3", "not-affected"), ("4.47.0", "affected")])
def test_blockmask_without_dim_from_the_first_flex_release(check, transformers, expected):
    found = check(*pins(f"transformers=={transformers}", "torch==2.5.1+cu124"), *features("flex_attention"))
    assert verdict(found, "transformers-flex-blockmask-no-dim") == expected


def test_blockmask_fix_is_in_the_yanked_4_52_0(check):
    found = check(*pins("transformers==4.52.0", "torch==2.6.0+cu124"), *features("flex_attention"))
    assert verdict(found, "transformers-flex-blockmask-no-dim") == "not-affected"


# transformers' FA2 floor: 4.34.x "> 2.0.0"; 4.35.x 2.1.0 on any build (turn 4: no hip branch yet);
# 4.36-5.3 2.1.0 on CUDA, 2.0.4 on ROCm; 5.4+ 2.3.3
@pytest.mark.parametrize(
    ("transformers", "torch", "flash_attn", "rule", "expected"),
    [
        ("4.34.1", "2.1.0+cu121", "2.0.4", "transformers-flash-attn-too-old", "not-affected"),
        ("4.34.1", "2.1.0+cu121", "2.0.4", "transformers-flash-attn-too-old-4-34", "not-affected"),
        ("4.34.1", "2.1.0+cu121", "1.0.9", "transformers-flash-attn-too-old-4-34", "affected"),
        ("4.34.1", "2.1.0+rocm5.6", "2.0.9", "transformers-flash-attn-too-old-4-35", "not-affected"),
        ("4.35.2", "2.1.0+rocm5.6", "2.0.9", "transformers-flash-attn-too-old-4-35", "affected"),
        ("4.35.2", "2.1.0+rocm5.6", "2.0.9", "transformers-flash-attn-too-old-rocm", "not-affected"),
        ("4.35.2", "2.1.0+rocm5.6", "2.1.0", "transformers-flash-attn-too-old-4-35", "not-affected"),
        ("4.35.2", "2.1.0+cu121", "2.0.9", "transformers-flash-attn-too-old-4-35", "affected"),
        ("4.35.2", "2.1.0+cu121", "2.0.9", "transformers-flash-attn-too-old", "not-affected"),  # 4-35's
        ("4.36.0", "2.1.0+rocm5.6", "2.0.9", "transformers-flash-attn-too-old-4-35", "not-affected"),
        ("4.36.0", "2.1.0+cu121", "2.0.9", "transformers-flash-attn-too-old", "affected"),
        ("4.40.0", "2.1.0+cu121", "2.0.4", "transformers-flash-attn-too-old", "affected"),
        ("4.40.0", "2.1.0+rocm5.6", "2.0.4", "transformers-flash-attn-too-old", "not-affected"),
        ("4.40.0", "2.1.0+rocm5.6", "2.0.4", "transformers-flash-attn-too-old-rocm", "not-affected"),
        ("4.40.0", "2.1.0+rocm5.6", "2.0.3", "transformers-flash-attn-too-old-rocm", "affected"),
        ("5.4.0", "2.8.0+cu128", "2.0.4", "transformers-flash-attn-too-old", "not-affected"),  # 2-3-3's
    ],
)
def test_flash_attn_floor_per_release_and_build(check, transformers, torch, flash_attn, rule, expected):
    stack = pins(f"transformers=={transformers}", f"torch=={torch}", f"flash-attn=={flash_attn}")
    assert verdict(check(*stack, *features("flash_attention_2")), rule) == expected


def test_flash_attn_4_35_words_name_its_floor(explain):
    """4.35.x says "Make sure to have at least the version 2.1.0" (modeling_utils.py:1275)."""
    line = (
        "ImportError: Flash Attention 2 is not available. Please refer to the documentation of"
        " https://github.com/Dao-AILab/flash-attention for installing it."
        " Make sure to have at least the version 2.1.0\n"
    )
    stack = pins("transformers==4.35.2", "torch==2.1.0+rocm5.6", "flash-attn==2.0.9")
    causes = explain(line, *stack, *features("flash_attention_2"))
    assert next(iter(causes)) == "transformers-flash-attn-too-old-4-35"
    assert causes["transformers-flash-attn-too-old-4-35"] == "affected"


@pytest.mark.parametrize(
    "line",
    [
        # 4.34.x and 4.35.x, read in their modeling_utils.py
        "ImportError: Flash Attention 2.0 is not available. Please refer to the documentation of"
        " https://github.com/Dao-AILab/flash-attention for installing it.",
        "ImportError: Flash Attention 2 is not available. Please refer to the documentation of"
        " https://github.com/Dao-AILab/flash-attention for installing it."
        " Make sure to have at least the version 2.1.0",
    ],
)
def test_flash_attn_not_installed_in_4_34_and_4_35_words(explain, line):
    causes = explain(line + "\n", *pins("transformers==4.34.1"))
    assert "usage-flash-attn-not-installed" in causes


# --- torch, CUDA, GPU -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "python", "expected"),
    [
        ("2.0.1+cu118", "3.11", "affected"),
        ("2.0.1+cu118", "3.10", "not-affected"),
        ("2.1.2+cu121", "3.11", "not-affected"),
    ],
)
def test_torch_2_0_compile_refuses_python_3_11(tmp_path, torch, python, expected):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch=={torch}\n")
    result = cli(
        "check",
        "--format",
        "json",
        "--no-scan",
        "-r",
        requirements,
        "--python",
        python,
        "--feature",
        "torch_compile",
    )
    found = {f["id"]: f for f in json.loads(result.stdout)["findings"]}
    assert verdict(found, "torch-compile-python-3-11-needs-torch-2-1") == expected


# turn 4: the native MPS SDPA op, first in 2.5.0, sizes its output by the query's head dim until 2.12
@pytest.mark.parametrize(
    ("torch", "expected"),
    [("2.4.1", "not-affected"), ("2.5.0", "affected"), ("2.11.0", "affected"), ("2.12.0", "not-affected")],
)
def test_mps_value_head_dim_from_the_first_native_mps_sdpa(tmp_path, torch, expected):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch=={torch}\n")
    args = ("-r", requirements, "--platform", "darwin", "--feature", "sdpa")
    result = cli("check", "--format", "json", "--no-scan", *args)
    found = {f["id"]: f for f in json.loads(result.stdout)["findings"]}
    assert verdict(found, "sdpa-mps-value-head-dim-mismatch") == expected


def test_cudnn_mismatch_in_torch_2_words(explain):
    """torch 2.x's torch/backends/cudnn/__init__.py: two spaces before 'against', 'found runtime version'."""
    log = (
        "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 1, 0)"
        " but found runtime version (8, 9, 7). PyTorch already comes bundled with cuDNN."
        " One option to resolving this error is to ensure PyTorch can find the bundled cuDNN."
        " Looks like your LD_LIBRARY_PATH contains incompatible version of cudnn."
        " Please either remove it from the path or install cudnn (9, 1, 0)\n"
    )
    causes = explain(log, *pins("torch==2.4.0+cu121"))
    assert next(iter(causes)) == "cudnn-system-library-shadows-torch-bundled"


def _torch_archs() -> dict:
    path = resources.files("attn_doctor.releases") / "snapshot" / "torch-cuda-archs.json"
    return json.loads(path.read_text())["releases"]


@pytest.mark.parametrize("gpu", ["sm_100", "sm_120"])
@pytest.mark.parametrize("torch", ["2.6.0+cu124", "2.7.1+cu126"])
def test_blackwell_fix_never_proposes_a_torch_without_blackwell_code(check, gpu, torch):
    """The fix's torch pin, installed as pip would (the release's default wheel): the first release
    it allows must have code for the GPU, and checked again as that wheel, the stack is clean."""
    found = check(*pins(f"torch=={torch}"), "--gpu", gpu)
    finding = found["gpu-blackwell-needs-cuda-12-8"]
    assert finding["verdict"] == "affected"
    torch_pins = [pin for pin in finding["fix"]["pins"] if pin.startswith("torch")]
    assert torch_pins, finding["fix"]
    archs = _torch_archs()
    for pin in torch_pins:
        allowed = SpecifierSet(pin[len("torch") :])
        first = min((v for v in archs if Version(v) in allowed), key=Version)
        variant = archs[first]["default_cuda"]
        capability = gpu.removeprefix("sm_")
        assert f"{capability[:-1]}.{capability[-1]}" in archs[first]["variants"][variant]["archs"], (
            pin,
            first,
        )
        again = check(*pins(f"torch=={first}+{variant}"), "--gpu", gpu)
        assert verdict(again, "gpu-blackwell-needs-cuda-12-8") == "not-affected", (pin, first, variant)
        assert verdict(again, "torch-wheel-lacks-gpu-arch") == "not-affected", (pin, first, variant)


# --- references ---------------------------------------------------------------------------------

AUDITED = {"transformers", "torch", "sdpa", "flex-attention", "cuda", "gpu"}


def test_references_point_upstream_not_at_package_indexes():
    indexes = (
        "pypi.org",
        "pypi.python.org",
        "files.pythonhosted.org",
        "download.pytorch.org",
        "anaconda.org",
    )
    cited = [
        (rule.id, url)
        for rule in load_rules().rules
        if rule.component in AUDITED
        for url in rule.references
        if any(host in url for host in indexes)
    ]
    assert cited == []
