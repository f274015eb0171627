"""The flash-attn-3 and flash-linear-attention planners on the real release facts, each target
assembled as `attn-doctor wheel -r requirements.txt --gpu G --python P` assembles it (torch's
implied triton and CUDA build included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_doctor.config import Config
from attn_doctor.facts.assemble import EnvironmentInputs, assemble
from attn_doctor.facts.model import Environment
from attn_doctor.planner.fla import FlaPlanner
from attn_doctor.planner.flash_attn_3 import NEWEST_TAG, FlashAttn3Planner, archs
from attn_doctor.releases.facts import snapshot

BUILD = (
    "pip install ninja packaging einops && git clone --branch v{tag} "
    "https://github.com/Dao-AILab/flash-attention.git && cd flash-attention/hopper && python setup.py install"
)
FA2_WHEELS = "https://github.com/Dao-AILab/flash-attention/releases/download"


def target(tmp_path: Path, *requirements: str, gpu: str | None = None, python: str = "3.11") -> Environment:
    path = tmp_path / "requirements.txt"
    path.write_text("\n".join(requirements) + "\n")
    inputs = EnvironmentInputs(requirements=[path], gpus=[gpu] if gpu else [], python=python, scan=False)
    env, problems = assemble(inputs, Config())
    assert problems == []
    return env


def fa3(tmp_path: Path, *requirements: str, gpu: str, version: str | None = None):
    return FlashAttn3Planner().plan(target(tmp_path, *requirements, gpu=gpu), snapshot(), version)


def fla(tmp_path: Path, *requirements: str, python: str = "3.11", version: str | None = None):
    return FlaPlanner().plan(target(tmp_path, *requirements, python=python), snapshot(), version)


def test_the_newest_tag_builds_sm80_and_sm90a_code_and_the_first_tags_sm90a_alone():
    assert NEWEST_TAG == "2.8.3.post1"
    assert archs(NEWEST_TAG) == archs("2.7.3") == ("sm_80", "sm_90a")
    assert archs("2.7.2.post1") == archs("2.6.2") == ("sm_90a",)


def test_fa3_on_an_h100_is_the_hopper_build_at_the_newest_tag(tmp_path: Path):
    plan = fa3(tmp_path, "torch==2.8.0+cu128", gpu="H100")
    assert plan.package == "flash-attn-3" and plan.version == "2.8.3.post1"
    assert plan.command == BUILD.format(tag="2.8.3.post1")
    assert plan.requirement is None and plan.index is None and plan.url is None and plan.ways_out == ()
    assert plan.why.startswith(
        "PyPI's flash-attn-3 is one yanked, empty 0.0.0: flash-attention v2.8.3.post1's"
    )
    assert "builds flash_attn_3 3.0.0b1 with code for sm_80 and sm_90a (9.0), against torch 2.8" in plan.why
    assert "CUDA 12 toolkit >= 12.3" in plan.why and "FP8" not in plan.why


@pytest.mark.parametrize(("gpu", "capability"), [("A100", "8.0"), ("RTX 4090", "8.9")])
def test_fa3_on_ampere_and_ada_is_the_same_build_for_its_sm80_code(tmp_path: Path, gpu: str, capability: str):
    """sm_80 code (v2.7.3 on) runs on every 8.x; FP8 is Hopper's alone."""
    plan = fa3(tmp_path, "torch==2.8.0+cu128", gpu=gpu)
    assert plan.command == BUILD.format(tag="2.8.3.post1") and plan.ways_out == ()
    assert f"with code for sm_80 and sm_90a ({capability})" in plan.why
    assert "on 8.x FP16/BF16 only, no FP8" in plan.why


