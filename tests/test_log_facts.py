"""Facts a pasted log states (facts/log_facts.py), read from real threads' text (tests/logs/stated/),
and explain diagnosing the stack a log states without --pin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attn_doctor._compat import tomllib
from attn_doctor.cli import app
from attn_doctor.explain.reader import LogReader
from attn_doctor.facts.log_facts import MAX_CANDIDATE_LINES, LogFactCollector, LogFacts

CASES = Path(__file__).parent / "cases"

STATED = Path(__file__).parent / "logs" / "stated"


def read(text: str | bytes) -> LogFacts:
    path_free = text.encode() if isinstance(text, str) else text
    collector = LogFactCollector()
    import io

    for block in LogReader(io.BytesIO(path_free), "test"):
        collector.feed(block)
    return collector.facts


def versions(facts: LogFacts) -> dict[str, str | None]:
    return {name: package.version for name, package in facts.packages.items()}


@pytest.mark.parametrize(
    "log, expected, python",
    [
        ("flash-attention-1832.log", {"torch": "2.6.0", "flash-attn": "2.6.3"}, "3.12"),
        ("flash-attention-853.log", {"torch": "2.3.1+cu121", "flash-attn": "2.5.9.post1"}, "3.11"),
        ("flash-attention-966.log", {"accelerate": "0.29.3", "flash-attn": "2.3.0"}, None),
        ("flash-attention-723.log", {"accelerate": "0.25.0", "flash-attn": "2.4.2"}, "3.10"),
        ("skyreels-v2-52.log", {"accelerate": "1.6.0", "flash-attn": "2.7.4.post1"}, None),
    ],
)
def test_versions_stated_in_real_threads(log: str, expected: dict[str, str], python: str | None) -> None:
    facts = read((STATED / log).read_bytes())
    assert {name: versions(facts).get(name) for name in expected} == expected
    assert facts.python == python
    for name in expected:
        assert facts.packages[name].origin.startswith("from the log, line ")


def test_collect_env_transformers_env_and_nvidia_smi() -> None:
    log = "\n".join(
        [
            "PyTorch version: 2.5.1+cu121",
            "CUDA used to build PyTorch: 12.1",
            "Python version: 3.10.12 (main, Nov 20 2023, 15:14:05) [GCC 11.4.0] (64-bit runtime)",
            "GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB",
            "Nvidia driver version: 535.104.05",
            "[pip3] triton==3.1.0",
            "- `transformers` version: 4.44.0",
            "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |",
        ]
    )
    facts = read(log)
    assert versions(facts) == {"torch": "2.5.1+cu121", "triton": "3.1.0", "transformers": "4.44.0"}
    assert (facts.python, facts.torch_cuda, facts.driver) == ("3.10", "12.1", "535.104.05")
    assert [gpu.compute_capability for gpu in facts.gpus] == ["8.0"]
    assert facts.origins["driver"] == "from the log, line 5"


def test_frames_prove_a_package_and_a_listing_beats_a_frame() -> None:
    frame = '  File "/opt/conda/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 10'
    facts = read(frame + "\nRuntimeError: boom\n")
    assert versions(facts) == {"flash-attn": None}
    assert facts.innermost_package == "flash-attn" and facts.python == "3.10" and facts.platform == "linux"
    facts = read(frame + "\nflash-attn==2.6.3\n")
    assert versions(facts) == {"flash-attn": "2.6.3"}


def test_wheel_names_and_pip_output() -> None:
    facts = read(
        "Using cached torch-2.3.0-cp310-cp310-manylinux1_x86_64.whl (779.1 MB)\n"
        "pip install flash_attn-2.5.5+cu118torch2.2cxx11abiTRUE-cp38-cp38-linux_x86_64.whl\n"
        "Successfully installed xformers-0.0.26.post1\n"
    )
    assert versions(facts) == {"torch": "2.3.0", "flash-attn": "2.5.5", "xformers": "0.0.26.post1"}


def test_build_targets_are_not_the_gpu() -> None:
    """nvcc's -gencode list names what a build targets, not the GPU that ran it."""
    facts = read("nvcc -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90\n")
    assert facts.gpus == []
    facts = read(
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch\n"
    )
    assert [gpu.compute_capability for gpu in facts.gpus] == ["12.0"]


def test_collection_is_bounded() -> None:
    frame = b'  File "/x/site-packages/torch/nn/modules/module.py", line 1, in f\n'
    facts = read(frame * (MAX_CANDIDATE_LINES * 2) + b"flash-attn==2.6.3\n")
    assert "flash-attn" not in facts.packages  # past the cap nothing more is read
    assert versions(facts) == {"torch": None}


SITE = "/venv/lib/python3.11/site-packages/transformers/models"


