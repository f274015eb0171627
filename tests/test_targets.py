"""What the environment is made of: a declared target is the whole target, pins alone mean "this
machine with this version", features come from the user's project, and typos are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cli


def report(*args: str | Path) -> dict:
    result = cli("check", "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def verdicts(document: dict) -> dict[str, str]:
    return {f["id"]: f["verdict"] for f in document["findings"]}


@pytest.fixture
def runner_with_triton(site):
    """The CI runner's own venv: torch 2.13.0 CPU and triton 3.9.0."""
    site.install("torch", "2.13.0+cpu", torch_cuda=None)
    site.install("triton", "3.9.0")
    return site


def test_requirements_target_does_not_mix_in_the_runners_packages(tmp_path, runner_with_triton, monkeypatch):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.1+cu121\nflash-attn==2.6.3\n")
    monkeypatch.syspath_prepend(str(runner_with_triton.path))  # the runner's venv is on sys.path
    document = report("-r", requirements, "--gpu", "A100", "--feature", "torch_compile")
    packages = document["environment"]["packages"]
    assert set(packages) == {"torch", "flash-attn", "triton"}
    assert packages["triton"]["version"] == "3.1.0"  # what torch 2.5.1 pins, not the runner's 3.9.0
    assert packages["triton"]["origin"].startswith("implied by torch 2.5.1+cu121")
    assert document["environment"]["target"] == f"{requirements} (2 packages)"
    found = verdicts(document)
    assert found["triton-3-4-needs-torch-2-8"] == found["triton-3-2-needs-torch-2-6"] == "not-affected"
    fix = json.loads(cli("fix", "--format", "json", "-r", requirements, "--gpu", "A100").stdout)
    assert not any(change["package"] == "torch" for change in fix["changes"])