def test_fa3_on_an_rtx_5090_has_no_command_and_names_fa2_and_sdpa(tmp_path: Path):
    plan = fa3(tmp_path, "torch==2.8.0+cu128", gpu="RTX 5090")
    assert plan.command is None and plan.version is None
    assert plan.why == (
        "FlashAttention-3 (v2.8.3.post1's hopper/) has code for sm_80 and sm_90a only, "
        "none for 12.0 (RTX 5090)"
    )
    fa2, sdpa = plan.ways_out
    name = "flash_attn-2.8.3.post1+cu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    assert fa2.title == "FlashAttention-2: flash-attn 2.8.3.post1"
    assert fa2.commands == (f"pip install '{FA2_WHEELS}/v2.8.3.post1/{name}'",)
    assert "sm_120" in fa2.why
    assert sdpa.commands == ('from_pretrained(..., attn_implementation="sdpa")',)


def test_fa3_on_a_t4_names_sdpa_alone(tmp_path: Path):
    """FlashAttention-2 runs on Ampere and newer: no way out through it on Turing."""
    plan = fa3(tmp_path, "torch==2.8.0+cu128", gpu="T4")
    assert plan.command is None and "none for 7.5 (T4)" in plan.why
    assert [way.title for way in plan.ways_out] == [
        "torch's scaled_dot_product_attention (SDPA): nothing to install"
    ]


def test_fa3_where_transformers_loads_hub_kernels_is_its_extra(tmp_path: Path):
    """4.54.0 takes a bare Hub repo id in attn_implementation; the extra's name from 5.1.0 is kernels."""
    plan = fa3(tmp_path, "torch==2.8.0+cu128", "transformers==4.57.1", gpu="H100")
    assert plan.command == "pip install 'transformers[hub-kernels]==4.57.1'"
    assert plan.requirement == "transformers[hub-kernels]==4.57.1" and plan.version is None
    assert 'attn_implementation="kernels-community/flash-attn3"' in plan.why
    newer = fa3(tmp_path, "torch==2.8.0+cu128", "transformers==5.2.0", gpu="H100")
    assert newer.command == "pip install 'transformers[kernels]==5.2.0'"
    last = fa3(tmp_path, "torch==2.8.0+cu128", "transformers==5.0.0", gpu="H100")
    assert last.command == "pip install 'transformers[hub-kernels]==5.0.0'"
    older = fa3(tmp_path, "torch==2.8.0+cu128", "transformers==4.53.3", gpu="H100")
    assert older.command == BUILD.format(tag="2.8.3.post1")


def test_fa3_hub_kernels_do_not_run_where_the_build_has_no_code(tmp_path: Path):
    plan = fa3(tmp_path, "torch==2.8.0+cu128", "transformers==4.57.1", gpu="B200")
    assert plan.command is None and "none for 10.0 (B200)" in plan.why


def test_fa3_on_a_cuda_13_torch_moves_torch_to_a_cuda_12_build(tmp_path: Path):
    """No v2.* tag builds hopper/ with a CUDA 13 toolkit (#1949 is on main only)."""
    plan = fa3(tmp_path, "torch==2.9.1+cu130", gpu="H100")
    assert plan.command is None and "torch 2.9.1 is a CUDA 13.0 build" in plan.why
    torch, fa2, sdpa = plan.ways_out
    assert torch.commands == (
        "pip install torch==2.9.1 --index-url https://download.pytorch.org/whl/cu128",
        BUILD.format(tag="2.8.3.post1"),
    )
    assert fa2.title.startswith("FlashAttention-2 (flash-attn): torch 2.8.")
    assert sdpa.title.startswith("torch's scaled_dot_product_attention")


def test_fa3_at_a_tag_before_sm80_code_does_not_fit_an_a100(tmp_path: Path):
    plan = fa3(tmp_path, "torch==2.8.0+cu128", gpu="A100", version="2.7.2")
    assert plan.command is None and plan.version == "2.7.2"
    assert plan.why == "FlashAttention-3 (v2.7.2's hopper/) has code for sm_90a only, none for 8.0 (A100)"
    newest = plan.ways_out[0]
    assert newest.commands == (BUILD.format(tag="2.8.3.post1"),)