@pytest.mark.parametrize(
    ("frame", "family"),
    [
        (f'  File "{SITE}/gemma2/modeling_gemma2.py", line 390, in forward', "gemma2"),
        (
            r'  File "C:\\venv\\Lib\\site-packages\\transformers\\models\\llama\\modeling_llama.py", line 9',
            "llama",
        ),
        (f'  File "{SITE}/mllama/modeling_mllama.py", line 9, in forward', None),  # not in the vocabulary
        (f'  File "{SITE}/gemma2/configuration_gemma2.py", line 9, in __init__', None),  # not its model code
    ],
)
def test_a_modeling_frame_shows_the_family_past_the_cap(frame: str, family: str | None) -> None:
    """The traceback ends a long log: its frames count after the candidate lines' cap too."""
    noise = b'  File "/x/torch/nn/modules/module.py", line 1, in f\n' * (MAX_CANDIDATE_LINES * 2)
    facts = read(noise + frame.encode() + b"\n")
    assert facts.features == ({} if family is None else {family: MAX_CANDIDATE_LINES * 2 + 1})


def test_explain_diagnoses_the_stack_the_log_states(tmp_path: Path) -> None:
    """No --pin: torch 2.6.0 and flash-attn 2.6.3 come from the log, and the report says so."""
    result = CliRunner().invoke(
        app, ["explain", str(STATED / "flash-attention-1832.log"), "--no-scan", "--format", "json"]
    )
    report = json.loads(result.stdout)
    packages = report["environment"]["packages"]
    assert packages["torch"]["version"] == "2.6.0"
    assert packages["flash-attn"]["origin"] == "from the log, line 4"
    assert report["environment"]["target"] == "the stack the log states"
    assert all(cause["why"] for cause in report["causes"])
    text = CliRunner().invoke(app, ["explain", str(STATED / "flash-attention-1832.log"), "--no-scan", "-v"])
    assert "from the log: torch 2.6.0 (line 3); flash-attn 2.6.3 (line 4)" in text.stdout
    assert "ranked here: " in text.stdout


def test_options_override_the_log() -> None:
    log = str(STATED / "flash-attention-1832.log")
    result = CliRunner().invoke(app, ["explain", log, "--no-scan", "--pin", "torch==2.8.0", "-f", "json"])
    packages = json.loads(result.stdout)["environment"]["packages"]
    assert packages["torch"]["version"] == "2.8.0" and packages["flash-attn"]["version"] == "2.6.3"


@pytest.mark.parametrize(
    ("line", "features"),
    [
        (
            '  File "/venv/flash_attn/flash_attn_interface.py", line 1124, in flash_attn_varlen_func',
            ("flash_attention_2", "packed_sequences", "varlen"),
        ),
        ("    F.scaled_dot_product_attention(q, k, k)", ("sdpa",)),
        (
            '  File "/venv/site-packages/torch/_inductor/compile_fx.py", line 9, in compile_fx',
            ("torch_compile",),
        ),
        # prose names a feature without proving its use
        ("Try using `eager` or `flex_attention` instead.", ()),
        ("WARNING: flash_attn_varlen_func is deprecated", ()),
    ],
)
def test_a_traceback_call_proves_a_feature_and_prose_does_not(line: str, features: tuple[str, ...]):
    from attn_doctor.facts.log_features import features_of

    assert features_of(line) == features


@pytest.mark.parametrize(
    ("spec", "verdict"),
    [("==9.0", "not-affected"), (">=8.6", "affected"), ("==8.6", "unknown"), ("!=8.0,!=9.0", "affected")],
)
def test_a_shared_memory_limit_names_the_gpu_class(tmp_path, spec: str, verdict: str):
    """OpenSpaceAI/DEST3D#2 as pasted: 'Hardware limit: 101376' is a 99 KiB GPU (sm_86, sm_89 or
    sm_120): a rule for every one of them holds, one for none is refuted, one for some is open."""
    from support import cli, write_rule

    case = tomllib.loads((CASES / "triton" / "openspaceai-dest3d-2.toml").read_text())
    log = tmp_path / "error.log"
    log.write_text(case["log"]["error"])
    rules = tmp_path / "rules"
    write_rule(rules, "smem", f'compute_capability = "{spec}"', symptoms="['Hardware limit: ']")
    report = json.loads(cli("explain", log, "--rules", rules, "--no-scan", "--format", "json").stdout)
    (gpu,) = report["environment"]["gpus"]
    assert gpu["compute_capability"] is None and gpu["capabilities"] == ["8.6", "8.9", "12.0", "12.1"]
    assert next(c for c in report["causes"] if c["id"] == "smem")["verdict"] == verdict
