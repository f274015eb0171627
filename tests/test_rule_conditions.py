"""Rule conditions against real projects' files (issue 37, cause 2 and the stack half of cause 3):
a way around a bug that a release takes ([[affects.unless]]), a use condition naming the API that has
the bug, a prebuilt URL wheel, ranges decided over the releases they admit, implied packages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REPO, cli, write_rule

FIXTURES = REPO / "tests" / "fixtures" / "rulecond"
OPEN_INSTRUCT = FIXTURES / "open-instruct"  # allenai/open-instruct at e6c3044 (README.md there)
# fla's own layers at v0.5.1, each importing one of the two delta rules (verbatim lines):
# fla/layers/gated_deltanet.py:21 and fla/layers/delta_net.py:20
GATED_IMPORT = (
    "from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule\n"
)
DELTA_IMPORT = "from fla.ops.delta_rule import chunk_delta_rule, fused_recurrent_delta_rule\n"


def findings(*args: str | Path) -> dict[str, dict]:
    result = cli("check", "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return {f["id"]: f for f in json.loads(result.stdout)["findings"]}


def environment(*args: str | Path) -> dict:
    result = cli("check", "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["environment"]


def texts(finding: dict) -> str:
    return " | ".join(reason["text"] for reason in finding["reasons"])


def pins(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


# --- 1. fla-gated-bwd-hopper-triton-3-4: tilelang is fla's own way around it -----------------------


def test_open_instruct_lock_with_tilelang_is_not_affected_by_the_gated_fla_rule():
    """open-instruct locks fla-core 0.5.0, triton 3.6.0 and tilelang 0.1.10 ("Provides the tilelang
    backend for fla's gated chunk_bwd_dqkwg", its pyproject): fla 0.5.0 routes the kernel to tilelang."""
    found = findings("-r", OPEN_INSTRUCT / "uv.lock", "--gpu", "H100", "--feature", "backward", "--no-scan")
    rule = found["fla-gated-bwd-hopper-triton-3-4"]
    assert rule["verdict"] == "not-affected"
    assert "tilelang 0.1.10 is in >=0.1.9" in texts(rule)


@pytest.mark.parametrize(
    ("lines", "expected", "said"),
    [
        (["flash-linear-attention==0.5.0"], "affected", "tilelang is not installed"),
        (["flash-linear-attention==0.5.0", "tilelang==0.1.10"], "not-affected", "send the gated backward"),
        # fla 0.4.2 has no tilelang backend: tilelang beside it changes nothing
        (["flash-linear-attention==0.4.2", "tilelang==0.1.10"], "affected", "0.4.2 is not in <0.5.2,>=0.5.0"),
        # 0.5.2 takes tilelang only where it finds an nvcc: a declared target does not state one
        (["flash-linear-attention==0.5.2", "tilelang==0.1.10"], "unknown", "nvcc"),
        (["flash-linear-attention==0.5.0", "tilelang==0.1.8"], "affected", "tilelang 0.1.8 is not in"),
    ],
)
def test_the_tilelang_way_around_needs_a_release_that_takes_it(tmp_path, lines, expected, said):
    requirements = pins(tmp_path, "torch==2.10.0", *lines)
    rule = findings("-r", requirements, "--gpu", "H100", "--feature", "backward", "--no-scan")[
        "fla-gated-bwd-hopper-triton-3-4"
    ]
    assert rule["verdict"] == expected
    assert said in texts(rule)


def test_unless_is_checked_by_the_schema(tmp_path):
    rules = tmp_path / "rules"
    write_rule(
        rules, "test-unless", 'packages = { torch = "" }\n\n[[affects.unless]]\nwhy = "x"\nversion = "1"\n'
    )
    result = cli("rules", "validate", rules)
    output = result.stdout + result.stderr
    assert result.exit_code != 0 and "affects.unless[0].version" in output
    write_rule(rules, "test-unless", 'packages = { torch = "" }\n\n[[affects.unless]]\nwhy = "x"\n')
    result = cli("rules", "validate", rules)
    assert result.exit_code != 0 and "names no package or condition" in result.stdout + result.stderr


# --- 2. fla-delta-rule-bwd-hopper-chunk64: the non-gated delta rule only ---------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [(GATED_IMPORT, "unknown"), (DELTA_IMPORT, "affected"), (GATED_IMPORT + DELTA_IMPORT, "affected")],
)
def test_the_delta_rule_bug_needs_the_delta_rule_api(tmp_path, code, expected):
    """PR #988 changes only fla/ops/delta_rule/wy_fast.py (chunk_delta_rule's backward): a project
    that calls only chunk_gated_delta_rule is not shown to use it ("applies if you use ...")."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(code + "loss.backward()\n")
    requirements = pins(tmp_path, "torch==2.10.0", "flash-linear-attention==0.5.0")
    rule = findings("-r", requirements, "--gpu", "H100", "--project", project)[
        "fla-delta-rule-bwd-hopper-chunk64"
    ]
    assert rule["verdict"] == expected
    if expected == "unknown":
        assert "applies if you use fla_delta_rule" in texts(rule)


# --- 3. a prebuilt URL wheel is a fact about the build ----------------------------------------------


def test_open_instruct_url_wheel_is_a_prebuilt_flash_attn():
    """tool.uv.sources installs flash_attn-2.8.3+cu128torch2.10-cp312-cp312-linux_x86_64.whl."""
    args = ("-r", OPEN_INSTRUCT / "uv.lock", "--gpu", "H100", "--no-scan")
    flash_attn = environment(*args)["packages"]["flash-attn"]
    assert flash_attn["wheel"] == "flash_attn-2.8.3+cu128torch2.10-cp312-cp312-linux_x86_64.whl"
    rule = findings(*args)["flash-attn-no-prebuilt-wheel-for-torch"]
    assert rule["verdict"] == "not-affected"
    assert "built for torch 2.10 with CUDA 12.8" in texts(rule)


def test_a_url_wheel_in_a_pyproject_is_read_from_its_file_name(tmp_path):
    """open-instruct's pyproject names flash-attn-4 by a wheel URL (`flash-attn-4 @ https://...whl`)."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\nversion = "0"\ndependencies = [\n'
        '  "torch==2.8.0",\n'
        '  "flash-attn @ https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/'
        'flash_attn-2.8.3%2Bcu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl",\n]\n'
    )
    packages = environment("-r", pyproject, "--no-scan")["packages"]
    assert packages["flash-attn"]["version"] == "2.8.3+cu12torch2.8cxx11abitrue"
    assert packages["flash-attn"]["wheel"].startswith("flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE")
    rule = findings("-r", pyproject, "--no-scan")["flash-attn-no-prebuilt-wheel-for-torch"]
    assert rule["verdict"] == "not-affected"


