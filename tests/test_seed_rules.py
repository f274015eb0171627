"""The five seed bugs against the real rules database: affected releases and first fixed ones,
declared by --pin, by a requirements file and by fake installed metadata."""

from __future__ import annotations

import json

import pytest
from support import cli


def verdicts(*args: str) -> dict[str, str]:
    result = cli("check", "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return {f["id"]: f["verdict"] for f in json.loads(result.stdout)["findings"]}


SEED_A = "gemma2-fa2-cu-seqlens"
SEED_B = "fla-rotary-dim-exceeds-head-dim"
SEED_C = "fa3-hopper-pipelineparams-build"
SEED_D = "transformers-flex-blockmask-no-dim"
SEED_E = "transformers-flex-pad-none-key-length"
SEED_FEATURES = {SEED_A: "flash_attention_2", SEED_D: "flex_attention", SEED_E: "flex_attention"}


def test_done_when_gemma2_cu_seqlens(site):
    fa2 = ("--feature", "flash_attention_2")
    affected = cli("check", "--path", site.path, "--pin", "transformers==4.44.0", "--gpu", "sm_90", *fa2)
    assert affected.exit_code == 1
    assert SEED_A in affected.stdout and "4.44.1" in affected.stdout  # the fix names the release
    fixed = verdicts("--path", str(site.path), "--pin", "transformers==4.44.1", "--gpu", "sm_90", *fa2)
    assert fixed[SEED_A] == "not-affected"


@pytest.mark.parametrize(
    ("rule", "pins", "expected"),
    [
        (SEED_A, ["transformers==4.44.0"], "affected"),
        (SEED_A, ["transformers==4.44.1"], "not-affected"),
        (SEED_A, ["transformers==4.44.0+internal.1"], "affected"),  # a local build of the bad one
        (SEED_D, ["transformers==4.51.0", "torch==2.6.0"], "affected"),
        (SEED_D, ["transformers==4.51.3", "torch==2.6.0"], "affected"),
        (SEED_D, ["transformers==4.52.1", "torch==2.6.0"], "not-affected"),
        (SEED_E, ["transformers==4.51.0", "torch==2.6.0"], "affected"),
        (SEED_E, ["transformers==4.51.1", "torch==2.6.0"], "not-affected"),
    ],
)
def test_seed_versions(site, rule, pins, expected):
    args = ["--path", str(site.path), "--gpu", "H100", "--feature", SEED_FEATURES[rule]]
    for pin in pins:
        args += ["--pin", pin]
    assert verdicts(*args)[rule] == expected


def test_seed_b_fla_rotary(site):
    site.install("flash-linear-attention", "0.1.2")
    assert verdicts("--path", str(site.path), "--gpu", "H100")[SEED_B] == "unknown"  # if you use it
    rotary = ("--feature", "rotary_embedding")
    assert verdicts("--path", str(site.path), "--gpu", "H100", *rotary)[SEED_B] == "affected"
    newest = verdicts("--path", str(site.path), "--gpu", "H100", "--pin", "fla-core==0.6.0", *rotary)
    assert newest[SEED_B] == "not-affected"  # fla-core is the same project under its other name


def test_seed_c_is_about_source_builds(site, no_gpu):
    """The build error does not depend on the local GPU (a build box often has none)."""
    build = ["--path", str(site.path), "--feature", "source_build", "--feature", "flash_attention_3"]
    assert verdicts(*build)[SEED_C] == "affected"
    wheel_user = verdicts("--path", str(site.path), "--feature", "flash_attention_3")
    assert wheel_user[SEED_C] == "not-affected"


def test_installed_metadata_is_read_like_a_pin(site):
    site.install("transformers", "4.44.0")
    assert verdicts("--path", str(site.path), "--feature", "flash_attention_2")[SEED_A] == "affected"


def test_declared_features_narrow_the_verdict(site):
    site.install("transformers", "4.51.0")
    site.install("torch", "2.6.0+cu124", torch_cuda="12.4")
    eager_only = verdicts("--path", str(site.path), "--feature", "sdpa")
    assert eager_only[SEED_D] == "not-affected"
    flex = verdicts("--path", str(site.path), "--feature", "flex_attention")
    assert flex[SEED_D] == "affected"