def test_requirements_target_states_what_it_leaves_unknown(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.1+cu121\n")
    env = report("-r", requirements)["environment"]
    assert env["gpus"] == [] and env["gpu_source"] == "unknown"  # not the runner's "none"
    assert env["nvcc"] is None and "nvcc" not in env["origins"]  # unknown, not "not installed"
    assert env["platform"] == "linux" and "default" in env["origins"]["platform"]
    text = cli("check", "-r", requirements).stdout
    assert text.startswith(f"attn-doctor check (target: {requirements} (1 package))")


def test_pins_alone_keep_this_machine(runner_with_triton):
    document = report("--path", runner_with_triton.path, "--pin", "torch==2.5.1+cu121")
    packages = document["environment"]["packages"]
    assert packages["torch"]["version"] == "2.5.1+cu121" and packages["torch"]["origin"] == "--pin"
    assert packages["triton"]["origin"].endswith("triton-3.9.0.dist-info")
    assert document["environment"]["target"].startswith("this machine")
    assert document["environment"]["target"].endswith("with --pin torch==2.5.1+cu121")


def test_pins_override_the_file(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.1\ntransformers==4.44.0\n")
    packages = report("-r", requirements, "--pin", "torch==2.6.0")["environment"]["packages"]
    assert packages["torch"]["version"] == "2.6.0" and packages["transformers"]["version"] == "4.44.0"


def test_path_with_a_declared_target_is_refused(tmp_path, site):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.1\n")
    result = cli("check", "--path", site.path, "-r", requirements)
    assert result.exit_code == 2 and "--path: reads installed packages" in result.stderr


def test_undeclared_feature_is_unknown_not_affected():
    """torch 2.1 has no flex_attention, but most torch 2.1 users never call it."""
    document = report("--pin", "torch==2.1.0", "--no-scan")
    finding = next(f for f in document["findings"] if f["id"] == "flex-attention-needs-torch-2-5")
    assert finding["verdict"] == "unknown" and finding["applies_if_used"] == ["flex_attention"]
    assert document["summary"]["applies_if_used"]["flex_attention"] == ["flex-attention-needs-torch-2-5"]
    assert document["exit_code"] == 0
    text = cli("check", "--pin", "torch==2.1.0", "--no-scan").stdout
    assert "  ? if you use flex_attention: 1 rule\n" in text
    verbose = cli("check", "--pin", "torch==2.1.0", "--no-scan", "-v").stdout
    assert "  ? if you use flex_attention: 1 rule: flex-attention-needs-torch-2-5" in verbose
    declared = report("--pin", "torch==2.1.0", "--feature", "flex_attention")
    assert verdicts(declared)["flex-attention-needs-torch-2-5"] == "affected"


def test_a_feature_in_the_project_makes_the_rule_affected_with_evidence(tmp_path, monkeypatch):
    """The issue's "done when": src/train.py passes attn_implementation="flex_attention"."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "from transformers import AutoModelForCausalLM\n\n"
        'model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="flex_attention")\n'
    )
    monkeypatch.chdir(tmp_path / "src")  # the project is the enclosing git work tree
    document = report("--pin", "transformers==4.51.0", "--pin", "torch==2.6.0")
    finding = next(f for f in document["findings"] if f["id"] == "transformers-flex-blockmask-no-dim")
    assert finding["verdict"] == "affected"
    features = next(r for r in finding["reasons"] if r["condition"] == "features")
    assert features["evidence"] == ["src/train.py:3"]
    facts = {fact["name"]: fact for fact in document["environment"]["features"]["facts"]}
    assert facts["flex_attention"]["evidence"] == ["src/train.py:3"]
    assert "project scan" in facts["flex_attention"]["source"]
    assert (
        verdicts(report("--pin", "transformers==4.51.0", "--pin", "torch==2.6.0", "--no-scan"))[
            "transformers-flex-blockmask-no-dim"
        ]
        == "unknown"
    )


def test_source_build_rules_need_a_source(tmp_path, monkeypatch, no_gpu):
    monkeypatch.chdir(tmp_path)
    assert verdicts(report())["fa3-hopper-pipelineparams-build"] == "not-affected"
    checkout = tmp_path / "flash-attention" / "hopper"
    checkout.mkdir(parents=True)
    (checkout / "flash_fwd_kernel_sm90.h").write_text("// FA3\n")
    document = report("--fail-on", "never")
    assert verdicts(document)["fa3-hopper-pipelineparams-build"] == "affected"
    facts = {fact["name"]: fact for fact in document["environment"]["features"]["facts"]}
    assert facts["source_build"]["evidence"] == ["flash-attention/hopper/flash_fwd_kernel_sm90.h:1"]


def test_project_option_and_its_pyproject_exclude(tmp_path):
    project = tmp_path / "proj"
    (project / "legacy").mkdir(parents=True)
    (project / "legacy" / "x.py").write_text("import xformers.ops\n")
    scanned = report("--project", project)["environment"]["features"]["facts"]
    assert [(fact["name"], fact["evidence"]) for fact in scanned] == [("xformers", ["legacy/x.py:1"])]
    (project / "pyproject.toml").write_text('[tool.attn-doctor]\nexclude = ["legacy"]\n')
    assert report("--project", project)["environment"]["features"]["facts"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--feature", "flash_attn_2"), "unknown feature 'flash_attn_2': did you mean 'flash_attention_2'?"),
        (("--feature", ""), "unknown feature ''"),
        (("--feature", "sdpa,flex_attention"), "unknown feature 'sdpa,flex_attention'"),
        (("--path", "/nonexistent"), "--path /nonexistent: no such folder"),
        (("--gpu", "0.0"), "no GPU has compute capability 0.0"),
        (("--gpu", "sm_999"), "no GPU has compute capability 99.9"),
        (("--project", "/nonexistent"), "--project /nonexistent: not a folder"),
    ],
)
def test_typos_are_errors(args, needle):
    result = cli("check", *args)
    assert result.exit_code == 2, result.stdout
    assert needle in result.stderr and len(result.stderr.splitlines()) == 1


def test_path_to_a_file_is_an_error(tmp_path):
    file = tmp_path / "site.txt"
    file.write_text("")
    result = cli("check", "--path", file)
    assert result.exit_code == 2 and "not a folder" in result.stderr


def test_path_to_a_venv_root_uses_its_site_packages(tmp_path):
    venv = tmp_path / "venv"
    site_packages = venv / "lib" / "python3.11" / "site-packages"
    (site_packages / "transformers-4.44.0.dist-info").mkdir(parents=True)
    (site_packages / "transformers-4.44.0.dist-info" / "METADATA").write_text(
        "Name: transformers\nVersion: 4.44.0\n"
    )
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    env = report("--path", venv, "--no-scan")["environment"]
    assert env["packages"]["transformers"]["version"] == "4.44.0"
    assert f"the site-packages of the environment {venv}" in env["sources"]


def test_feature_typos_in_pyproject_and_env_file(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.attn-doctor]\nfeatures = ["flex_atention"]\n')
    result = cli("check", "--config", pyproject)
    assert result.exit_code == 2 and "did you mean 'flex_attention'" in result.stderr
    env_file = tmp_path / "env.json"
    document = json.loads(cli("probe", "--json").stdout)
    document["features"] = ["typo"]
    document["schema_version"] = 1
    for key in ("target", "origins"):
        del document[key]
    env_file.write_text(json.dumps(document))
    result = cli("check", "--env-file", env_file)
    assert result.exit_code == 2 and "unknown feature 'typo'" in result.stderr
