"""Causes no rule names, reasoned from the releases' own code (issue 38, items 1, 2 and 4).

Every log here is real: a reporter's paste from tests/cases or benchmarks/blind, or a line the
release's own code prints (its template in the shipped catalogue, its fields filled). Every release
a test names is one the shipped message catalogue read: the catalogue is the release data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version
from support import REPO, case_log, cli

from attn_doctor._compat import tomllib
from attn_doctor.explain.reasoners import guards
from attn_doctor.facts.log_frames import frame_of
from attn_doctor.releases.messages import catalogue


def explained(log: Path, *args: str) -> dict:
    result = cli("explain", str(log), "--no-scan", "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert document["exit_code"] == result.exit_code
    return document


def blind_log(name: str, folder: Path) -> Path:
    """The log of a case of the first-sight batch 2026-12-05 (scored before this code existed)."""
    data = tomllib.loads((REPO / "benchmarks" / "blind" / "2026-12-05" / name).read_text(encoding="utf-8"))
    log = folder / "error.log"
    log.write_text(data["log"], encoding="utf-8")
    return log


def written(folder: Path, text: str) -> Path:
    log = folder / "error.log"
    log.write_text(text, encoding="utf-8")
    return log


def test_a_check_of_the_callers_arguments_is_a_user_error(tmp_path: Path):
    """trl's tiny test models have head_size 2; flash-attn's mha_fwd checks head_size % 8 (trl#6837)."""
    document = explained(case_log("usage/huggingface-trl-6837.toml", tmp_path))
    assert document["causes"] == [] and document["exit_code"] == 0  # an answer, not "No known cause"
    first = document["reasoned"][0]
    assert first["rank"] == 1 and first["kind"] == "usage" and first["reasoner"] == "origin"
    assert first["raised_by"].startswith("flash-attn (flash_attn/flash_api.cpp, ")
    assert first["condition"] == "raised when head_size % 8 is not 0"
    assert first["fix"].startswith("a user error: ")
    assert len({cause["id"] for cause in document["reasoned"]}) == len(document["reasoned"])  # one each


def test_the_frames_choose_the_origin_and_name_the_caller(tmp_path: Path):
    """flex_attention's generated kernel with a head dim of 72 (pytorch#133321): triton's
    validate_block_shape raised it, the call came from torch's inductor."""
    document = explained(blind_log("pytorch-pytorch-133321.toml", tmp_path))
    first = document["reasoned"][0]
    assert first["id"] == "origin:triton:triton._utils.validate_block_shape"  # the newest of three
    assert first["kind"] == "usage" and first["condition"] == "raised when is_power_of_two(d) is false"
    assert any(
        fact.startswith(
            "called from torch (torch/_inductor/runtime/triton_heuristics.py, in _precompile_config"
        )
        for fact in first["facts"]
    )
    assert "the innermost frame in a package is triton" in first["evidence"][0]


def test_a_message_later_releases_still_print_is_not_gone(tmp_path: Path):
    """triton's "Internal Triton PTX codegen error:" (triton#4576): 3.0-3.1 raise it in make_cubin,
    3.2 on as one branch of a message built in a branch (the rebuilt catalogue reads both); no
    release read drops it, so no "gone from X: upgrade" is claimed."""
    document = explained(case_log("triton/triton-lang-triton-4576.toml", tmp_path))
    reasoned = {cause["id"]: cause for cause in document["reasoned"]}
    cubin = reasoned["origin:triton:triton.backends.nvidia.compiler.CUDABackend.make_cubin"]
    assert not cubin["fix"].startswith("gone from")
    assert "3.3.0–3.9.0" in cubin["fix"]
    assert document["causes"][0]["id"] == "triton-ptx-version-cuda-12-6-before-3-2"  # the rule ranks first
    assert cubin["rank"] > len([c for c in document["causes"] if c["verdict"] != "not-affected"])


def test_a_reworded_message_is_not_gone(tmp_path: Path):
    """flash-attn 2.2.0–2.6.1 say "batch size must be postive"; 2.6.2 corrected the spelling: the
    check goes on, so no "gone from 2.6.2, upgrade" (a user error all the same)."""
    log = written(tmp_path, "RuntimeError: batch size must be postive\n")
    first = explained(log)["reasoned"][0]
    assert first["kind"] == "usage" and "batch_size" in first["condition"]
    assert first["fix"] == (
        "a user error: the call does not meet this check; change the arguments as the message says"
    )


def test_a_check_added_to_existing_code_is_not_a_reason_to_pin_below(tmp_path: Path):
    """vllm 0.10.1 added "Sinks are only supported in FlashAttention 3" to FlashAttentionImpl
    (vllm#22331): older releases did not check, they did not support sinks either."""
    first = explained(case_log("flash-attn/vllm-project-vllm-22331.toml", tmp_path))["reasoned"][0]
    assert first["raised_by"].startswith("vllm (")
    assert first["fix"].startswith("a check vllm makes since 0.10.1 (0.10.0 did not)")
    assert "pin" not in first["fix"]


def test_a_version_window_the_line_states_is_read(tmp_path: Path):
    """transformers' to_bettertransformer: "Please install optimum>=1.7.0 ... The version {} was
    found." with optimum 1.6.0 installed."""
    text = (
        "ValueError: Please install optimum>=1.7.0 to use Better Transformer. The version 1.6.0 was found.\n"
    )
    first = explained(written(tmp_path, text))["reasoned"][0]
    assert first["kind"] == "install"
    assert "optimum 1.6.0 is outside >=1.7.0 (the message's own window)" in first["facts"]
    assert first["fix"].startswith("install optimum>=1.7.0 (pip install 'optimum>=1.7.0')")


def test_the_stated_version_is_read_against_the_releases_that_raise_it(tmp_path: Path):
    log = case_log("usage/huggingface-trl-6837.toml", tmp_path)
    facts = explained(log, "--pin", "flash-attn==2.7.4.post1")["reasoned"][0]["facts"]
    assert any(
        fact.startswith("flash-attn 2.7.4.post1 (") and "is one of the releases" in fact for fact in facts
    )


def test_a_rule_that_explains_the_line_is_the_answer_alone(tmp_path: Path):
    """Seed E's line is named by its rule: no reasoned cause repeats it."""
    document = explained(REPO / "tests" / "logs" / "seed_e.log")
    rule_lines = {m["last"]["line"] for c in document["causes"] for m in c["matches"]}
    assert not rule_lines & {cause["line"] for cause in document["reasoned"]}


def test_an_error_line_without_an_origin_says_what_was_checked(tmp_path: Path):
    """flash-attn's rotary extension is a separate build: Python's own words (flash-attention#160)."""
    document = explained(blind_log("dao-ailab-flash-attention-160.toml", tmp_path))
    assert document["exit_code"] == 1
    why = {item["text"]: item["why"] for item in document["unexplained"]}
    assert why["ModuleNotFoundError: No module named 'rotary_emb'"].startswith("Python's own words")
    text = cli("explain", str(tmp_path / "error.log"), "--no-scan").stdout
    assert "Not explained (what was checked):" in text and "Python's own words" in text


def test_a_package_the_catalogue_does_not_read_is_named(tmp_path: Path):
    """An error raised inside sageattention, which no catalogue source reads."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/sageattention/core.py", line 112, in sageattn\n'
        '    raise ValueError(f"Unsupported CUDA architecture: {arch}")\n'
        "ValueError: Unsupported CUDA architecture: sm75\n"
    )
    document = explained(written(tmp_path, text))
    (item,) = document["unexplained"]
    assert item["line"] == 4
    assert item["why"].startswith("raised in sageattention (sageattention/core.py), a package the message")


@pytest.mark.parametrize(
    ("line", "module_path", "package"),
    [
        (
            'File "/home/u/flash-linear-attention/fla/modules/rotary.py", line 3, in f',
            "fla/modules/rotary.py",
            "flash-linear-attention",
        ),
        (
            'File "/v/lib/python3.10/site-packages/vllm/vllm_flash_attn/fa.py", line 3, in f',
            "vllm/vllm_flash_attn/fa.py",
            "vllm",
        ),
        (
            'File "/v/lib/python3.10/site-packages/sageattention/core.py", line 3, in f',
            "sageattention/core.py",
            "sageattention",
        ),
        ('File "/home/u/train.py", line 3, in <module>', "", None),
        ('File "/usr/lib/python3.10/importlib/__init__.py", line 126, in import_module', "", None),
    ],
)
def test_a_frames_package_is_read_from_its_path(line: str, module_path: str, package: str | None):
    frame = frame_of(line, 7)
    assert frame is not None and (frame.module_path, frame.package, frame.line) == (module_path, package, 7)


@pytest.mark.parametrize(
    ("guard", "words"),
    [
        (
            "not (torch_dtype is None) and torch_dtype not in [torch.float16, torch.bfloat16]",
            "torch_dtype is set, and torch_dtype is not one of [torch.float16, torch.bfloat16]",
        ),
        ("!(head_size % 8 == 0)", "head_size % 8 is not 0"),
        ("not cls._supports_flash_attn_2", "cls._supports_flash_attn_2 is false"),
        (
            "backend == 'fa3' and get_platform().is_blackwell",
            "backend is 'fa3', and get_platform().is_blackwell",
        ),
        ("(a and b)", "a, and b"),
        ("", ""),
    ],
)
def test_a_guard_in_plain_words(guard: str, words: str):
    assert guards.plain(guard) == words


def test_the_kind_of_a_guard_comes_from_what_it_tests():
    """Read on the shipped catalogue: an argument check, an install check, a release's limit."""
    messages = catalogue()
    dtype = messages.origins(
        "Flash Attention 2.0 only supports torch.float16 and torch.bfloat16 dtypes. You passed torch.float32,"
        " this might lead to unexpected behaviour."
    )
    assert dtype and guards.kind_of(dtype[0]) == "usage"
    optimum = messages.origins(
        "Please install optimum>=1.7.0 to use Better Transformer. The version 1.6.0 was found."
    )
    assert optimum and guards.kind_of(optimum[0]) == "install"
    sinks = messages.origins("AssertionError: Sinks are only supported in FlashAttention 3")
    assert sinks and guards.kind_of(sinks[0]) == "release"


def test_curly_quotes_of_a_paste_read_as_the_quotes_python_printed(tmp_path: Path):
    """A traceback pasted through chat or Markdown has ‘…’ for Python's '…' (DeepSeek-OCR#302's
    report): the API-drift rule still reads the missing name."""
    text = (
        "ImportError: cannot import name 'LlamaFlashAttention2' from "
        "'transformers.models.llama.modeling_llama'\n"
    )
    straight = explained(written(tmp_path, text))
    curly = explained(written(tmp_path, text.replace("'", "\u2018", 1).replace("'", "\u2019", 1)))
    assert [c["id"] for c in curly["causes"]] == [c["id"] for c in straight["causes"]]
    assert curly["causes"][0]["id"] == "transformers-downstream-attention-api-drift"


# The architecture family (issue 38, item 3): the GPU, the binary and the release facts decide.
NO_KERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"


def test_no_kernel_image_with_no_torch_stated_names_the_first_torch_for_the_gpu(tmp_path: Path):
    """An RTX 5090 (sm_120) and a log that names no torch: the first torch build whose wheels carry
    sm_120, read in the release facts (the torch-cuda-archs snapshot), then the extensions."""
    from attn_doctor.engine.release_conditions import covers
    from attn_doctor.releases.facts import snapshot

    document = explained(written(tmp_path, NO_KERNEL), "--gpu", "RTX 5090")
    (arch,) = [cause for cause in document["reasoned"] if cause["reasoner"] == "architecture"]
    assert arch["id"] == "architecture:binary:no-kernel-for-gpu" and arch["kind"] == "install"
    assert "sm_120" in arch["title"] and "from RTX 5090" in arch["title"]
    words = arch["fix"].split()
    release, variant = words[2], words[5].rstrip(":")
    command = f"pip install torch=={release} --index-url https://download.pytorch.org/whl/{variant}"
    assert arch["fix"].startswith(f"install torch {release} built with {variant}: {command}")
    facts = snapshot()
    assert any(v.name == variant and covers(v.archs, "12.0") for v in facts.torch_variants(release))
    line = Version(release).release[:2]
    earlier = [r for r in facts.torch_releases_with_variants() if Version(r).release[:2] < line]
    assert not any(covers(v.archs, "12.0") for r in earlier for v in facts.torch_variants(r))
    assert arch["fix"].endswith("reinstall each CUDA extension (flash-attn, xformers) built for that torch")


def test_no_kernel_image_a_rule_confirms_is_not_reasoned_again(tmp_path: Path):
    """torch 2.5.1+cu124 on an RTX 5090: torch-wheel-lacks-gpu-arch fits and the release facts
    confirm it; the line is explained, no reasoned cause repeats it."""
    document = explained(written(tmp_path, NO_KERNEL), "--gpu", "RTX 5090", "--pin", "torch==2.5.1+cu124")
    assert document["causes"][0]["id"] == "torch-wheel-lacks-gpu-arch"
    assert document["causes"][0]["verdict"] == "affected"
    assert document["reasoned"] == []


def test_no_kernel_image_in_an_extension_the_frames_name(tmp_path: Path):
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.10/site-packages/xformers/ops/fmha/__init__.py", line 306, in '
        "_memory_efficient_attention_forward\n"
        "    out, *_ = op.apply(inp, needs_gradient=False)\n" + NO_KERNEL
    )
    arch = explained(written(tmp_path, text), "--gpu", "T4")["reasoned"][0]
    assert arch["id"] == "architecture:xformers:no-kernel-for-gpu"
    assert arch["fix"] == (
        "install a xformers build with code for sm_75 (compute capability 7.5, from T4 (target)), "
        'or build it here with TORCH_CUDA_ARCH_LIST="7.5"'
    )


