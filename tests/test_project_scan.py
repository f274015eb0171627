"""The project scan: which attention features a project's code and configs select, with file:line.

The snippets are written the way each framework's own docs and configs spell them (transformers,
TRL, axolotl, LLaMA-Factory, torchtune, flash_attn, FA3, flex_attention, xformers, fla).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from attn_doctor.facts import project_scan
from attn_doctor.facts.project_scan import project_root, scan_project


def features_of(root: Path, **kwargs) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for hit in scan_project(root, **kwargs).hits:
        found.setdefault(hit.feature, []).append(hit.where)
    return found


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


NOTEBOOK = json.dumps(
    {
        "cells": [
            {"cell_type": "code", "source": ['model = M.from_pretrained(p, attn_implementation="sdpa")\n']}
        ]
    }
)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "train.py",
            'm = AutoModel.from_pretrained(p, attn_implementation="flash_attention_2")\n',
            "flash_attention_2",
        ),
        ("train.py", "cfg._attn_implementation = 'flex_attention'\n", "flex_attention"),
        ("sft.yaml", "model_name_or_path: x\nattn_implementation: flash_attention_3\n", "flash_attention_3"),
        ("cfg.json", '{"attn_implementation": "paged|sdpa"}\n', "sdpa"),
        ("run.ipynb", NOTEBOOK, "sdpa"),
        ("old.py", "AutoModel.from_pretrained(p, use_flash_attention_2=True)\n", "flash_attention_2"),
        ("axolotl.yml", "base_model: x\nflash_attention: true\n", "flash_attention_2"),
        ("axolotl.yml", "sdp_attention: true\n", "sdpa"),
        ("axolotl.yml", "xformers_attention: true\n", "xformers"),
        ("axolotl.yml", "sample_packing: true\n", "packed_sequences"),
        ("llamafactory.yaml", "flash_attn: fa2\n", "flash_attention_2"),
        ("llamafactory.yaml", "flash_attn: fa3\n", "flash_attention_3"),
        ("llamafactory.yaml", "neat_packing: true\n", "packed_sequences"),
        ("torchtune.yaml", "dataset:\n  packed: True\ncompile: True\n", "packed_sequences"),
        ("torchtune.yaml", "compile: True\n", "torch_compile"),
        ("sft.py", "args = SFTConfig(packing=True, padding_free=True)\n", "packed_sequences"),
        ("sft.py", "collator = DataCollatorWithFlattening()\n", "packed_sequences"),
        ("args.py", "TrainingArguments(out, torch_compile=True)\n", "torch_compile"),
        ("args.yaml", "torch_compile_mode: max-autotune\n", "torch_compile"),
        ("model.py", "model = torch.compile(model)\n", "torch_compile"),
        ("attn.py", "from flash_attn import flash_attn_varlen_func\n", "flash_attention_2"),
        ("attn.py", "out = flash_attn_varlen_func(q, k, v, cu, cu, m, m)\n", "varlen"),
        ("attn.py", "from flash_attn.flash_attn_interface import flash_attn_func\n", "flash_attention_2"),
        ("attn.py", "import flash_attn_interface\n", "flash_attention_3"),
        ("attn.py", "from flash_attn_3.flash_attn_interface import flash_attn_func\n", "flash_attention_3"),
        ("attn.py", "from torch.nn.attention.flex_attention import flex_attention\n", "flex_attention"),
        ("attn.py", "mask = create_block_mask(causal, 1, 1, L, L)\n", "flex_attention"),
        ("attn.py", "o = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n", "sdpa"),
        ("attn.py", "with sdpa_kernel(SDPBackend.FLASH_ATTENTION):\n    pass\n", "sdpa"),
        ("attn.py", "import xformers.ops as xops\n", "xformers"),
        ("pipe.py", "pipe.enable_xformers_memory_efficient_attention()\n", "xformers"),
        ("rope.py", "from fla.modules import FusedRMSNorm, RotaryEmbedding\n", "rotary_embedding"),
        ("attn.py", "o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n", "attention_mask"),
        (
            "attn.py",
            "o = F.scaled_dot_product_attention(\n    q, k, v, attn_mask=m.to(q.dtype))\n",
            "attention_mask",
        ),
        ("gen.py", 'tok = AutoTokenizer.from_pretrained(p, padding_side="left")\n', "attention_mask"),
        ("attn.py", "flash_attn_func(q, k, v, window_size=(4096, 0))\n", "sliding_window"),
        ("attn.py", "flash_attn_func(q, k, v, softcap=50.0)\n", "softcap"),
        ("train.py", 'name = "google/gemma-2-9b"\n', "softcap"),
        ("train.py", 'name = "google/gemma-3-4b-it"\n', "sliding_window"),
        ("attn.py", "flash_attn_func(q, k, v, alibi_slopes=slopes)\n", "alibi"),
        ("cfg.json", '{"head_dim": 256}\n', "head_dim_256"),
        ("cfg.json", '{"attention_dropout": 0.1}\n', "dropout"),
        ("fp8.py", "q = q.to(torch.float8_e4m3fn)\n", "fp8"),
        ("infer.py", "out = model.generate(**inputs)\n", "generate"),
        ("train.py", "loss.backward()\n", "backward"),
        ("train.py", "trainer = SFTTrainer(model=model)\n", "backward"),
    ],
)
def test_signal(tmp_path: Path, name: str, text: str, expected: str):
    write(tmp_path, name, text)
    found = features_of(tmp_path)
    assert expected in found, found
    line = next(number for number, row in enumerate(text.splitlines(), 1) if row.strip())
    assert any(where.startswith(f"{name}:") for where in found[expected]) and line >= 1


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("train.py", 'AutoModel.from_pretrained(p, attn_implementation="eager")\n'),
        ("axolotl.yml", "flash_attention: false\nsample_packing: false\n"),
        ("sft.py", "SFTConfig(packing=False)\n"),
        ("attn.py", "import flash_attn_interface_helpers\n"),  # not FA3's module
        ("norm.py", "from fla.modules import FusedRMSNorm\n"),
        ("attn.py", "flash_attn_func(q, k, v, window_size=(-1, -1), softcap=0.0)\n"),
        ("cfg.json", '{"attention_dropout": 0.0, "head_dim": 128}\n'),
        ("README.txt", 'attn_implementation="flash_attention_2"\n'),  # not a file the scan reads
    ],
)
def test_no_signal(tmp_path: Path, name: str, text: str):
    write(tmp_path, name, text)
    assert features_of(tmp_path) == {}


@pytest.mark.parametrize(
    ("name", "text", "absent"),
    [
        # Megatron-LM's rope_utils.py: flash-attn's rotary kernel, not fla's RotaryEmbedding
        ("rope.py", "from flash_attn.layers.rotary import apply_rotary_emb\n", "rotary_embedding"),
        # Open-Sora's SDPA call passes no mask (issue 37); None is none either
        ("attn.py", "x = F.scaled_dot_product_attention(q, k, v, dropout_p=p)\n", "attention_mask"),
        ("attn.py", "x = F.scaled_dot_product_attention(q, k, v, attn_mask=None)\n", "attention_mask"),
        ("attn.py", "x = F.scaled_dot_product_attention(q, k, v)\nmask = f(attn_mask=m)\n", "attention_mask"),
    ],
)
def test_not_this_signal(tmp_path: Path, name: str, text: str, absent: str):
    write(tmp_path, name, text)
    found = features_of(tmp_path)
    assert found and absent not in found, found


@pytest.mark.parametrize(
    ("name", "text", "family"),
    [
        ("train.py", 'm = AutoModel.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")\n', "llama"),
        ("train.py", 'm = AutoModelForCausalLM.from_pretrained("meta-llama/Meta-Llama-3-8B")\n', "llama"),
        ("train.py", 'name = "meta-llama/llama-2-7b-hf"\n', "llama"),
        ("train.py", "from transformers import LlamaForCausalLM\n", "llama"),
        ("train.py", 'm = LlamaForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B")\n', "llama"),  # once
        ("train.py", 'name = "meta-llama/Llama-4-Scout-17B-16E-Instruct"\n', "llama4"),
        ("train.py", 'name = "google/gemma-2-9b-it"\n', "gemma2"),
        ("train.py", "model = Gemma2ForCausalLM(config)\n", "gemma2"),
        ("train.py", 'name = "google/gemma-2b"\n', "gemma"),
        ("train.py", 'name = "google/gemma-3-4b-it"\n', "gemma3"),
        ("config.json", '{"model_type": "gemma3_text", "head_dim": 256}\n', "gemma3"),
        ("config.json", '{"architectures": ["MistralForCausalLM"]}\n', "mistral"),
        ("axolotl.yml", "base_model: mistralai/Mistral-7B-v0.1\n", "mistral"),
        ("axolotl.yml", "base_model: mistralai/Mixtral-8x7B-v0.1\n", "mixtral"),
        ("sft.yaml", "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\n", "qwen2"),
        ("sft.yaml", "model_name_or_path: Qwen/Qwen2-57B-A14B\n", "qwen2_moe"),
        ("train.py", "from transformers import Qwen2VLForConditionalGeneration\n", "qwen2_vl"),
        ("train.py", 'name = "Qwen/Qwen2.5-VL-7B-Instruct"\n', "qwen2_5_vl"),
        ("train.py", "model = Qwen2_5OmniThinkerForConditionalGeneration(config)\n", "qwen2_5_omni"),
        ("train.py", 'name = "Qwen/Qwen3-8B"\n', "qwen3"),
        ("train.py", 'name = "Qwen/Qwen3-30B-A3B"\n', "qwen3_moe"),
        ("train.py", 'name = "microsoft/Phi-3.5-mini-instruct"\n', "phi3"),
        ("train.py", 'name = "bigcode/starcoder2-15b"\n', "starcoder2"),
        ("train.py", 'name = "ai21labs/AI21-Jamba-1.5-Mini"\n', "jamba"),
        ("config.json", '{"model_type": "glm4v"}\n', "glm4v"),
    ],
)
def test_model_family(tmp_path: Path, name: str, text: str, family: str):
    write(tmp_path, name, text)
    assert features_of(tmp_path).get(family) == [f"{name}:1"]


@pytest.mark.parametrize(
    ("text", "not_family"),
    [
        ('name = "google/gemma-2b"\n', "gemma2"),  # Gemma 1 at 2B, not Gemma 2
        ('name = "google/paligemma-3b-pt-224"\n', "gemma3"),
        ('name = "meta-llama/Llama-3.2-11B-Vision-Instruct"\n', "llama"),  # Mllama
        ('name = "meta-llama/Llama-4-Scout-17B-16E"\n', "llama"),
        ("tokenizer = LlamaTokenizerFast.from_pretrained(p)\n", "llama"),  # Mistral's tokenizer too
        ('name = "Qwen/Qwen2-57B-A14B"\n', "qwen2"),  # Qwen2-MoE
        ('name = "Qwen/Qwen2.5-VL-7B-Instruct"\n', "qwen2"),
        ("model = Qwen2VLForConditionalGeneration(config)\n", "qwen2"),
        ('name = "Qwen/Qwen3-30B-A3B"\n', "qwen3"),
        ('cfg = {"model_type": "qwen2_moe"}\n', "qwen2"),
        ("model = Gemma2ForCausalLM(config)\n", "gemma"),
    ],
)
def test_not_this_model_family(tmp_path: Path, text: str, not_family: str):
    write(tmp_path, "train.py", text)
    assert not_family not in features_of(tmp_path)


def test_evidence_is_file_and_line(tmp_path: Path):
    write(tmp_path, "src/pkg/train.py", "import torch\n\n\nmodel = torch.compile(model)\n")
    assert features_of(tmp_path) == {"torch_compile": ["src/pkg/train.py:4"]}


def test_evidence_is_capped_per_feature(tmp_path: Path):
    for index in range(6):
        write(tmp_path, f"m{index}.py", "loss.backward()\n")
    assert features_of(tmp_path)["backward"] == ["m0.py:1", "m1.py:1", "m2.py:1"]


def test_skips_what_is_not_the_projects_code(tmp_path: Path):
    fa2 = 'attn_implementation="flash_attention_2"\n'
    write(tmp_path, ".git/hooks/x.py", fa2)
    write(tmp_path, ".venv/lib/x.py", fa2)
    write(tmp_path, "env/pyvenv.cfg", "home = /usr\n")
    write(tmp_path, "env/lib/python3.11/x.py", fa2)
    write(tmp_path, "node_modules/x.json", '{"attn_implementation": "flash_attention_2"}')
    write(tmp_path, "lib/site-packages/x.py", fa2)
    write(tmp_path, "wheel/transformers-4.44.0.dist-info/METADATA", "Name: transformers\n")
    write(tmp_path, "wheel/transformers/x.py", fa2)
    write(tmp_path, "build/lib/x.py", fa2)
    write(tmp_path, "pkg.egg-info/x.py", fa2)
    write(tmp_path, "big.py", fa2 + "#" * project_scan.MAX_FILE_BYTES)
    write(tmp_path, "vendor/x.py", fa2)
    assert features_of(tmp_path, exclude=("vendor",)) == {}


def test_a_flash_attention_checkout_is_a_source_build(tmp_path: Path):
    write(tmp_path, "third_party/flash-attention/hopper/flash_fwd_kernel_sm90.h", "// kernel\n")
    write(tmp_path, "third_party/flash-attention/csrc/flash_attn/flash_api.cpp", "// api\n")
    found = features_of(tmp_path)
    assert sorted(found["source_build"]) == [
        "third_party/flash-attention/csrc/flash_attn/flash_api.cpp:1",
        "third_party/flash-attention/hopper/flash_fwd_kernel_sm90.h:1",
    ]
    assert set(found) == {"source_build", "flash_attention_2", "flash_attention_3"}


def test_a_source_tree_deeper_than_the_bound_is_not_looked_for(tmp_path: Path):
    write(tmp_path, "a/b/c/flash-attention/hopper/flash_fwd_kernel_sm90.h", "// kernel\n")
    assert "source_build" not in features_of(tmp_path)
    write(tmp_path, "a/b/flash-attention/hopper/flash_fwd_kernel_sm90.h", "// kernel\n")
    assert features_of(tmp_path)["source_build"] == ["a/b/flash-attention/hopper/flash_fwd_kernel_sm90.h:1"]


def test_file_count_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(project_scan, "MAX_FILES", 5)
    for index in range(8):
        write(tmp_path, f"m{index}.py", "x = 1\n")
    result = scan_project(tmp_path)
    assert result.files_read == 5 and result.truncated


def test_cache_reuses_unchanged_files_and_rereads_changed_ones(tmp_path: Path):
    project, cache = tmp_path / "project", tmp_path / "cache"
    write(project, "a.py", "loss.backward()\n")
    path = write(project, "b.py", "x = 1\n")
    first = scan_project(project, cache_dir=cache)
    assert (first.files_read, first.cached) == (2, 0)
    second = scan_project(project, cache_dir=cache)
    assert (second.cached, [h.feature for h in second.hits]) == (2, ["backward"])
    path.write_text("out = model.generate(x)\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    third = scan_project(project, cache_dir=cache)
    assert third.cached == 1 and {h.feature for h in third.hits} == {"backward", "generate"}


def test_a_corrupt_cache_is_ignored(tmp_path: Path):
    project, cache = tmp_path / "project", tmp_path / "cache"
    write(project, "a.py", "loss.backward()\n")
    scan_project(project, cache_dir=cache)
    for file in cache.iterdir():
        file.write_text("[" * 5000)
    assert [h.feature for h in scan_project(project, cache_dir=cache).hits] == ["backward"]


def test_project_root_is_the_enclosing_git_work_tree(tmp_path: Path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    assert project_root(tmp_path / "src" / "pkg") == tmp_path


def test_a_saved_report_in_the_folder_is_data_not_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Issue 25: a saved `check --format json` report names flex_attention, flash_attention_2 and
    torch.compile in its findings; `check` in that folder must find no feature in it."""
    from tests.support import cli

    report = cli("check", "--format", "json", "--no-scan", "--pin", "torch==2.5.1+cu124", "--gpu", "RTX 5090")
    assert "flex_attention" in report.stdout  # the data holds the words a config would
    (tmp_path / "report.json").write_text(report.stdout)
    (tmp_path / "rows.jsonl").write_text('{"text": "attn_implementation=\\"flash_attention_2\\""}\n')
    assert features_of(tmp_path) == {}
    monkeypatch.chdir(tmp_path)
    found = json.loads(cli("check", "--format", "json", "--gpu", "RTX 5090").stdout)
    assert found["environment"]["features"]["facts"] == []


def test_a_notebook_counts_by_its_code_not_its_outputs(tmp_path: Path):
    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": ["We tried torch.compile(model) once."]},
            {
                "cell_type": "code",
                "source": ["out = model.generate(**inputs)\n"],
                "outputs": [{"output_type": "stream", "text": ["flash_attn_varlen_func failed\n"]}],
            },
        ]
    }
    write(tmp_path, "explore.ipynb", json.dumps(notebook))
    found = features_of(tmp_path)
    assert set(found) == {"generate"}


@pytest.mark.parametrize("folder", ["third_party/transformers", "vendor/xformers", "libs/apex"])
def test_a_bundled_copy_of_another_project_is_not_the_projects_code(tmp_path: Path, folder: str):
    """Issue 37: vendored code counted as the project's own features. A git submodule (its ``.git``
    is a file) or a third_party/ or vendor/ folder is another project's code."""
    write(tmp_path, f"{folder}/attention.py", "import xformers.ops as xops\n")
    if folder == "libs/apex":
        write(tmp_path, f"{folder}/.git", "gitdir: ../../.git/modules/apex\n")
    write(tmp_path, "train.py", "model = torch.compile(model)\n")
    assert features_of(tmp_path) == {"torch_compile": ["train.py:1"]}