# --- 4. a range decides a rule when every release it admits lies on one side ----------------------


def pyproject(tmp_path: Path, *dependencies: str) -> Path:
    path = tmp_path / "pyproject.toml"
    listed = ", ".join(f'"{d}"' for d in dependencies)
    path.write_text(f'[project]\nname = "x"\nversion = "0"\ndependencies = [{listed}]\n')
    return path


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ("transformers>=4.51.0", "not-affected"),  # every release it admits is past 4.44
        ("transformers>=4.40", "unknown"),  # it admits 4.42-4.43.4 too: which one pip picks decides
        ("transformers<4.42", "not-affected"),
    ],
)
def test_a_range_decides_a_rule_when_it_lies_on_one_side(tmp_path, requirement, expected):
    """gemma2-fa2-static-cache-keys-not-cut holds for transformers >=4.42.0,<4.44.0."""
    rules = tmp_path / "rules"
    write_rule(rules, "test-tf", 'packages = { transformers = ">=4.42.0,<4.44.0" }')
    found = findings("-r", pyproject(tmp_path, requirement), "--rules", rules, "--no-scan")["test-tf"]
    assert found["verdict"] == expected
    if expected == "unknown":
        assert "applies if pip picks 4.42.0–4.43.4" in texts(found)


# --- 7. open-r1: torch 2.6.0 (setup.py:70) and flash-attn unpinned (README.md:73) --------------------


def test_open_r1_unpinned_flash_attn_on_torch_2_6_is_not_cleared(tmp_path):
    """huggingface/open-r1 at 1416fa0: setup.py pins "torch==2.6.0"; its README installs
    `uv pip install flash-attn --no-build-isolation`, which took 2.8.0.post2 (open-r1#684): the
    undefined-symbol rule is unknown, naming the releases that have it, never not affected."""
    requirements = pins(tmp_path, "torch==2.6.0", "flash-attn")
    rule = findings("-r", requirements, "--no-scan")[
        "flash-attn-2-8-wheel-torch-2-6-cxx11-abi-undefined-symbol"
    ]
    assert rule["verdict"] == "unknown"
    assert "applies if pip picks 2.8.0.post2–2.8.3.post1" in texts(rule)
    pinned = pins(tmp_path, "torch==2.6.0", "flash-attn==2.8.0.post2")
    found = findings("-r", pinned, "--no-scan")["flash-attn-2-8-wheel-torch-2-6-cxx11-abi-undefined-symbol"]
    assert found["verdict"] == "affected"
    fixed = pins(tmp_path, "torch==2.6.0", "flash-attn==2.7.4.post1")
    found = findings("-r", fixed, "--no-scan")["flash-attn-2-8-wheel-torch-2-6-cxx11-abi-undefined-symbol"]
    assert found["verdict"] == "not-affected"
    cu126 = pins(tmp_path, "torch==2.6.0+cu126", "flash-attn==2.8.0.post2")  # a C++11-ABI torch
    found = findings("-r", cu126, "--no-scan")["flash-attn-2-8-wheel-torch-2-6-cxx11-abi-undefined-symbol"]
    assert found["verdict"] == "not-affected"


