"""A count and its noun in real outputs: 1 rule, 2 rules (words.counted, used by every report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REPO, cli, write_rule


@pytest.mark.parametrize(
    ("good", "bad", "line"), [(1, 1, "1 problem; 1 valid rule"), (2, 2, "2 problems; 2 valid rules")]
)
def test_rules_validate(tmp_path: Path, good: int, bad: int, line: str) -> None:
    rules = tmp_path / "rules"
    for index in range(good):
        write_rule(rules, f"good-{index}")
    assert cli("rules", "validate", rules).stdout == f"ok: {good} rule{'s' * (good > 1)} valid\n"
    for index in range(bad):
        write_rule(rules, f"bad-{index}", severity='"loud"')
    assert cli("rules", "validate", rules).stdout == f"{line}\n"


@pytest.mark.parametrize(("drift", "counted"), [(1, "1 drifting fact;"), (2, "2 drifting facts;")])
def test_merge_counts_drifting_facts(tmp_path: Path, drift: int, counted: str) -> None:
    """Two nodes of the healthy H100 fixture: the second with another driver, and another
    transformers too."""
    node = json.loads((REPO / "tests/fixtures/healthy/h100-current.json").read_text())
    (tmp_path / "node1.json").write_text(json.dumps(node))
    node["gpus"][0]["driver"] = "575.57.08"
    if drift == 2:
        node["packages"]["transformers"]["version"] = "4.44.0"
    (tmp_path / "node2.json").write_text(json.dumps(node))
    summary = cli("merge", tmp_path / "node1.json", tmp_path / "node2.json").stdout.splitlines()[-1]
    assert f"; {counted} 0 missing;" in summary
    assert " rules affected or unknown somewhere;" in summary  # several here


@pytest.mark.parametrize(
    ("args", "counted"),
    [
        (("varlen-cu-seqlens", "--case", "fixed"), "1 case: "),
        (("rotary-dim",), "3 cases: "),  # two kernel cases and the rule's live probe
    ],
)
def test_repro_counts_cases(args: tuple[str, ...], counted: str) -> None:
    result = cli("repro", *args, "--device", "cpu")
    assert result.stdout.splitlines()[-1].startswith(counted), result.stdout
