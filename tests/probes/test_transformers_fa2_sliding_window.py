"""The FA2 sliding-window probe: its windowed stand-ins and verdicts here, the real releases in cached venvs.

Release tests run the probe as the doctor does (a child process read by the runner). Gemma-2: 4.44.0
cuts the keys to the window in a forward without cache, 4.44.1 to 4.46.x in generate's prefill; 4.47.x
cannot run Gemma-2 with FA2 (no '_flash_attn_uses_top_left_mask'), 4.48.0/4.48.1 cannot generate past the
window with any attention (the cache's IndexError); 4.48.2 is right. Mistral: a left-padded generate
past the window is wrong up to 4.45.2 and right from 4.46.1. Until 4.56 FA2 is asked for
window_size=(W, W), W + 1 keys, so eager at W + 1 is the reference there; the difference from eager at
W (the off-by-one rule) is in the evidence too.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from attn_doctor.probes.catalogue import PROBES
from attn_doctor.probes.observation import ProbeVerdict
from attn_doctor.probes.transformers_fa2_sliding_window import (
    CACHE_INDEX_RULE,
    GEMMA2_FORWARD,
    GEMMA2_GENERATE,
    GEMMA2_RULES,
    MISTRAL_SLICE_RULE,
    PREFILL_SLICE_RULE,
    SLICE_4_44_0_RULE,
    TOLERANCE,
    TOP_LEFT_MASK_RULE,
    Outcome,
    WindowedStandIns,
    _cache_index,
    _collapsed,
    _compared,
    _top_left_mask,
    _verdict,
)
from attn_doctor.probes.transformers_fa2_unpad import StandInMisuse, StandIns
from tests.release_venvs import probe_in, release_venv

PROBE = next(probe for probe in PROBES if probe.id == "transformers-fa2-sliding-window")
AFFECTED, NOT_AFFECTED, ERROR = ProbeVerdict.AFFECTED, ProbeVerdict.NOT_AFFECTED, ProbeVerdict.ERROR
SKIPPED = ProbeVerdict.SKIPPED
ERRORS = re.compile(r"logits max \|FA2 - eager\| = (\S+) \((?:[^;]*, (\S+) at 4;)?")
WRONG = 0.05  # every wrong case here is off by 0.08 or more; right ones by about 1e-7


def qkv(tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(tokens, 4, 16, generator=generator)
    k, v = (torch.randn(tokens, 2, 16, generator=generator) for _ in range(2))
    return q, k, v


def sliding_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Eager's sliding window: each query sees itself and the window - 1 keys before it."""
    distance = torch.arange(q.shape[0])[None, :] - torch.arange(q.shape[0])[:, None]
    allowed = (distance <= 0) & (distance > -window)
    return torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=allowed, enable_gqa=True
    ).transpose(0, 1)


def test_only_the_windowed_stand_ins_take_window_size() -> None:
    """transformers passes window_size where flash_attn_func's signature has it; the unpad probe's don't."""
    windowed, plain = WindowedStandIns(), StandIns()
    for function in ("flash_attn_func", "flash_attn_varlen_func"):
        assert "window_size" in inspect.signature(getattr(windowed, function)).parameters
        assert "window_size" not in inspect.signature(getattr(plain, function)).parameters


def test_varlen_stand_in_windows_each_sequence_as_flash_attn() -> None:
    """(3, 3) is eager's window of 4 keys; (4, 4), what transformers < 4.56 passes for 4, is eager's 5."""
    q, k, v = qkv(16)
    cu = torch.tensor([0, 10, 16], dtype=torch.int32)
    stand_ins = WindowedStandIns()
    for window_size, window in (((3, 3), 4), ((4, 4), 5)):
        output = stand_ins.flash_attn_varlen_func(
            q, k, v, cu, cu, 10, 10, causal=True, window_size=window_size
        )
        for a, b in ((0, 10), (10, 16)):
            assert torch.allclose(output[a:b], sliding_sdpa(q[a:b], k[a:b], v[a:b], window), atol=1e-5)
    assert stand_ins.windows == [(3, 3), (4, 4)]
    assert stand_ins.calls == ["flash_attn_varlen_func cu_seqlens_k [0, 10, 16]"] * 2


