"""The transformers flex_attention probes: how attempts become a verdict, then the real releases.

The release tests run each probe as the doctor does (a child process, the result line read by the
runner) in cached venvs with torch 2.13.0 CPU: the BlockMask bug lives in 4.47-4.51.x (on 4.47.0
GPT-NeoX, its only flex_attention model, raises it: run by hand, no venv is kept for that release),
the padding bug in 4.51.0 only. The BlockMask probe has nothing to drive before 4.47.0, the padding
probe before make_flex_block_causal_mask (4.48.0).
"""

from __future__ import annotations

import pytest

from attn_doctor.probes.catalogue import PROBES, Probe
from attn_doctor.probes.observation import Observation, ProbeVerdict
from attn_doctor.probes.transformers_flex_blockmask import Attempt, Outcome, attempt, observe
from tests.release_venvs import probe_in, release_venv

BLOCKMASK = next(probe for probe in PROBES if probe.id == "transformers-flex-blockmask")
PADDING = next(probe for probe in PROBES if probe.id == "transformers-flex-padding")
AFFECTED, NOT_AFFECTED, SKIPPED = ProbeVerdict.AFFECTED, ProbeVerdict.NOT_AFFECTED, ProbeVerdict.SKIPPED
NO_DIM = "AttributeError: 'BlockMask' object has no attribute 'dim'"
PAD_NONE = "TypeError: pad(): argument 'pad' failed to unpack the object at pos 2"
NO_FLEX = "transformers 4.44.0 has no flex_attention (added in 4.47.0)"
NO_FLEX_MASK = "transformers 4.44.0 has no make_flex_block_causal_mask (added in 4.48.0)"
BUILT = "make_flex_block_causal_mask(mask_2d, query_length=16, key_length=None): returned a BlockMask"
GENERATE = "one-layer Llama generate() with a DynamicCache"


def raises(exc: Exception) -> str:
    raise exc


def test_attempt_sorts_symptom_other_failures_and_completion() -> None:
    def is_symptom(exc: Exception) -> bool:
        return isinstance(exc, TypeError)

    symptom = attempt("a", lambda: raises(TypeError("pad() got NoneType.\nmore")), is_symptom)
    other = attempt("b", lambda: raises(ValueError("too long. Crop it.")), is_symptom)
    clean = attempt("c", lambda: "fine", is_symptom)
    assert symptom == Attempt("a", Outcome.SYMPTOM, "TypeError: pad() got NoneType.")
    assert other == Attempt("b", Outcome.OTHER, "failed otherwise, ValueError: too long")
    assert clean == Attempt("c", Outcome.CLEAN, "fine")


def test_one_symptom_is_enough_for_affected() -> None:
    attempts = [Attempt("Llama", Outcome.CLEAN, "accepted"), Attempt("Qwen2", Outcome.SYMPTOM, NO_DIM)]
    assert observe("r", "ctx", attempts) == Observation(
        "r", AFFECTED, f"ctx: Llama: accepted; Qwen2: {NO_DIM}"
    )


def test_other_failures_do_not_hide_a_clean_answer() -> None:
    attempts = [Attempt("Llama", Outcome.CLEAN, "accepted"), Attempt("Gemma2", Outcome.OTHER, "failed")]
    assert observe("r", "ctx", attempts).verdict is NOT_AFFECTED


def test_no_clean_answer_is_a_probe_error() -> None:
    attempts = [Attempt("Gemma2", Outcome.OTHER, "failed"), Attempt("Gemma3", Outcome.NOT_RUN, "absent")]
    with pytest.raises(RuntimeError, match="no clean answer: ctx: Gemma2: failed; Gemma3: absent"):
        observe("r", "ctx", attempts)


@pytest.mark.releases
@pytest.mark.parametrize(
    ("release", "probe", "verdict", "evidence"),
    [
        ("4.44.0", BLOCKMASK, SKIPPED, [NO_FLEX]),
        (
            "4.51.0",
            BLOCKMASK,
            AFFECTED,
            ["Llama: accepted, finite outputs", f"Qwen2: {NO_DIM}", f"Gemma3: {NO_DIM}"],
        ),
        (
            "4.51.1",
            BLOCKMASK,
            AFFECTED,
            ["Llama: accepted, finite outputs", f"Mistral: {NO_DIM}", f"Gemma2: {NO_DIM}"],
        ),
        # Qwen2 and Mistral fixed; Gemma2/3 now pass the mask on, and their sliding layers ask it for .dtype.
        (
            "4.52.1",
            BLOCKMASK,
            NOT_AFFECTED,
            [
                "Qwen2: accepted",
                "Gemma2: failed otherwise, AttributeError: 'BlockMask' object has no attribute 'dtype'",
            ],
        ),
        ("5.23.0", BLOCKMASK, NOT_AFFECTED, ["Qwen2: accepted", "Gemma2: accepted", "Gemma3: accepted"]),
        ("4.44.0", PADDING, SKIPPED, [NO_FLEX_MASK]),
        ("4.51.0", PADDING, AFFECTED, [f"key_length=None): {PAD_NONE}", f"{GENERATE}: {PAD_NONE}"]),
        # On 4.51.1-4.52.x the first decoding step fails for another reason: Llama builds a 17x17
        # BlockMask for one query, and torch 2.13 rejects a mask larger than its inputs.
        (
            "4.51.1",
            PADDING,
            NOT_AFFECTED,
            [BUILT, f"{GENERATE}: failed otherwise, ValueError: block_mask was"],
        ),
        (
            "4.52.1",
            PADDING,
            NOT_AFFECTED,
            [BUILT, f"{GENERATE}: failed otherwise, ValueError: block_mask was"],
        ),
        ("5.23.0", PADDING, NOT_AFFECTED, [BUILT, f"{GENERATE}: completed, 2 new tokens"]),
    ],
    ids=lambda value: value.id if isinstance(value, Probe) else None,
)
def test_probe_on_release(release: str, probe: Probe, verdict: ProbeVerdict, evidence: list[str]) -> None:
    with release_venv(f"transformers=={release}") as venv:
        outcome = probe_in(venv, probe)
    [observation] = outcome.observations.values()
    assert observation.verdict is verdict, observation
    for part in evidence:
        assert part in observation.evidence, observation
