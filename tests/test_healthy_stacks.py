"""A healthy stack is all green: known-good stacks give no affected finding at any severity.

The stacks are env files in tests/fixtures/healthy/ (their README says where each version pairing
comes from): a bare CPU machine, the lent H100, the newest torch with the triton it pins and the
newest transformers on an A100 and an H100, and the newest flash-attn with the newest torch it
ships wheels for. A warning nobody can act on teaches users to ignore the tool.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import REPO, cli

HEALTHY = sorted((REPO / "tests" / "fixtures" / "healthy").glob("*.json"))
# what a typical FA2 fine-tuning and generation project uses; a 4-D mask is not typical (and has
# no fixed release: transformers-fa2-4d-attention-mask)
TYPICAL_FA2_PROJECT = (
    "flash_attention_2",
    "varlen",
    "packed_sequences",
    "sliding_window",
    "softcap",
    "torch_compile",
    "backward",
    "generate",
    "sdpa",
)


def affected(*args: str | Path) -> list[str]:
    result = cli("check", "--format", "json", "--fail-on", "info", "--no-scan", *args)
    report = json.loads(result.stdout)
    found = [f["id"] for f in report["findings"] if f["verdict"] == "affected"]
    assert result.exit_code == 0, (found, result.stderr)
    return found


def test_every_stack_of_the_issue_is_a_fixture():
    assert {path.stem for path in HEALTHY} == {
        "a100-current",
        "bare-cpu-torch",
        "bare-cpu-torch-triton",
        "flash-attn-current",
        "h100-current",
        "h100-device",
    }


@pytest.mark.parametrize("stack", HEALTHY, ids=lambda path: path.stem)
def test_known_good_stack_has_no_affected_finding(stack: Path):
    assert affected("--env-file", stack) == []


def test_newest_flash_attn_stack_is_clean_for_a_typical_project():
    features = [arg for feature in TYPICAL_FA2_PROJECT for arg in ("--feature", feature)]
    assert affected("--env-file", REPO / "tests/fixtures/healthy/flash-attn-current.json", *features) == []


def test_this_machine_is_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The README's first run: this CI machine (torch 2.13.0 CPU, triton, no GPU), from an empty folder."""
    monkeypatch.chdir(tmp_path)
    result = cli("check", "--fail-on", "info")
    assert result.exit_code == 0, result.stdout
    # nothing affected, and nothing unknown but what a feature's use alone would decide
    assert re.search(
        r" 0 affected, (0 unknown|(\d+) unknown \(\2 only if you use a feature\)),", result.stdout
    )
    assert "[!]" not in result.stdout


def test_a_rule_without_a_fixed_release_needs_a_feature():
    """A rule that no version change clears (every package range open-ended, no hardware or
    toolkit condition) would fire on every healthy install of that package: it must need a
    feature, so that only code that takes the path (detected or declared) is affected."""
    from attn_doctor.engine.loader import load_rules

    for rule in load_rules().rules:
        if rule.kind != "bug":  # named from a log only, never a check finding
            continue
        affects = rule.affects
        open_ended = all(
            not any(spec.operator in ("<", "<=", "==", "===", "~=") for spec in specifier)
            for specifier in affects.packages.values()
        )
        decided_by_releases = bool(affects.release_packages)  # the snapshot names the fixed versions
        if open_ended and not affects.versions and not affects.platform and not decided_by_releases:
            assert affects.features, rule.id