def test_nvcc_older_than_the_gpu_names_the_first_toolkit_that_knows_it(tmp_path: Path):
    """NVIDIA's table in the release facts: sm_120 arrived with CUDA 12.8."""
    text = "nvcc fatal   : Unsupported gpu architecture 'compute_120'\n"
    arch = explained(written(tmp_path, text), "--gpu", "RTX 5090")["reasoned"][0]
    assert arch["id"] == "architecture:nvcc:unsupported-arch"
    assert "the first CUDA toolkit that knows sm_120 is 12.8 (NVIDIA's table)" in arch["facts"]
    assert arch["fix"] == "build with CUDA 12.8 or later, or leave 12.0 out of TORCH_CUDA_ARCH_LIST"


def test_triton_older_than_the_gpu_names_the_first_release_that_knows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A DGX Spark (sm_121): triton-ptxas.json reads each tag's bundled ptxas and its targets. A
    rule names this line (triton-bundled-ptxas-lacks-gpu-arch), so the reasoner is read with the
    rules left out, as for a message no rule covers."""
    from attn_doctor import explain as explain_module
    from attn_doctor.config import Config
    from attn_doctor.engine.loader import RuleSet
    from attn_doctor.facts.assemble import EnvironmentInputs

    monkeypatch.setattr(explain_module, "load_rules", lambda paths: RuleSet(rules=[], problems=[]))
    log = written(tmp_path, "'sm_121a' is not a recognized processor for this target (ignoring processor)\n")
    result = explain_module.explain(
        str(log), EnvironmentInputs(scan=False, pins=["triton==3.5.0"]), Config(), []
    )
    (arch,) = result.reasoned
    assert arch.id == "architecture:triton:unknown-arch"
    assert arch.fix == "upgrade triton to 3.6.0 or later (with the torch that pins it)"
    assert "the first triton release whose bundled ptxas knows sm_121 is 3.6.0" in arch.facts


def test_an_import_error_without_its_module_is_read_in_the_api_tables(tmp_path: Path):
    """ "cannot import name 'FlashAttentionKwargs'" names no module: the API tables of every
    transformers release place it in modeling_flash_attention_utils and say when it arrived."""
    from attn_doctor.releases.facts import snapshot

    timelines = snapshot().api_changes.named("FlashAttentionKwargs")
    (home,) = [t for t in timelines if t.subject.endswith(" transformers.modeling_flash_attention_utils")]
    (added,) = [release for event, release in home.events if event == "added"]
    assert all(Version(event[1]) >= Version(added) for t in timelines for event in t.events)
    log = written(tmp_path, "ImportError: cannot import name 'FlashAttentionKwargs'\n")
    document = explained(log, "--pin", "transformers==4.44.2")
    (drift,) = document["reasoned"]
    assert drift["id"] == "api-drift:transformers:FlashAttentionKwargs" and document["exit_code"] == 0
    assert (
        drift["fix"]
        == f"upgrade transformers to {added} or later, where it arrived (or update the calling code)"
    )
    assert "transformers 4.44.2 (--pin) lacks it" in drift["facts"]
    newer = explained(log, "--pin", f"transformers=={added}")
    assert newer["reasoned"] == []  # the stated release has it: the tables do not explain this line
