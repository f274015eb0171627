"""Parsed rule files are reused by content, never by name alone: an edited rule is read again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import cli, write_rule

from attn_doctor.engine import patterns


def test_an_edited_rule_file_is_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ATTN_DOCTOR_CACHE", str(tmp_path / "cache"))
    rules = tmp_path / "rules"
    write_rule(rules, "demo", 'packages = { transformers = "<4.45" }')

    def verdict() -> str:
        result = cli(
            "check", "--format", "json", "--no-scan", "--rules", rules, "--pin", "transformers==4.44.0"
        )
        return next(f["verdict"] for f in json.loads(result.stdout)["findings"] if f["id"] == "demo")

    assert verdict() == "affected"
    assert (tmp_path / "cache" / "rules.json").is_file()
    assert verdict() == "affected"  # from the cache
    write_rule(rules, "demo", 'packages = { transformers = "<4.44" }')  # same path, new content
    assert verdict() == "not-affected"


def test_a_corrupt_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "rules.json").write_text("{" * 5000)
    monkeypatch.setenv("ATTN_DOCTOR_CACHE", str(cache))
    assert cli("rules", "validate").exit_code == 0


def explain_with_rule(tmp_path: Path, cache: Path) -> str:
    """explain in a fresh process (shapes are remembered per process too), with one user rule."""
    rules = tmp_path / "rules"
    write_rule(rules, "demo", symptoms="['widget (\\d+) exploded']")
    log = tmp_path / "error.log"
    log.write_text("RuntimeError: widget 42 exploded\n")
    done = subprocess.run(
        [sys.executable, "-m", "attn_doctor", "explain", str(log), "--rules", str(rules), "--no-scan"],
        capture_output=True,
        text=True,
        env={**os.environ, "ATTN_DOCTOR_CACHE": str(cache)},
        check=False,
    )
    return done.stdout


def test_symptom_shapes_are_remembered_for_the_analyser_that_found_them(tmp_path: Path):
    cache = tmp_path / "cache"
    assert "demo" in explain_with_rule(tmp_path, cache)
    saved = json.loads((cache / "rules.json").read_text())["symptom shapes"]
    assert saved["analyser"] == patterns.ANALYSER
    assert saved["shapes"]["widget (\\d+) exploded"] == [" exploded", ["widget ", " exploded"], False]
    # a shape another analyser wrote (here: a literal no line holds) is not used
    saved["analyser"], saved["shapes"]["widget (\\d+) exploded"] = "00000000", ["never in a log", [], False]
    (cache / "rules.json").write_text(json.dumps({"symptom shapes": saved}))
    assert "demo" in explain_with_rule(tmp_path, cache)
    # nor a malformed one
    (cache / "rules.json").write_text(
        json.dumps(
            {
                "symptom shapes": {
                    "analyser": patterns.ANALYSER,
                    "shapes": {"widget (\\d+) exploded": ["x", "y"]},
                }
            }
        )
    )
    assert "demo" in explain_with_rule(tmp_path, cache)
