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
from support import REPO

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


@pytest.mark.parametrize(("fail_on", "expected"), [("error", "1"), ("never", "0")])
def test_the_github_action_runs_check_writes_sarif_and_the_summary(
    tmp_path: Path, fail_on: str, expected: str
) -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    steps = {step.get("id") or step.get("name"): step for step in action["runs"]["steps"]}
    shutil.copy(PINFILES / "uv.lock", tmp_path / "uv.lock")
    values = {f"inputs.{name}": spec.get("default", "") for name, spec in action["inputs"].items()}
    values |= {
        "inputs.requirements": "uv.lock",
        "inputs.gpus": "sm_80",
        "inputs.features": "flash_attention_2",
    }
    values["inputs.fail-on"] = fail_on
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    check = steps["check"]
    env = {key: _expressions(str(value), values) for key, value in check["env"].items()}
    env |= {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)}
    done = shell(check["run"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert output.read_text().strip() == f"exit-code={expected}"
    sarif = json.loads((tmp_path / "attn-doctor.sarif").read_text())
    rules = [rule["id"] for rule in sarif["runs"][0]["tool"]["driver"]["rules"]]
    found = [rules[r["ruleIndex"]] for r in sarif["runs"][0]["results"]]
    assert "gemma2-fa2-cu-seqlens" in found
    assert "gemma2-fa2-cu-seqlens" in summary.read_text()
    upload = steps["Upload to code scanning"]
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert upload["with"]["sarif_file"] == "attn-doctor.sarif"
    values["steps.check.outputs.exit-code"] = expected
    verdict = shell(_expressions(steps["Verdict"]["run"], values), tmp_path, {})
    assert verdict.returncode == int(expected)


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
