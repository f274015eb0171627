"""Issue 26: every rule's claims checked by machine against the releases (tools/rule_claims.py),
over the whole database, and each check shown to catch the mistake it is for."""

from __future__ import annotations

from pathlib import Path

from attn_doctor.engine.loader import load_rules
from attn_doctor.releases.facts import snapshot
from attn_doctor.releases.messages import catalogue
from tests.support import write_rule
from tools.rule_claims import (
    SILENT_BEFORE_ITS_MESSAGE,
    pins_that_do_not_fix,
    ranges_outside_their_messages,
    references_to_unknown_releases,
    rocm_rules_without_a_rocm_condition,
)


def test_every_rule_range_lies_within_the_releases_that_print_its_messages():
    assert ranges_outside_their_messages(load_rules().rules, catalogue()) == []


def test_each_rule_excused_from_the_range_check_still_needs_it():
    """The excuses cannot rot: each names a rule that exists and that the check would flag."""
    rules = {rule.id: rule for rule in load_rules().rules}
    for rule_id in SILENT_BEFORE_ITS_MESSAGE:
        assert ranges_outside_their_messages([rules[rule_id]], catalogue(), silent={}) != []


def test_every_fix_pin_is_a_published_release_outside_the_rules_range():
    assert pins_that_do_not_fix(load_rules().rules, snapshot()) == []


def test_every_rule_about_rocm_alone_has_a_rocm_condition():
    assert rocm_rules_without_a_rocm_condition(load_rules().rules) == []


def test_every_versioned_reference_cites_a_release_or_a_commit():
    assert references_to_unknown_releases(load_rules().rules, snapshot()) == []


def test_a_reference_to_a_branch_or_an_unreleased_tag_is_caught(tmp_path: Path):
    base = "https://github.com/huggingface/transformers"
    rules = user_rules(
        tmp_path,
        ("on-main", "", {"references": f'["{base}/blob/main/src/transformers/modeling_utils.py"]'}),
        ("no-such-tag", "", {"references": f'["{base}/blob/v4.44.9/src/transformers/modeling_utils.py"]'}),
        ("real-tag", "", {"references": f'["{base}/blob/v4.44.1/src/transformers/modeling_utils.py"]'}),
        ("a-commit", "", {"references": f'["{base}/blob/0123456789abcdef0123456789abcdef01234567/x.py"]'}),
    )
    found = references_to_unknown_releases(rules, snapshot())
    assert [line.split(":")[0] for line in found] == ["no-such-tag", "on-main"]


def user_rules(tmp_path: Path, *specs: tuple[str, str, dict[str, str]]) -> list:
    for rule_id, affects, fields in specs:
        write_rule(tmp_path, rule_id, affects, **fields)
    return load_rules([tmp_path]).rules


def test_the_checks_catch_what_they_are_for(tmp_path: Path):
    rules = user_rules(
        tmp_path,
        # 4.x's wording claimed for every release: 5.4 on print "doesn't seem to be installed"
        (
            "old-wording-everywhere",
            'packages = { transformers = ">=4.36.0" }',
            {"symptoms": "['the package flash_attn seems to be not installed']"},
        ),
        ("pin-nobody-published", 'packages = { transformers = "<4.45" }', {}),
        ("pin-still-affected", 'packages = { transformers = ">=4.44,<4.50" }', {}),
        ("rocm-for-everyone", "", {"title": '"ROCm torch: SDPA has no fused kernels on AMD GPUs"'}),
    )
    ranges = ranges_outside_their_messages(rules, catalogue())
    assert len(ranges) == 1 and ranges[0].startswith("old-wording-everywhere: transformers >=4.36.0 holds")
    assert "5.4.0" in ranges[0]
    (tmp_path / "pin-nobody-published.toml").write_text(
        (tmp_path / "pin-nobody-published.toml")
        .read_text()
        .replace("pins = []", 'pins = ["transformers>=99.0"]')
    )
    (tmp_path / "pin-still-affected.toml").write_text(
        (tmp_path / "pin-still-affected.toml")
        .read_text()
        .replace("pins = []", 'pins = ["transformers>=4.45"]')
    )
    pins = pins_that_do_not_fix(load_rules([tmp_path]).rules, snapshot())
    assert [line.split(":")[0] for line in pins] == ["pin-nobody-published", "pin-still-affected"]
    assert "met by 4.45.0, which the rule's own range" in pins[1]
    assert [line.split(":")[0] for line in rocm_rules_without_a_rocm_condition(rules)] == [
        "rocm-for-everyone"
    ]