def test_windowed_stand_in_refuses_what_the_models_do_not_use() -> None:
    q, k, v = (x[None] for x in qkv(8))
    with pytest.raises(StandInMisuse, match="softcap=50.0"):
        WindowedStandIns().flash_attn_func(q, k, v, causal=True, softcap=50.0)


def test_compared_steps_stop_where_a_row_diverges() -> None:
    """A step's logits are compared only while the tokens fed to it are the same in both runs."""
    tokens = torch.tensor([[5, 6, 7], [5, 6, 7]])
    reference = torch.tensor([[5, 6, 7], [5, 9, 7]])  # row 2 differs at step 2: step 3 had other input
    assert _compared(tokens, reference, 3).T.tolist() == [[True, True, True], [True, True, False]]
    assert _compared(torch.zeros(2, 0), torch.zeros(2, 0), 1).tolist() == [[True, True]]  # a forward


def test_calls_collapse_repeats_and_name_each_function_once_per_run() -> None:
    calls = ("flash_attn_varlen_func cu_seqlens_k [0, 6, 10]",) + (
        "flash_attn_varlen_func cu_seqlens_k [0, 4, 8]",
    ) * 2
    assert _collapsed(calls) == "flash_attn_varlen_func cu_seqlens_k [0, 6, 10]; cu_seqlens_k [0, 4, 8] x2"
    assert _collapsed(()) == "no flash_attn call"


def test_verdicts_from_logits_and_from_what_raised() -> None:
    exact = Outcome(GEMMA2_FORWARD, ("flash_attn_varlen_func cu_seqlens_k [0, 10, 20]",), 1e-7, 0.3, (4, 4))
    wrong = Outcome(GEMMA2_GENERATE, error=0.6, error_at_window=0.6)
    index_error = "IndexError: index 4 is out of bounds for dimension 0 with size 4"
    crashed = Outcome(GEMMA2_GENERATE, failure=f"FA2 raised {index_error}", eager_failure=index_error)
    attribute = "FA2 raised AttributeError: 'Gemma2Attention' object has no attribute "
    attribute += "'_flash_attn_uses_top_left_mask'"
    no_attribute = Outcome(GEMMA2_FORWARD, failure=attribute)
    assert _verdict(PREFILL_SLICE_RULE, wrong).verdict is AFFECTED
    assert (
        "= 6.0e-01 (eager at window 4, FA2 given no window_size"
        in _verdict(PREFILL_SLICE_RULE, wrong).evidence
    )
    assert _verdict(PREFILL_SLICE_RULE, crashed).verdict is SKIPPED  # a crash hides the slicing
    assert crashed.evidence().endswith("with size 4; eager raises it too")
    clean = _verdict(SLICE_4_44_0_RULE, exact)
    assert clean.verdict is NOT_AFFECTED
    assert (
        f"window 5 as FA2's window_size=(4, 4) reads it, 3.0e-01 at 4; tolerance {TOLERANCE:g}"
        in clean.evidence
    )
    assert _top_left_mask(no_attribute).verdict is AFFECTED
    assert no_attribute.evidence().endswith("'_flash_attn_uses_top_left_mask'; eager runs")
    assert _top_left_mask(exact).verdict is NOT_AFFECTED
    assert _top_left_mask(Outcome(GEMMA2_FORWARD, failure="FA2 raised KeyError: 'x'")).verdict is ERROR
    assert _cache_index(crashed).verdict is AFFECTED  # eager too: the cache, not FA2
    assert _cache_index(Outcome(GEMMA2_GENERATE, failure=f"FA2 raised {index_error}")).verdict is NOT_AFFECTED
    assert _cache_index(wrong).verdict is NOT_AFFECTED