# --- 5. what the listed releases require is implied, never "not installed" -------------------------


def test_a_range_on_triton_does_not_hide_the_triton_torch_pins(tmp_path):
    """axolotl: torch 2.12.0 with `triton>=3.4.0`; torch 2.12.0's metadata pins triton==3.7.0."""
    triton = environment("-r", pins(tmp_path, "torch==2.12.0", "triton>=3.4.0"), "--no-scan")["packages"][
        "triton"
    ]
    assert triton["version"] == "3.7.0"
    assert triton["origin"].startswith("implied by torch 2.12.0 (Requires-Dist: triton==3.7.0")


@pytest.mark.parametrize(
    ("torch", "triton", "verdict"),
    [
        # axolotl's pyproject.toml:15 and :82 (issue 37): torch 2.11.0, 2.12.0 and 2.12.1 pin triton
        # 3.6.0, 3.7.0 and 3.7.1 (their METADATA, in the release facts); 3.7.1 is past the bug
        ("torch>=2.11.0,<=2.12.1", ("3.6.0", "3.7.0", "3.7.1"), "unknown"),
        ("torch>=2.11.0,<2.12.1", ("3.6.0", "3.7.0"), "affected"),
    ],
)
def test_a_range_on_torch_narrows_a_range_on_triton(tmp_path, torch, triton, verdict):
    requirements = pyproject(tmp_path, torch, "triton>=3.4.0", "flash-linear-attention==0.4.1")
    args = ("-r", requirements, "--gpu", "H100", "--feature", "backward", "--no-scan")
    assert tuple(environment(*args)["packages"]["triton"]["releases"]) == triton
    assert findings(*args)["fla-gated-bwd-hopper-triton-3-4"]["verdict"] == verdict


def test_torch_without_a_version_leaves_triton_unknown(tmp_path):
    requirements = pins(tmp_path, "torch", "flash-linear-attention==0.5.0")
    rule = findings("-r", requirements, "--gpu", "H100", "--feature", "backward", "--no-scan")[
        "fla-gated-bwd-hopper-triton-3-4"
    ]
    assert rule["verdict"] == "unknown"
    assert "triton: installed or not (implied by torch without a version" in texts(rule)


def test_a_range_on_torch_implies_the_triton_its_releases_pin(tmp_path):
    """fla-core 0.5.0 asks torch>=2.7.0: every torch release from 2.7.0 pins a triton."""
    env = environment("-r", pyproject(tmp_path, "torch>=2.7.0", "flash-linear-attention==0.5.0"), "--no-scan")
    triton = env["packages"]["triton"]
    assert triton["version"] is None and "3.3.0" in triton["releases"]
    assert "pin triton" in triton["origin"]


def test_a_range_another_release_requires_is_implied(tmp_path):
    """accelerate 1.12.0 requires torch>=2.0.0: torch is there, its version one of those releases."""
    torch = environment("-r", pins(tmp_path, "accelerate==1.12.0"), "--no-scan")["packages"]["torch"]
    assert torch["version"] is None and torch["specifier"] == ">=2.0.0"
    assert torch["origin"] == "implied by accelerate 1.12.0 (Requires-Dist: torch>=2.0.0)"


def test_a_listed_release_whose_requirements_are_not_read_leaves_the_stack_unknown(tmp_path):
    """LLaVA lists deepspeed==0.12.6, whose requirements the release database does not hold: it
    may install torch, which is unknown, not "not installed"."""
    env = environment("-r", pins(tmp_path, "deepspeed==0.12.6"), "--no-scan")
    assert "may install torch" in env["origins"]["maybe: torch"]
    rule = findings("-r", pins(tmp_path, "deepspeed==0.12.6"), "--no-scan")["torch-requires-other-triton"]
    assert rule["verdict"] != "not-affected"


def test_a_listed_release_whose_requirements_are_read_implies_its_torch(tmp_path):
    """open-r1's README installs vllm==0.8.5.post1 first; its wheel requires torch==2.6.0."""
    torch = environment("-r", pins(tmp_path, "vllm==0.8.5.post1"), "--no-scan")["packages"]["torch"]
    assert torch["version"] == "2.6.0" and torch["origin"].startswith("implied by vllm 0.8.5.post1")
