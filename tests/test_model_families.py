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
from attn_doctor.facts.model_families import MODEL_FAMILIES
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
    assert "or a model (declare: --model, [tool.attn-doctor] models):" in text
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
    assert (result.exit_code, result.stdout) == (0, "ok: 1 rule valid\n"), result.stderr


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


# A CI job that checks a declared target without the project's code: only the family it declares
# (--model, [tool.attn-doctor] models) says which model runs.
TARGET_PINS = "torch==2.4.0\ntransformers==4.44.0\nflash-attn==2.6.3\n"
FEATURES = ["--feature", "flash_attention_2", "--feature", "generate"]


def declared_check(tmp_path: Path, *more: str):
    """`check -r requirements.txt --gpu H100` in a folder that holds no code (pyproject.toml at most)."""
    root = tmp_path / "ci"
    root.mkdir(exist_ok=True)
    (root / "requirements.txt").write_text(TARGET_PINS)
    return cli("check", "-r", root / "requirements.txt", "--gpu", "H100", "--project", root, *FEATURES, *more)


def declared_finding(tmp_path: Path, *more: str) -> tuple[dict, dict]:
    """The Gemma-2 rule's finding and the environment's features, from the JSON report."""
    result = declared_check(tmp_path, *more, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    report = json.loads(result.stdout)
    [finding] = [f for f in report["findings"] if f["id"] == GEMMA2_GENERATE]
    return finding, report["environment"]["features"]


def test_a_declared_gemma2_model_makes_a_gemma2_rule_affected(tmp_path: Path):
    finding, features = declared_finding(tmp_path, "--model", "gemma2")
    assert finding["verdict"] == "affected"
    [models] = [reason for reason in finding["reasons"] if reason["condition"] == "models"]
    assert models["text"] == "gemma2 model in use: --model"
    assert features["models"] == [{"name": "gemma2", "in_use": True, "source": "--model", "evidence": []}]


def test_a_declared_llama_model_is_not_affected_by_a_gemma2_bug(tmp_path: Path):
    finding, _ = declared_finding(tmp_path, "--model", "llama")
    assert finding["verdict"] == "not-affected"
    [models] = [reason for reason in finding["reasons"] if reason["condition"] == "models"]
    assert models["text"] == "not a gemma2 model: the code runs llama"


def test_no_declared_model_leaves_the_rule_to_the_notice(tmp_path: Path):
    finding, _ = declared_finding(tmp_path)
    assert finding["verdict"] == "unknown" and finding["applies_if_used"] == ["a gemma2 model"]
    lines = declared_check(tmp_path, "--format", "github").stdout.splitlines()
    [notice] = [line for line in lines if GEMMA2_GENERATE in line]
    assert "applies if you use a gemma2 model (declare: --model): " in notice


def test_the_pyproject_declares_the_models(tmp_path: Path):
    (tmp_path / "ci").mkdir()
    pyproject = tmp_path / "ci" / "pyproject.toml"
    trainer = '[tool.trainer]\nattn_implementation = "sdpa"\n'
    pyproject.write_text(f'[tool.attn-doctor]\nmodels = [\n  "gemma2",\n]\n\n{trainer}')
    finding, features = declared_finding(tmp_path)
    assert finding["verdict"] == "affected"
    [model] = features["models"]
    # the scan reads the pyproject, but not attn-doctor's own table: a declaration is not evidence
    # (the name gemma2 would also be Gemma-2's softcap and sliding_window); the lines below it keep
    # their numbers
    assert (model["name"], model["source"]) == ("gemma2", f"{pyproject} [tool.attn-doctor] models")
    scanned = {fact["name"]: fact["evidence"] for fact in features["facts"] if fact["source"] != "--feature"}
    assert scanned == {"sdpa": ["pyproject.toml:7"]}
    lines = declared_check(tmp_path, "-v").stdout.splitlines()
    [fact] = [line for line in lines if line.strip().startswith("model ")]
    assert fact.split() == ["model", "gemma2", "in", "use", str(pyproject), "[tool.attn-doctor]", "models"]
    assert "gemma2 model in use: --model" in declared_check(tmp_path, "--model", "gemma2", "-v").stdout


def test_a_bad_family_in_the_pyproject_is_one_line(tmp_path: Path):
    (tmp_path / "ci").mkdir()
    pyproject = tmp_path / "ci" / "pyproject.toml"
    pyproject.write_text('[tool.attn-doctor]\nmodels = ["gemma-2"]\n')
    result = declared_check(tmp_path)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"attn-doctor: error: {pyproject} [tool.attn-doctor] models: unknown model family 'gemma-2': "
        "did you mean 'gemma2'? known: gemma, gemma2, gemma3, glm4v,"
    )


GOLDEN_INPUTS = Path(__file__).parent / "fixtures" / "golden"
FLEET = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "command",
    [
        ["check", "-r", GOLDEN_INPUTS / "requirements.txt"],
        ["fix", "-r", GOLDEN_INPUTS / "requirements.txt", "--gpu", "H100"],
        ["report", "-r", GOLDEN_INPUTS / "requirements.txt", "--gpu", "H100"],
        ["wheel", "flash-attn", "-r", GOLDEN_INPUTS / "requirements.txt", "--python", "3.11"],
        ["explain", GOLDEN_INPUTS / "fa2-not-installed.log"],
        ["merge", FLEET / "healthy" / "h100-current.json", FLEET / "fleet" / "h100-xformers-mismatch.json"],
    ],
    ids=lambda command: command[0],
)
def test_every_command_with_feature_takes_model_and_refuses_an_unknown_family(command: list):
    result = cli(*command, "--no-scan", "--model", "gema2")
    assert result.exit_code == 2, result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "attn-doctor: error: --model: unknown model family 'gema2': did you mean 'gemma2'?"
    )
    assert line.endswith("known: " + ", ".join(MODEL_FAMILIES))
