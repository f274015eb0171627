"""A project scan's finds count together only where one file shows them (issue 37, cause 1).

SimPO (princeton-nlp/SimPO) trains Llama-3 and Mistral with FlashAttention-2 and Gemma-2 with eager
attention, each in its own config; pooled, the scan saw "FA2" and "a Gemma-2 model" and reported
Gemma-2's FA2 bugs as affected (its maintainers: the environment is fine, princeton-nlp/SimPO#70).
The configs below are the model-argument lines of training_configs/gemma-2-9b-it-simpo.yaml (at
05f4f26) and training_configs/llama-3-8b-instruct-simpo.yaml (at 15c4ff8), as the repository has
them.
"""

from __future__ import annotations

import json
from pathlib import Path

from support import cli

from attn_doctor.engine.loader import database_path, load_rules

SIMPO_GEMMA2 = """\
# Model arguments
model_name_or_path: google/gemma-2-9b-it
torch_dtype: null
attn_implementation: eager
"""
SIMPO_LLAMA3 = """\
# Model arguments
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
torch_dtype: null
use_flash_attention_2: true
"""
# the Gemma-2 config as a user who switches it to FA2 writes it: one file shows both
GEMMA2_WITH_FA2 = SIMPO_GEMMA2.replace("attn_implementation: eager", "attn_implementation: flash_attention_2")
GEMMA2_FA2_RULE = "gemma2-fa2-generate-4d-mask"  # [affects]: flash_attention_2, generate; models gemma2
TRAIN = """\
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("google/gemma-2-9b-it", attn_implementation="flash_attention_2")
print(model.generate(input_ids))
"""


def project(root: Path, configs: dict[str, str]) -> Path:
    for name, text in configs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def findings(site, root: Path, *more: str) -> dict[str, dict]:
    args = ["--path", site.path, "--gpu", "H100", "--pin", "transformers==4.44.0", "--project", root]
    result = cli("check", *args, *more, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return {finding["id"]: finding for finding in json.loads(result.stdout)["findings"]}


def gemma2_rules(found: dict[str, dict]) -> dict[str, str]:
    """The verdict of each rule of the database about Gemma-2 models with FlashAttention-2."""
    rules = load_rules([database_path()], trust_database=True).rules
    wanted = {
        rule.id
        for rule in rules
        if "gemma2" in rule.affects.models and "flash_attention_2" in rule.affects.features
    }
    return {rule: found[rule]["verdict"] for rule in wanted}


def test_fa2_in_one_config_and_gemma2_in_another_is_never_affected(site, tmp_path: Path):
    root = project(
        tmp_path / "simpo",
        {
            "training_configs/gemma-2-9b-it-simpo.yaml": SIMPO_GEMMA2,
            "training_configs/llama-3.yaml": SIMPO_LLAMA3,
        },
    )
    verdicts = gemma2_rules(findings(site, root))
    assert verdicts, "the database has Gemma-2 FA2 rules"
    assert "affected" not in verdicts.values(), verdicts


def test_the_reason_names_the_separate_files(site, tmp_path: Path):
    root = project(
        tmp_path / "simpo",
        {
            "training_configs/gemma-2-9b-it-simpo.yaml": SIMPO_GEMMA2,
            "training_configs/llama-3.yaml": SIMPO_LLAMA3,
            "scripts/decode.py": "outputs = llm.generate(prompts)\n",
        },
    )
    finding = findings(site, root)[GEMMA2_FA2_RULE]
    assert finding["verdict"] == "unknown"
    [apart] = [reason for reason in finding["reasons"] if "used together" in reason["text"]]
    assert apart["holds"] is None
    assert "training_configs/llama-3.yaml:4" in apart["text"]
    assert "training_configs/gemma-2-9b-it-simpo.yaml:2" in apart["text"]
    assert "scripts/decode.py:1" in apart["text"]


def test_one_file_showing_them_together_is_affected_with_that_file_as_evidence(site, tmp_path: Path):
    root = project(tmp_path / "gemma2", {"train.py": TRAIN, "configs/llama-3.yaml": SIMPO_LLAMA3})
    finding = findings(site, root)[GEMMA2_FA2_RULE]
    assert finding["verdict"] == "affected"
    assert any(reason["text"] == "used together in train.py" for reason in finding["reasons"])


def test_a_declared_feature_holds_everywhere(site, tmp_path: Path):
    """`--feature generate` is the user's word for the whole program: only FA2 and the Gemma-2
    model, both the scan's, need one file (the Gemma-2 config that selects FA2)."""
    root = project(tmp_path / "gemma2", {"configs/gemma2.yaml": GEMMA2_WITH_FA2})
    declared = ("--feature", "generate", "--feature", "flash_attention_2")
    assert findings(site, root, *declared)[GEMMA2_FA2_RULE]["verdict"] == "affected"
    apart = project(tmp_path / "apart", {"a.yaml": SIMPO_GEMMA2, "b.yaml": SIMPO_LLAMA3})
    assert findings(site, apart, "--feature", "generate")[GEMMA2_FA2_RULE]["verdict"] == "unknown"
