"""`attn-doctor report`: the Markdown a user pastes into a public issue. It must carry the facts,
findings and commands a maintainer needs, render on GitHub, and never leak a secret or a home path."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, cli

from attn_doctor.redact import SECRET_NAME_WORDS, home_dirs, scrub
from attn_doctor.report.env_vars import RELEVANT_NAMES, RELEVANT_PREFIXES, relevant_variables
from attn_doctor.report.repro_report import to_json
from attn_doctor.repro.runner import CaseResult, Status

AFFECTED = ["--pin", "transformers==4.44.0", "--gpu", "sm_90", "--feature", "flash_attention_2"]
SECRETS = {
    "HF_TOKEN": "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5kL7n",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "MY_PASSWORD": "correct-horse-battery-staple",
    "GITHUB_TOKEN": "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
}
# secrets in variables whose names look harmless: only the value's shape gives them away
HIDDEN = {
    "HF_HUB_NOTE": "hf_" + "Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5Nm7",
    "TRANSFORMERS_NOTE": "sk-" + "proj" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4",
    "HF_ENDPOINT": "https://alice:Sup3rS3cret@mirror.example.invalid/hf",
}


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site):
    """A user's home with a virtual environment in it, and secrets in the environment."""
    home = tmp_path / "home" / "alice.smith"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for name, value in {**SECRETS, **HIDDEN}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("TRITON_CACHE_DIR", f"{home}/.triton")
    venv = type(site)(home / ".venvs" / "lab" / "lib" / "python3.11" / "site-packages")  # conftest's Site
    venv.path.mkdir(parents=True)
    venv.install("transformers", "4.44.0")
    venv.install("torch", "2.4.0+cu121", torch_cuda="12.1")
    return venv


def assert_no_leak(text: str) -> None:
    home = os.environ["HOME"]
    for name, value in {**SECRETS, **HIDDEN}.items():
        assert value not in text, name
    assert "Sup3rS3cret" not in text
    for name in SECRETS:
        assert name not in text  # left out entirely, not even the name
    assert home not in text and os.path.realpath(home) not in text
    assert "alice.smith" not in text


def test_report_leaks_no_secret_and_no_home(planted, tmp_path: Path):
    result = cli("report", "--path", planted.path, *AFFECTED)
    assert result.exit_code == 0, result.stderr
    assert_no_leak(result.stdout + result.stderr)
    text = result.stdout
    assert "- `CUDA_VISIBLE_DEVICES` = `0,1`" in text
    assert "`~/.triton`" in text
    assert "~/.venvs/lab/lib/python3.11/site-packages/torch-2.4.0+cu121.dist-info" in text
    withheld = relevant_variables(os.environ).withheld  # HF_TOKEN, and any the machine had
    assert withheld >= 1 and f"{withheld} withheld" in text
    assert "https://[redacted]@mirror.example.invalid/hf" in text

    written = tmp_path / "issue.md"
    result = cli("report", "--path", planted.path, *AFFECTED, "--output", written)
    assert result.exit_code == 0 and result.stdout == ""
    assert_no_leak(written.read_text())
    assert "`~/.triton`" in written.read_text()


