"""Rules about one model family's code (``models`` in [affects]) hold only for a project that runs
that family: issue 36's Llama-3.1 project (FA2, generate) on transformers 4.44.0 is not affected by
Gemma-2's generate bug, a Gemma-2 project is, and a project whose model is not known leaves it
"applies if you use a gemma2 model"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cli, write_rule

from attn_doctor.check import run_check
from attn_doctor.config import Config
from attn_doctor.engine.loader import database_path, load_rules
from attn_doctor.facts.assemble import assemble, target
from attn_doctor.probes.observation import Observation, ProbeVerdict

GEMMA2_GENERATE = "gemma2-fa2-generate-4d-mask"
SHARED_FA2_PATH = "gemma2-fa2-cu-seqlens"  # 4.44.0's shared FA2 code: every family that passes position_ids

LLAMA_TRAIN = """\
from transformers import AutoModelForCausalLM, AutoTokenizer

name = "meta-llama/Llama-3.1-8B-Instruct"
model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="flash_attention_2")
tokenizer = AutoTokenizer.from_pretrained(name)
print(model.generate(**tokenizer("hi", return_tensors="pt")))
"""
GEMMA2_TRAIN = LLAMA_TRAIN.replace("meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it")
# the model's name comes from the command line: which family runs is not in the code
UNNAMED_TRAIN = LLAMA_TRAIN.replace('"meta-llama/Llama-3.1-8B-Instruct"', "sys.argv[1]")


def project(root: Path, train: str) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text(train)
    return root


def check(site, root: Path, *more: str):
    """The issue's command: `check --gpu H100 --pin transformers==4.44.0` in the project."""
    args = ["--path", site.path, "--gpu", "H100", "--pin", "transformers==4.44.0", "--project", root, *more]
    return cli("check", *args)


def findings(site, root: Path) -> dict[str, dict]:
    result = check(site, root, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return {finding["id"]: finding for finding in json.loads(result.stdout)["findings"]}


def test_a_llama_project_is_not_affected_by_a_gemma2_bug(site, tmp_path: Path):
    found = findings(site, project(tmp_path / "llama", LLAMA_TRAIN))
    gemma2 = found[GEMMA2_GENERATE]
    assert gemma2["verdict"] == "not-affected"
    [models] = [reason for reason in gemma2["reasons"] if reason["condition"] == "models"]
    assert models["holds"] is False
    assert models["text"] == "not a gemma2 model: the code runs llama (src/train.py:3)"
    assert found[SHARED_FA2_PATH]["verdict"] == "affected"  # that bug is in the code Llama runs


def test_a_gemma2_project_is_affected(site, tmp_path: Path):
    found = findings(site, project(tmp_path / "gemma", GEMMA2_TRAIN))
    gemma2 = found[GEMMA2_GENERATE]
    assert gemma2["verdict"] == "affected"
    [models] = [reason for reason in gemma2["reasons"] if reason["condition"] == "models"]
    assert models["holds"] is True and models["evidence"] == ["src/train.py:3"]


def test_no_model_known_applies_if_used(site, tmp_path: Path):
    root = project(tmp_path / "unnamed", UNNAMED_TRAIN)
    gemma2 = findings(site, root)[GEMMA2_GENERATE]
    assert gemma2["verdict"] == "unknown"
    assert gemma2["applies_if_used"] == ["a gemma2 model"]
    text = check(site, root).stdout
    assert "or a model (the project scan finds it by name):" in text
    assert "? if you use a gemma2 model: 1 rule" in text


def test_verbose_shows_the_family_and_where_it_was_found(site, tmp_path: Path):
    root = project(tmp_path / "llama", LLAMA_TRAIN)
    lines = check(site, root, "-v").stdout.splitlines()
    [fact] = [line for line in lines if line.strip().startswith("model ")]
    assert fact.split() == ["model", "llama", "in", "use", *f"project scan of {root} src/train.py:3".split()]


def test_a_log_through_gemma2s_modeling_code_shows_the_family(tmp_path: Path):
    """explain on seed A's log: its traceback runs modeling_gemma2.py, so the Gemma-2 rule holds."""
    log = Path(__file__).parent / "logs" / "seed_a.log"
    args = ["--pin", "transformers==4.44.0", "--feature", "flash_attention_2", "--feature", "generate"]
    result = cli("explain", log, *args, "--no-scan", "--format", "json")
    [cause] = [c for c in json.loads(result.stdout)["causes"] if c["id"] == GEMMA2_GENERATE]
    assert cause["verdict"] == "affected"


def test_a_probe_that_saw_the_bug_still_needs_the_family(site, tmp_path: Path, monkeypatch):
    """A probe sees what the installed transformers does (4.52's Gemma2 generate builds the 4-D mask
    again, outside the rule's versions); a Llama project's code never runs it."""
    monkeypatch.chdir(project(tmp_path / "llama", LLAMA_TRAIN))
    inputs = target(None, [site.path], [], ["transformers==4.52.4"], ["H100"], None, None, False, None, None)
    env, _ = assemble(inputs, Config())
    seen = Observation(GEMMA2_GENERATE, ProbeVerdict.AFFECTED, "gather indices past the batch")
    ruleset = load_rules([database_path()], trust_database=True)
    result = run_check(env, ruleset, Config(), None, observations=[seen])
    [finding] = [f for f in result.findings if f.rule.id == GEMMA2_GENERATE]
    assert finding.version_verdict.value == "not-affected" and finding.verdict.value == "not-affected"
    assert any(r.condition == "models" and r.holds is False for r in finding.reasons)


def test_a_rule_names_families(tmp_path: Path):
    rule = write_rule(tmp_path / "rules", "my-gemma-rule", 'models = ["gemma2", "gemma3"]')
    result = cli("rules", "validate", rule)
    assert (result.exit_code, result.stdout) == (0, "ok: 1 rules valid\n"), result.stderr


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('["gemma-2"]', "'gemma-2' is not one of gemma, gemma2, gemma3, glm4v,"),
        ('"gemma2"', "must be a list of strings"),
    ],
)
def test_a_bad_family_in_a_rule_is_one_line(tmp_path: Path, value: str, problem: str):
    rule = write_rule(tmp_path / "rules", "my-gemma-rule", f"models = {value}")
    result = cli("rules", "validate", rule)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"attn-doctor: error: {rule}: field 'affects.models': {problem}")
