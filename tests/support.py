"""Helpers the test modules import: the CLI runner and rule files (fixtures live in conftest.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from typer.testing import CliRunner

from attn_doctor.cli import app

REPO = Path(__file__).resolve().parents[1]


def write_rule(folder: Path, rule_id: str, affects: str = "", **fields: str) -> Path:
    """A valid rule file; ``affects`` is the body of [affects], ``fields`` override top-level keys."""
    values = {
        "title": '"A test rule"',
        "severity": '"error"',
        "component": '"transformers"',
        "summary": '"Something breaks."',
        "references": '["https://github.com/huggingface/transformers/pull/1"]',
    }
    values.update(fields)
    top = "\n".join(f"{key} = {value}" for key, value in values.items())
    fix = '[fix]\nsummary = "Upgrade."\npins = []\n'
    text = f'id = "{rule_id}"\n{top}\n\n[affects]\n{textwrap.dedent(affects)}\n\n{fix}'
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rule_id}.toml"
    path.write_text(text)
    return path


def cli(*args: str | Path):
    """Run the real CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