def errors(evidence: str) -> tuple[float, float | None]:
    """max |FA2 - eager| against the reference eager, and against eager at window 4 where that differs."""
    found = ERRORS.search(evidence)
    assert found, evidence
    return float(found.group(1)), None if found.group(2) is None else float(found.group(2))


# Gemma-2 4.44.0 cuts the keys to the window in a forward without cache (cu_seqlens_k [0, 4, 8] for rows
# of 10), 4.44.1 to 4.46.x in generate's prefill; Mistral up to 4.45 unpads the decoding step's keys with
# the mask cut to the window ([0, 4, 8] or [0, 3, 6], not [0, 7, 12]).
KEYS_CUT = "FA2 given no window_size; tolerance 0.0001); flash_attn_varlen_func cu_seqlens_k [0, 4, 8]"
FORWARD_CUT = "Gemma2 forward without cache (FA2, 2x10 tokens, window 4): logits max"
PREFILL_CUT = "Gemma2 generate (FA2, 2x10 prompt, no padding, window 4, 1 new token): logits max"
KEYS_WHOLE = "tolerance 0.0001); flash_attn_varlen_func cu_seqlens_k [0, 10, 20]"
MISTRAL_CUT = "flash_attn_varlen_func cu_seqlens_k [0, 6, 10]; cu_seqlens_k [0, 4, 8] x2"
MISTRAL_WHOLE = "flash_attn_varlen_func cu_seqlens_k [0, 6, 10]; cu_seqlens_k [0, 7, 12];"
NO_TOP_LEFT_MASK = (
    "FA2 raised AttributeError: 'Gemma2Attention' object has no attribute '_flash_attn_uses_top_left_mask'; "
    "eager runs"
)
CACHE_INDEX_ERROR = (
    "FA2 raised IndexError: index 4 is out of bounds for dimension 0 with size 4; eager raises it too"
)
FOUR_D_MASK = "index_first_axis: 109 of 110 indices fall outside [0, 2)"  # 4.44.0 generate: 4-D mask
NO_GEMMA2 = "no gemma2 model in this release"
Expected = dict[str, tuple[ProbeVerdict, str]]


def gemma2(
    slice_4_44_0: tuple[ProbeVerdict, str], prefill: tuple[ProbeVerdict, str], **others: ProbeVerdict
) -> Expected:
    """The Gemma-2 rules' verdicts and evidence: the forward's for the 4.44.0 slice and the attribute, the
    generate's for the prefill and the cache index; the two crash rules not affected unless named."""
    return {
        SLICE_4_44_0_RULE: slice_4_44_0,
        PREFILL_SLICE_RULE: prefill,
        TOP_LEFT_MASK_RULE: (others.get("top_left_mask", NOT_AFFECTED), slice_4_44_0[1]),
        CACHE_INDEX_RULE: (others.get("cache_index", NOT_AFFECTED), prefill[1]),
    }


FIXED_FORWARD = (NOT_AFFECTED, "Gemma2 forward without cache (FA2, 2x10 tokens, window 4): logits max")