def test_report_as_a_subprocess_leaks_nothing(planted):
    result = subprocess.run(
        [sys.executable, "-m", "attn_doctor", "report", "--path", str(planted.path), *AFFECTED],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert_no_leak(result.stdout + result.stderr)
    assert "CUDA_VISIBLE_DEVICES" in result.stdout and "~/.triton" in result.stdout


def test_findings_fix_reference_and_commands():
    text = cli("report", *AFFECTED).stdout
    item = text.split("- **`gemma2-fa2-cu-seqlens`** (error, affected)", 1)[1].split("\n- ", 1)[0]
    assert "  - fix: Upgrade transformers to 4.44.1" in item
    assert "  - see: https://github.com/huggingface/transformers/pull/32487" in item
    assert "  - fixed by: `transformers>=4.44.1`" in item
    assert "- GPU 0: sm_90\n" in text  # the name is the architecture: not "sm_90 (sm_90, ...)"
    commands = re.search(r"```bash\n(.*?)```", text, re.S)[1].splitlines()
    assert (
        commands[0] == "attn-doctor check --pin transformers==4.44.0 --gpu sm_90 --feature flash_attention_2"
    )
    assert "attn-doctor repro gemma2-fa2-cu-seqlens" in commands

    rerun = json.loads(cli(*shlex.split(commands[0])[1:], "--format", "json").stdout)
    affected = {f["id"] for f in rerun["findings"] if f["verdict"] == "affected"}
    assert affected == set(re.findall(r"^- \*\*`([\w-]+)`\*\* \(\w+, affected\)", text, re.M))


def test_the_check_command_keeps_the_declared_model():
    """A declared model family decides the Gemma-2 rules: the report's check command repeats it."""
    args = [*AFFECTED, "--feature", "generate", "--model", "gemma2", "--no-scan"]
    text = cli("report", *args).stdout
    command = re.search(r"```bash\n(.*?)\n", text)[1]
    assert command.endswith("--feature flash_attention_2 --feature generate --model gemma2")
    assert "- **`gemma2-fa2-generate-4d-mask`** (error, affected)" in text


@pytest.fixture(scope="module")
def saved_repro(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `repro --format json` run: the fixed case of seed A's kernel, in the interpreter."""
    result = cli("repro", "varlen-cu-seqlens", "--case", "fixed", "--device", "cpu", "--format", "json")
    assert result.exit_code == 0, result.stderr
    path = tmp_path_factory.mktemp("repro") / "repro.json"
    path.write_text(result.stdout)
    return path


def test_repro_results_are_included(saved_repro: Path):
    text = cli("report", *AFFECTED, "--repro-json", saved_repro).stdout
    section = text.split("### Repro results", 1)[1]
    assert "1 case: 1 NOT REPRODUCED; 0 not as expected (from repro.json)" in section
    assert "- `varlen-cu-seqlens` / `fixed`: NOT REPRODUCED (clean run expected)" in section
    assert "\\|ref\\|" in section  # the detail's pipes are escaped, not cell borders


def case(**override: object) -> dict:
    result = CaseResult("varlen-cu-seqlens", "buggy", True, Status.REPRODUCED, "assert", "cpu")
    return {**json.loads(to_json([result]))["results"][0], **override}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not JSON"),
        ('{"schema": "attn-doctor/report", "schema_version": 1}', "not attn-doctor repro results"),
        ('{"schema": "attn-doctor/repro", "schema_version": 7, "results": []}', "schema_version 7"),
        ({"results": "all fine"}, "'results' has the wrong type"),
        ({"results": [{k: v for k, v in case().items() if k != "status"}]}, "missing field 'status'"),
        ({"results": [case(status="MAYBE")]}, "'MAYBE' is not a valid Status"),
        ({"results": [case(versions={"torch": 2})]}, "version strings"),
    ],
)
def test_bad_repro_json_is_one_line_exit_2(tmp_path: Path, content: str | dict, needle: str):
    path = tmp_path / "saved.json"
    document = (
        {"schema": "attn-doctor/repro", "schema_version": 1, **content} if isinstance(content, dict) else None
    )
    path.write_text(content if isinstance(content, str) else json.dumps(document))
    result = cli("report", *AFFECTED, "--repro-json", path)
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("attn-doctor: error: ") and "saved.json" in line and needle in line, line


def test_unwritable_output_is_one_line_exit_2(tmp_path: Path):
    result = cli("report", *AFFECTED, "--output", tmp_path / "no-such-folder" / "issue.md")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "issue.md" in line


def test_live_probes_section():
    text = cli("report", "--probe").stdout
    section = text.split("### Live probes", 1)[1].split("###", 1)[0]
    assert "(versions alone: " in section or "No live probe applies" in section
    assert "attn-doctor check --probe" in text


def test_markdown_renders(planted, saved_repro: Path):
    """Balanced <details> (each with a summary and blank lines around its Markdown), closed code
    fences, and any table whose rows all have the header's number of cells (findings, facts and
    variables are lists now: they wrap within 80 columns)."""
    text = cli("report", "--path", planted.path, *AFFECTED, "--repro-json", saved_repro, "--probe").stdout
    lines = text.splitlines()
    depth = 0
    for number, line in enumerate(lines):
        if line == "<details>":
            depth += 1
            assert re.fullmatch(r"<summary>[^<>]+</summary>", lines[number + 1])
            assert lines[number + 2] == ""
        elif line == "</details>":
            depth -= 1
            assert depth >= 0 and lines[number - 1] == ""
    assert depth == 0 and text.count("<details>") == 3  # environment, variables, repro
    assert text.count("```") % 2 == 0
    tables = re.findall(r"(?:^\|.*\|\n)+", text, re.M)
    for table in tables:
        rows = [re.split(r"(?<!\\)\|", row)[1:-1] for row in table.splitlines()]
        assert all(set(cell.strip()) <= {"-"} for cell in rows[1]), table
        assert {len(row) for row in rows} == {len(rows[0])}, table
        assert text[: text.index(table)].endswith("\n\n"), table  # a table starts a block


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("/home/bob/venv/lib", "~/venv/lib"),
        ("origin /Users/bob.jones/x and /home/carol", "origin ~/x and ~"),
        ("C:\\Users\\Bob\\AppData and C:\\\\Users\\\\Bob\\\\x", "~\\AppData and ~\\\\x"),
        ("/srv/home/bob and /data/root/x", "/srv/home/bob and /data/root/x"),
        ("/root/.cache:/root", "~/.cache:~"),
        ("token ghp_" + "a" * 36 + ".", "token [redacted]."),
        ("key=sk-" + "A1" * 12, "key=[redacted]"),
        ("https://u:p@host/x", "https://[redacted]@host/x"),
        ("the mask-" + "a" * 30 + " stays", "the mask-" + "a" * 30 + " stays"),
    ],
)
def test_scrub(text: str, scrubbed: str):
    assert scrub(text, home_dirs({"HOME": "/root"})) == scrubbed


def test_docs_state_the_rules_the_code_applies():
    docs = (REPO / "docs" / "output.md").read_text()
    section = docs.split("## Issue report (`attn-doctor report`)", 1)[1].split("\n## ", 1)[0]
    for word in (*RELEVANT_PREFIXES, *RELEVANT_NAMES, *SECRET_NAME_WORDS):
        assert f"`{word}`" in section, word
