"""Tests for the mutants of attn_doctor/engine/schema.py that survived mutmut
(benchmarks/mutation_score.py --part engine; docs/mutation-testing.md): a rule file's problem
names the field that is wrong. The real rule file, read as the loader reads it, with one field
broken."""

from __future__ import annotations

import pytest
from support import REPO

from attn_doctor._compat import tomllib
from attn_doctor.engine.schema import parse_rule

RULE = REPO / "rules" / "cuda-driver-too-old-for-torch.toml"


def problems_with(change: dict) -> list[str]:
    data = tomllib.loads(RULE.read_text())
    for key, value in change.items():
        section, _, field = key.rpartition(".")
        (data[section] if section else data)[field] = value
    parsed = parse_rule(data, RULE.stem, str(RULE))
    assert isinstance(parsed, list), "the broken rule was accepted"
    return parsed


def test_the_rule_as_it_is_parses():
    """The premise: the unbroken file is a rule, so each problem below is the broken field's."""
    assert not isinstance(parse_rule(tomllib.loads(RULE.read_text()), RULE.stem, str(RULE)), list)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # x__fix_plan__mutmut_10: the field was None ("field 'None': ...")
        ({"fix.plan": "apt"}, "field 'fix.plan': 'apt' is not one of "),
        # x__symptoms__mutmut_10 ("SYMPTOMS"), x__string_list__mutmut_5 (the field was None)
        ({"symptoms": "CUDA error"}, "field 'symptoms': must be a list of strings"),
        ({"symptoms": ["CUDA error", 3]}, "field 'symptoms': must be a list of strings"),
        # x_parse_rule__mutmut_25 (the id's problem had no text), x__nearest__mutmut_40 (nor nearest's)
        ({"id": "Bad_Id"}, "field 'id': 'Bad_Id' must be lower-case letters, digits and dashes"),
        (
            {"nearest": {"given": "no group", "choices": "(a)"}},
            "field 'nearest.given': must be a regular expression (at most 200 characters) with one group",
        ),
    ],
)
def test_a_broken_field_is_named_in_its_problem(change: dict, expected: str):
    assert any(expected in line for line in problems_with(change)), problems_with(change)


# ---- matcher and api_change: the words and origins of a reason ------------------------------------------


def test_an_api_change_says_now_only_for_a_removed_name_that_was_renamed():
    """x__change__mutmut_9 (api_change._change): '(now NEW)' follows a removal that has a new name,
    never an addition and never a removal without one."""
    from attn_doctor.engine.api_change import _change
    from attn_doctor.releases.api_changes import Timeline

    renamed = Timeline("transformers", "LlamaFlashAttention2", (("removed", "4.48.0"),), ("4.40.0",), "X")
    plain = Timeline("transformers", "LlamaFlashAttention2", (("removed", "4.48.0"),), ("4.40.0",))
    removed = "LlamaFlashAttention2 removed in transformers 4.48.0"
    assert _change(renamed, ("removed", "4.48.0")) == f"{removed} (now X)"
    assert _change(plain, ("removed", "4.48.0")) == removed
    assert _change(renamed, ("added", "4.36.0")) == "LlamaFlashAttention2 added in transformers 4.36.0"


def test_a_version_known_only_as_a_set_of_releases_keeps_its_origin_and_what_is_missing():
    """x__in_releases__mutmut_36 (the origin dropped from a 'not in' reason, which --verbose shows)
    and x__package__mutmut_22 (a package with no version lost ``missing``, which groups unknown
    rules by the fact they need)."""
    from packaging.specifiers import SpecifierSet

    from attn_doctor.engine.matcher import MISSING_VERSION, _package
    from attn_doctor.facts.model import Environment, Package

    env = Environment(
        packages={
            "torch": Package("torch", None, "torch", "error.log:7", releases=("2.4.0", "2.4.1")),
            "triton": Package("triton", None, "triton", "requirements.txt:2"),
        }
    )
    for spec, holds in ((">=2.5", False), ("<2.5", True)):
        reason = _package("torch", SpecifierSet(spec), env)
        assert (reason.holds, reason.origin) == (holds, "error.log:7"), reason
    unknown = _package("triton", SpecifierSet(">=3.0"), env)
    assert (unknown.holds, unknown.missing, unknown.origin) == (None, MISSING_VERSION, "requirements.txt:2")


def test_an_amd_condition_says_whether_the_gpus_are_absent_or_unknown():
    """x__gfx__mutmut_4 (matcher._gfx): 'no GPU found' only where the probe found none; a target
    that says nothing of its GPUs has them unknown, and the condition is then unknown, not false."""
    from attn_doctor.engine.matcher import MISSING_GPU, _gfx
    from attn_doctor.facts.model import Environment

    absent = _gfx(("gfx942",), Environment(gpu_source="none"))
    unknown = _gfx(("gfx942",), Environment(gpu_source="target"))
    assert (absent.holds, absent.text) == (False, "no GPU found and no --gpu target")
    assert (unknown.holds, unknown.text, unknown.missing) == (None, "GPUs not known", MISSING_GPU)


def test_an_api_change_says_whether_the_installed_release_is_past_it_or_predates_it(tmp_path):
    """x__verdict__mutmut_74 (api_change._verdict: "is past it" upper-cased or swapped): the reason
    says on which side of the change the stack's release is, which decides the fix's direction.
    Two real reports: DeepSeek-OCR#7 (a name transformers 4.48.0 removed, under 4.57.1) and
    pytorch#127271 (a name triton 3.0.0 added, under 2.3.1)."""
    import json

    from support import case_log, cli

    def api_text(case: str, *pins: str) -> str:
        log = case_log(case, tmp_path)
        args = [a for pin in pins for a in ("--pin", pin)]
        report = json.loads(cli("explain", log, *args, "--no-scan", "--format", "json").stdout)
        reasons = [r for c in report["causes"] for r in c["reasons"] if r["condition"] == "release"]
        changes = [
            r["text"]
            for r in reasons
            if r["holds"] and (" added in " in r["text"] or " removed in " in r["text"])
        ]
        return changes[0]

    past = api_text("transformers/deepseek-ai-deepseek-ocr-7.toml", "transformers==4.57.1")
    assert "removed in transformers 4.48.0" in past and "transformers 4.57.1 is past it (" in past
    older = api_text("triton/pytorch-pytorch-127271.toml", "triton==2.3.1", "torch==2.4.0")
    assert "added in triton 3.0.0" in older and "triton 2.3.1 predates it (" in older


def test_a_cpu_or_rocm_torch_is_not_a_cuda_build():
    """x__cuda__mutmut_30 (the reason's condition "XXcudaXX"): reports group a finding's reasons by
    condition, and the fix for a CUDA-only rule on a CPU or ROCm torch is the build, not a version."""
    from packaging.specifiers import SpecifierSet

    from attn_doctor.engine.matcher import _cuda
    from attn_doctor.facts.model import Environment, Package, TorchBuild

    torch = {"torch": Package("torch", "2.5.1", "torch", "--pin")}
    for build, words in ((TorchBuild(), "a CPU build"), (TorchBuild(hip="6.2"), "a ROCm 6.2 build")):
        reason = _cuda(SpecifierSet(">=12.0"), Environment(packages=torch, torch_build=build))
        assert (reason.condition, reason.holds, reason.text) == (
            "cuda",
            False,
            f"torch is {words}, not a CUDA build",
        )