@pytest.mark.releases
@pytest.mark.parametrize(
    ("release", "expected"),
    [
        (
            "4.40.0",
            {
                **{rule: (NOT_AFFECTED, NO_GEMMA2) for rule in GEMMA2_RULES},
                MISTRAL_SLICE_RULE: (AFFECTED, "cu_seqlens_k [0, 3, 6]"),
            },
        ),
        (
            "4.44.0",
            {
                **gemma2((AFFECTED, FORWARD_CUT), (SKIPPED, FOUR_D_MASK)),
                MISTRAL_SLICE_RULE: (AFFECTED, MISTRAL_CUT),
            },
        ),
        (
            "4.44.1",
            {**gemma2(FIXED_FORWARD, (AFFECTED, PREFILL_CUT)), MISTRAL_SLICE_RULE: (AFFECTED, MISTRAL_CUT)},
        ),
        (
            "4.45.2",
            {**gemma2(FIXED_FORWARD, (AFFECTED, PREFILL_CUT)), MISTRAL_SLICE_RULE: (AFFECTED, MISTRAL_CUT)},
        ),
        (
            "4.46.1",
            {
                **gemma2(FIXED_FORWARD, (AFFECTED, PREFILL_CUT)),
                MISTRAL_SLICE_RULE: (NOT_AFFECTED, MISTRAL_WHOLE),
            },
        ),
        (
            "4.47.1",
            {
                **gemma2((SKIPPED, NO_TOP_LEFT_MASK), (SKIPPED, NO_TOP_LEFT_MASK), top_left_mask=AFFECTED),
                MISTRAL_SLICE_RULE: (NOT_AFFECTED, MISTRAL_WHOLE),
            },
        ),
        (
            "4.48.0",
            {
                **gemma2(FIXED_FORWARD, (SKIPPED, CACHE_INDEX_ERROR), cache_index=AFFECTED),
                MISTRAL_SLICE_RULE: (NOT_AFFECTED, MISTRAL_WHOLE),
            },
        ),
        (
            "4.48.1",
            {
                **gemma2(FIXED_FORWARD, (SKIPPED, CACHE_INDEX_ERROR), cache_index=AFFECTED),
                MISTRAL_SLICE_RULE: (NOT_AFFECTED, MISTRAL_WHOLE),
            },
        ),
        (
            "4.48.2",
            {
                **gemma2(FIXED_FORWARD, (NOT_AFFECTED, KEYS_WHOLE)),
                MISTRAL_SLICE_RULE: (NOT_AFFECTED, MISTRAL_WHOLE),
            },
        ),
        # 4.54 unpads generate's prefill with cu_seqlens_k one short: another rule's bug, hiding this one
        (
            "4.54.1",
            {
                **gemma2(
                    FIXED_FORWARD,
                    (SKIPPED, "cu_seqlens_k=[0, 10, 19] ends at 19, not at the 20 packed tokens"),
                ),
                MISTRAL_SLICE_RULE: (NOT_AFFECTED, MISTRAL_WHOLE),
            },
        ),
        # window_size=(W - 1, W - 1) from 4.56: eager at W is the reference itself
        (
            "5.23.0",
            {
                **gemma2((NOT_AFFECTED, "(3, 3) spans"), (NOT_AFFECTED, "(3, 3) spans")),
                MISTRAL_SLICE_RULE: (NOT_AFFECTED, "(3, 3) spans"),
            },
        ),
    ],
)
def test_probe_on_release(release: str, expected: Expected) -> None:
    with release_venv(f"transformers=={release}") as venv:
        outcome = probe_in(venv, PROBE)
    observations = outcome.observations
    assert set(observations) == set(expected) == set(PROBE.rules)
    for rule, (verdict, evidence) in expected.items():
        observation = observations[rule]
        assert observation.verdict is verdict, observations
        assert evidence in observation.evidence, observation.evidence
        if rule in (TOP_LEFT_MASK_RULE, CACHE_INDEX_RULE) or "logits max" not in observation.evidence:
            continue  # the crash rules' evidence is another rule's case
        error, at_window = errors(observation.evidence)
        if verdict is AFFECTED:
            assert error > WRONG
        else:
            assert error <= TOLERANCE
            # eager at W + 1 where FA2 is asked for W + 1 keys: eager at W differs (the off-by-one)
            assert at_window is None or at_window > WRONG
    if observations[PREFILL_SLICE_RULE].verdict is AFFECTED:  # the keys handed over, cut to the window
        assert KEYS_CUT in observations[PREFILL_SLICE_RULE].evidence