def test_fa3_at_a_tag_is_that_tags_build_and_says_when_it_replaces_fa2(tmp_path: Path):
    plan = fa3(tmp_path, "torch==2.6.0+cu124", gpu="H100", version="v2.7.4")
    assert plan.version == "2.7.4" and plan.command == BUILD.format(tag="2.7.4")
    assert "builds flash_attn (FA2's name: it replaces an installed flash-attn) 3.0.0b1" in plan.why
    unknown = fa3(tmp_path, "torch==2.8.0+cu128", gpu="H100", version="2.9.0")
    assert unknown.command is None
    assert unknown.why == "flash-attention 2.9.0 is no tag with hopper/ (v2.6.2 to v2.8.3.post1)"


def test_fla_is_the_newest_release_on_a_stack_that_meets_it(tmp_path: Path):
    plan = fla(tmp_path, "torch==2.8.0+cu128", "transformers==5.23.0")
    assert plan.package == "flash-linear-attention" and plan.version == "0.6.0"
    assert plan.command == "pip install flash-linear-attention==0.6.0"
    assert plan.requirement == "flash-linear-attention==0.6.0" and plan.index is None and plan.ways_out == ()


def test_fla_on_torch_2_6_is_the_newest_release_whose_fla_core_takes_it(tmp_path: Path):
    """fla-core 0.5.0 on requires torch>=2.7.0 (0.5.1 on: under its cuda extra, with triton>=3.3)."""
    plan = fla(tmp_path, "torch==2.6.0+cu124")
    assert plan.command == "pip install flash-linear-attention==0.4.2"
    assert "0.6.0 needs torch >=2.7.0 (fla-core 0.6.0[cuda]; the target has 2.6.0)" in plan.why
    assert "triton >=3.3 (fla-core 0.6.0[cuda]; the target has 3.2.0)" in plan.why


def test_fla_under_transformers_4_is_the_release_before_0_6_0(tmp_path: Path):
    plan = fla(tmp_path, "torch==2.8.0+cu128", "transformers==4.57.1")
    assert plan.version == "0.5.2"
    assert (
        "0.6.0 needs transformers <6,>=5.6.2 (flash-linear-attention 0.6.0; the target has 4.57.1)"
        in plan.why
    )


def test_fla_on_python_3_9_fits_no_release(tmp_path: Path):
    plan = fla(tmp_path, "torch==2.6.0+cu124", python="3.9")
    assert plan.command is None and plan.version is None
    assert "the newest, 0.6.0, needs Python >=3.10 (the target's is 3.9)" in plan.why
    (way,) = plan.ways_out
    assert way.commands == (
        "python3.10 -m pip install 'flash-linear-attention==0.6.0' 'torch>=2.7.0' 'triton>=3.3'",
    )


def test_fla_at_a_release_is_that_release_or_why_not(tmp_path: Path):
    fits = fla(tmp_path, "torch==2.6.0+cu124", version="0.4.2")
    assert fits.command == "pip install flash-linear-attention==0.4.2" and fits.version == "0.4.2"
    refused = fla(tmp_path, "torch==2.6.0+cu124", version="0.6.0")
    assert refused.command is None and refused.version == "0.6.0"
    assert refused.why.startswith("flash-linear-attention 0.6.0 needs torch >=2.7.0")
    newest, meet = refused.ways_out
    assert newest.commands == ("pip install flash-linear-attention==0.4.2",)
    assert meet.commands == ("pip install 'flash-linear-attention==0.6.0' 'torch>=2.7.0' 'triton>=3.3'",)
    unknown = fla(tmp_path, "torch==2.6.0+cu124", version="9.9.9")
    assert (
        unknown.command is None and unknown.why == "flash-linear-attention 9.9.9 is not in the release facts"
    )


def test_fla_reads_fla_core_from_the_release_facts():
    """0.3.2 on pins fla-core==<its version>: the snapshot holds each of them."""
    facts = snapshot()
    pinned = {
        r.split("==")[1]
        for v, release in facts.releases("flash-linear-attention").items()
        for r in release.requires_dist or ()
        if r.startswith("fla-core==")
    }
    assert pinned and pinned <= set(facts.releases("fla-core"))
