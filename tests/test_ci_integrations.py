"""The CI integrations in the repository, run as the shell commands they are: the GitHub Action
(action.yml), the pre-commit hook (.pre-commit-hooks.yaml, through `pre-commit try-repo`) and the
GitLab CI job (ci/attn-doctor.gitlab-ci.yml, Code Quality report)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import REPO, needs_package_index

PINFILES = REPO / "tests" / "fixtures" / "pinfiles"
BIN = str(Path(sys.executable).parent)


def shell(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "NO_COLOR": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _expressions(text: str, values: dict[str, str]) -> str:
    """GitHub's ``${{ inputs.x }}`` and ``${{ steps.check.outputs.x }}``, as the runner fills them."""
    return re.sub(r"\$\{\{\s*([a-z.\-_]+)\s*\}\}", lambda m: values[m[1]], text)


ACTION = yaml.safe_load((REPO / "action.yml").read_text())
ACTION_STEPS = {step.get("id") or step.get("name"): step for step in ACTION["runs"]["steps"]}


def run_the_action_check(folder: Path, inputs: dict[str, str]) -> tuple[dict[str, str], Path, Path]:
    """The Action's check step as the runner runs it in ``folder``, with ``inputs`` over the
    defaults; the expressions' values, the job summary and the step's output file."""
    values = {f"inputs.{name}": spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    values |= {f"inputs.{name}": value for name, value in inputs.items()}
    summary, output = folder / "summary.md", folder / "output.txt"
    check = ACTION_STEPS["check"]
    env = {key: _expressions(str(value), values) for key, value in check["env"].items()}
    env |= {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)}
    done = shell(check["run"], folder, env)
    assert done.returncode == 0, done.stderr
    return values, summary, output


def sarif_rule_ids(folder: Path) -> list[str]:
    """The rules of the results in the step's attn-doctor.sarif."""
    sarif = json.loads((folder / "attn-doctor.sarif").read_text())
    rules = [rule["id"] for rule in sarif["runs"][0]["tool"]["driver"]["rules"]]
    return [rules[r["ruleIndex"]] for r in sarif["runs"][0]["results"]]


@pytest.mark.parametrize(("fail_on", "expected"), [("error", "1"), ("never", "0")])
def test_the_github_action_runs_check_writes_sarif_and_the_summary(
    tmp_path: Path, fail_on: str, expected: str
) -> None:
    shutil.copy(PINFILES / "uv.lock", tmp_path / "uv.lock")
    inputs = {"requirements": "uv.lock", "gpus": "sm_80", "features": "flash_attention_2", "fail-on": fail_on}
    values, summary, output = run_the_action_check(tmp_path, inputs)
    assert output.read_text().strip() == f"exit-code={expected}"
    assert "gemma2-fa2-cu-seqlens" in sarif_rule_ids(tmp_path)
    assert "gemma2-fa2-cu-seqlens" in summary.read_text()
    upload = ACTION_STEPS["Upload to code scanning"]
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert upload["with"]["sarif_file"] == "attn-doctor.sarif"
    values["steps.check.outputs.exit-code"] = expected
    verdict = shell(_expressions(ACTION_STEPS["Verdict"]["run"], values), tmp_path, {})
    assert verdict.returncode == int(expected)


@pytest.mark.parametrize(("target_python", "affected"), [("3.11", False), ("3.12", True)])
def test_the_github_action_checks_the_targets_python(
    tmp_path: Path, target_python: str, affected: bool
) -> None:
    """target-python is check's --python: torch 2.3.1 refuses torch.compile on 3.12, not on 3.11
    (whatever the Python that runs attn-doctor)."""
    (tmp_path / "requirements.txt").write_text("torch==2.3.1\n")
    inputs = {"requirements": "requirements.txt", "features": "torch_compile", "target-python": target_python}
    run_the_action_check(tmp_path, inputs)
    assert ("torch-compile-python-3-12-needs-torch-2-4" in sarif_rule_ids(tmp_path)) is affected


def test_the_gitlab_job_writes_a_code_quality_report(tmp_path: Path) -> None:
    job = yaml.safe_load((REPO / "ci" / "attn-doctor.gitlab-ci.yml").read_text())["attn-doctor"]
    assert job["artifacts"]["reports"]["codequality"] == "gl-code-quality-report.json"
    shutil.copy(PINFILES / "uv.lock", tmp_path / "uv.lock")
    script = "\n".join(line for line in job["script"] if not line.startswith("pip install"))
    args = "-r uv.lock --gpu sm_80 --feature flash_attention_2"
    done = shell(script, tmp_path, {"ATTN_DOCTOR_ARGS": args})
    assert done.returncode == 1  # an error-severity finding fails the job
    issues = json.loads((tmp_path / "gl-code-quality-report.json").read_text())
    issue = next(i for i in issues if i["check_name"] == "attn-doctor/gemma2-fa2-cu-seqlens")
    assert issue["severity"] == "critical" and issue["location"]["path"] == "uv.lock"
    line = issue["location"]["lines"]["begin"]
    assert (tmp_path / "uv.lock").read_text().splitlines()[line - 1] == 'name = "transformers"'
    assert len({i["fingerprint"] for i in issues}) == len(issues)


@pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git")
def test_the_pre_commit_hook_under_try_repo(tmp_path: Path) -> None:
    """pre-commit installs this repository into its own environment and runs the hook when a pin
    file is among the files; a change without one skips it."""
    needs_package_index()  # pre-commit builds the hook's environment from the index
    project = tmp_path / "project"
    project.mkdir()
    git = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    shell("git init -q && git add -A", project, git)
    (project / "README.md").write_text("no pin file here\n")
    shell("git add README.md", project, git)
    skipped = shell(
        f"pre-commit try-repo {REPO} attn-doctor-check", project, {"PRE_COMMIT_HOME": str(tmp_path / "pc")}
    )
    assert "(no files to check)Skipped" in skipped.stdout, skipped.stdout + skipped.stderr
    (project / "requirements.txt").write_text("torch==2.5.1\n")
    shell("git add requirements.txt", project, git)
    ran = shell(
        f"pre-commit try-repo {REPO} attn-doctor-check", project, {"PRE_COMMIT_HOME": str(tmp_path / "pc")}
    )
    assert ran.returncode == 0 and "attn-doctor check" in ran.stdout and "Passed" in ran.stdout, (
        ran.stdout + ran.stderr
    )
