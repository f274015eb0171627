"""Parsed rule files are reused by content, never by name alone: an edited rule is read again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cli, write_rule


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
