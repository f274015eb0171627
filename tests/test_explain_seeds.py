"""The traceback decides (issue 38): each seed log in tests/logs, and each failure produced on an
H100 or H200 with today's releases (tests/cases/*/produced-*.toml, batches h100-current-2026-11 and
h200-fresh-2026-11-26), puts its own rule first. Seed B is the regression the issue names: a generic
"CUDA error: an illegal memory access was encountered" made flash-attn's int32 overflow "a message
specific to it" and first, though the frames run through fla/modules/rotary.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support import REPO, cli

from attn_doctor._compat import tomllib
from attn_doctor.explain.rank import is_generic

sys.path.insert(0, str(REPO / "benchmarks"))
from explain_accuracy import CASES, ranked  # noqa: E402

SEEDS = {
    "a": "gemma2-fa2-generate-4d-mask",  # the log is Gemma-2's generate() through the FA2 varlen path
    "b": "fla-rotary-dim-exceeds-head-dim",
    "c": "fa3-hopper-pipelineparams-build",
    "d": "transformers-flex-blockmask-no-dim",
    "e": "transformers-flex-pad-none-key-length",
}
PRODUCED = sorted(CASES.glob("*/produced-*.toml"))


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_each_seed_log_puts_its_rule_first(seed: str) -> None:
    log = REPO / "tests" / "logs" / f"seed_{seed}.log"
    result = cli("explain", str(log), "--no-scan", "--format", "json")
    assert result.exit_code == 0, result.stderr
    causes = [cause["id"] for cause in json.loads(result.stdout)["causes"]]
    assert causes[:1] == [SEEDS[seed]], causes


def test_seed_b_generic_crash_rules_are_not_about_the_frames_package() -> None:
    """flash-attn and transformers are named nowhere in seed B: their rules, matched only by the
    generic crash line, are matched elsewhere, not causes."""
    result = cli("explain", str(REPO / "tests" / "logs" / "seed_b.log"), "--no-scan", "--format", "json")
    document = json.loads(result.stdout)
    assert "flash-attn-int32-index-overflow" not in [cause["id"] for cause in document["causes"]]


@pytest.mark.parametrize("path", PRODUCED, ids=[path.stem for path in PRODUCED])
def test_each_produced_failure_puts_its_rule_first(path: Path) -> None:
    case = tomllib.loads(path.read_text(encoding="utf-8"))
    causes = ranked(case)
    assert not isinstance(causes, str), causes
    if case["expected"] in ("usage", "none"):
        affected = [kind for _, verdict, kind in causes if verdict.value == "affected"]
        assert not affected or affected[0] == "usage", causes
    else:
        assert [rule_id for rule_id, _, _ in causes[:1]] == [case["expected"]], causes


@pytest.mark.parametrize(
    ("text", "generic"),
    [
        ("CUDA error: an illegal memory access was encountered", True),
        ("CUDA error: an illegal memory access", True),
        ("RuntimeError: CUDA error: device-side assert triggered", True),
        ("CUDA error: misaligned address", False),
        ("Rotary dimension must not exceed head dimension", False),
    ],
)
def test_generic_messages_put_together_stay_generic(text: str, generic: bool) -> None:
    assert is_generic(text) is generic
