"""Tests for the mutants of attn_doctor/engine/schema.py that survived mutmut
(benchmarks/mutation_score.py --part engine; docs/mutation-testing.md): a rule file's problem
names the field that is wrong. The real rule file, read as the loader reads it, with one field
broken."""

from __future__ import annotations

import pytest
from support import REPO

from attn_doctor._compat import tomllib
from attn_doctor.engine.schema import parse_rule

RULE = REPO / "rules" / "cuda-driver-too-old-for-torch.toml"


def problems_with(change: dict) -> list[str]:
    data = tomllib.loads(RULE.read_text())
    for key, value in change.items():
        section, _, field = key.rpartition(".")
        (data[section] if section else data)[field] = value
    parsed = parse_rule(data, RULE.stem, str(RULE))
    assert isinstance(parsed, list), "the broken rule was accepted"
    return parsed


def test_the_rule_as_it_is_parses():
    """The premise: the unbroken file is a rule, so each problem below is the broken field's."""
    assert not isinstance(parse_rule(tomllib.loads(RULE.read_text()), RULE.stem, str(RULE)), list)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # x__fix_plan__mutmut_10: the field was None ("field 'None': ...")
        ({"fix.plan": "apt"}, "field 'fix.plan': 'apt' is not one of "),
        # x__symptoms__mutmut_10 ("SYMPTOMS"), x__string_list__mutmut_5 (the field was None)
        ({"symptoms": "CUDA error"}, "field 'symptoms': must be a list of strings"),
        ({"symptoms": ["CUDA error", 3]}, "field 'symptoms': must be a list of strings"),
    ],
)
def test_a_broken_field_is_named_in_its_problem(change: dict, expected: str):
    assert any(expected in line for line in problems_with(change)), problems_with(change)
