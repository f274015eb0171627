"""The transformers FA2 probe: its stand-ins here, and the real releases in cached venvs.

The release tests run the probe as the doctor does (a child process, the result line read by the
runner): 4.44.0 must show the cu_seqlens bug, the releases around it must not, and every release
still flattens a 4-D mask into gather indices past the batch. Gemma2's generate with FA2 hands that
path a 4-D mask in 4.44.0 (and again in 4.52.1), not in the releases around them; with a 2-D mask,
4.48.0 and 4.48.1 get the batch's second row wrong (the cache's keys unpadded with the prompt's mask),
4.48.2 gets it right, and 4.47.x cannot run Gemma2 with FA2 at all.
"""

from __future__ import annotations

import re

import pytest
import torch

from attn_doctor.probes.catalogue import PROBES
from attn_doctor.probes.observation import ProbeVerdict
from attn_doctor.probes.transformers_fa2_unpad import (
    CU_SEQLENS_RULE,
    GENERATE_RULE,
    HYBRID_PADDING_RULE,
    MASK_4D_RULE,
    POSITION_IDS_RULE,
    StandIns,
    Violation,
    reference_attention,
)
from tests.release_venvs import probe_in, release_venv

PROBE = next(probe for probe in PROBES if probe.id == "transformers-fa2-unpad")
AFFECTED, NOT_AFFECTED, ERROR = ProbeVerdict.AFFECTED, ProbeVerdict.NOT_AFFECTED, ProbeVerdict.ERROR
SKIPPED = ProbeVerdict.SKIPPED
# The 4-D mask's gather: flash_attn's index_first_axis up to 4.52, transformers' own from 4.53 on.
GATHER_PAST_BATCH = "index_first_axis: 54 of 57 indices fall outside [0, 16) (they span 0..127)"
OWN_GATHER_PAST_BATCH = "IndexError before any flash_attn call: index 16 is out of bounds"
# Gemma2 generate, prefill of 2x6 tokens (row 2 left-padded by 3) then one decoding step, both unpadded
# with the 2-D mask (right or wrong: the logits say which).
GENERATE_2D = (
    "flash_attn_varlen_func(cu_seqlens_q=[0, 6, 9]); flash_attn_varlen_func(cu_seqlens_q=[0, 1, 2]); "
    "logits max |FA2 - eager|"
)
NO_TOP_LEFT_MASK = (
    "AttributeError: 'Gemma2Attention' object has no attribute '_flash_attn_uses_top_left_mask'"
)
ROW_ERRORS = re.compile(r"= (\S+) on row 2 \(left-padded\), (\S+) on row 1")


def qkv(tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(tokens, 4, 16, generator=generator)
    k, v = (torch.randn(tokens, 2, 16, generator=generator) for _ in range(2))
    return q, k, v


def test_reference_attention_matches_sdpa_with_grouped_heads() -> None:
    q, k, v = qkv(8)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
    ).transpose(0, 1)
    assert torch.allclose(reference_attention(q, k, v, True, None).float(), expected, atol=1e-5)


def test_varlen_stand_in_attends_within_each_sequence() -> None:
    q, k, v = qkv(8)
    cu_seqlens = torch.tensor([0, 5, 8], dtype=torch.int32)
    stand_ins = StandIns()
    output = stand_ins.flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, 5, 5, causal=True)
    assert torch.allclose(output[5:], reference_attention(q[5:], k[5:], v[5:], True, None).float())
    assert stand_ins.calls == ["flash_attn_varlen_func(cu_seqlens_q=[0, 5, 8])"]


@pytest.mark.parametrize(
    ("cu_seqlens", "max_seqlen", "message"),
    [
        ([16], 11, "(max_seqlen_q=11): cu_seqlens_q has 1 entry"),
        ([0, 9, 5, 16], 9, "cu_seqlens_q decreases at entry 2 (9 -> 5)"),
        ([0, 8, 12], 8, "cu_seqlens_q=[0, 8, 12] ends at 12, not at the 16 packed tokens"),
        ([0, 8, 16], 11, "max_seqlen for cu_seqlens_q is 11 but the longest sequence is 8"),
    ],
)
def test_varlen_stand_in_rejects_metadata_flash_attn_would_misread(
    cu_seqlens: list[int], max_seqlen: int, message: str
) -> None:
    q, k, v = qkv(16)
    cu = torch.tensor(cu_seqlens, dtype=torch.int32)
    with pytest.raises(Violation, match=re.escape(message)):
        StandIns().flash_attn_varlen_func(q, k, v, cu, cu, max_seqlen, max_seqlen, causal=True)


def test_gather_stand_in_rejects_indices_past_the_batch() -> None:
    with pytest.raises(Violation, match=re.escape("fall outside [0, 16) (they span 0..127)")):
        StandIns().index_first_axis(torch.zeros(16, 2, 16), torch.arange(128))


def test_reference_attention_windows_as_flash_attn() -> None:
    """window (left, right), bottom-right aligned: causal (3, 3) spans 4 keys; 3 queries on 8 keys here."""
    q, k, v = qkv(8)
    q = q[5:]
    distance = torch.arange(8)[None, :] - torch.arange(3)[:, None] - 5  # key - query, bottom-right
    allowed = (distance <= 0) & (distance >= -3)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=allowed, enable_gqa=True
    ).transpose(0, 1)
    assert torch.allclose(reference_attention(q, k, v, True, None, (3, 3)).float(), expected, atol=1e-5)
    assert not torch.allclose(reference_attention(q, k, v, True, None, (4, 4)).float(), expected, atol=1e-3)


def test_reference_attention_gives_zeros_to_a_query_that_sees_no_key() -> None:
    q, k, v = qkv(4)
    output = reference_attention(q, k[:2], v[:2], True, None)  # bottom-right: queries 0 and 1 see nothing
    assert output[:2].abs().max().item() == 0.0
    assert torch.allclose(output[2:], reference_attention(q[2:], k[:2], v[:2], True, None))


def test_unpad_input_stand_in_gathers_from_the_flattened_batch() -> None:
    """As flash_attn's: indices into (b s) of the mask, taken from ``hidden`` flattened the same way."""
    hidden = torch.arange(2 * 6).view(2, 6, 1).float()
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]])
    tokens, indices, cu_seqlens, longest = StandIns().unpad_input(hidden, mask)
    assert tokens.flatten().tolist() == [0, 1, 2, 3, 4, 5, 9, 10, 11]
    assert indices.tolist() == [0, 1, 2, 3, 4, 5, 9, 10, 11]
    assert (cu_seqlens.tolist(), cu_seqlens.dtype, longest) == ([0, 6, 9], torch.int32, 6)


def row_errors(evidence: str) -> tuple[float, float]:
    """max |FA2 - eager| on row 2 (left-padded) and on row 1, as the generate evidence gives them."""
    found = ROW_ERRORS.search(evidence)
    assert found, evidence
    return float(found.group(1)), float(found.group(2))


@pytest.mark.releases
@pytest.mark.parametrize(
    (
        "release",
        "cu_seqlens",
        "position_ids",
        "offset_evidence",
        "mask_4d_evidence",
        "generate",
        "hybrid",
        "generate_evidence",
    ),
    [
        # up to 4.42 the FA2 path is LlamaFlashAttention2's method, which takes no position_ids
        (
            "4.40.0",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "(the FA2 entry takes no position_ids): flash_attn_func",
            GATHER_PAST_BATCH,
            NOT_AFFECTED,
            NOT_AFFECTED,
            "no Gemma2 in this release",
        ),
        (
            "4.44.0",
            AFFECTED,
            NOT_AFFECTED,
            "cu_seqlens_q=[16] starts at 16, not 0",
            GATHER_PAST_BATCH,
            # prepare_inputs_for_generation builds a 4-D mask for the HybridCache, FA2 or not; it fails
            # before there are logits, so the padded row cannot be judged
            AFFECTED,
            SKIPPED,  # hidden by the 4-D mask's failure, not the probe's
            "index_first_axis: 68 of 69 indices fall outside [0, 2)",
        ),
        (
            "4.44.1",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            NOT_AFFECTED,
            NOT_AFFECTED,
            GENERATE_2D,
        ),
        # Gemma2's FA2 reads an attribute no 4.47 class sets (PR 35285): every forward raises
        (
            "4.47.1",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            ERROR,
            ERROR,
            NO_TOP_LEFT_MASK,
        ),
        # the prompt's 2-D mask (6 per row) picks from the cache's 8 slots per row: row 2 reads wrong ones
        (
            "4.48.0",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            NOT_AFFECTED,
            AFFECTED,
            GENERATE_2D,
        ),
        (
            "4.48.1",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            NOT_AFFECTED,
            AFFECTED,
            GENERATE_2D,
        ),
        (
            "4.48.2",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            NOT_AFFECTED,
            NOT_AFFECTED,
            GENERATE_2D,
        ),
        (
            "4.51.0",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            NOT_AFFECTED,
            NOT_AFFECTED,
            GENERATE_2D,
        ),
        (
            "4.51.1",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            NOT_AFFECTED,
            NOT_AFFECTED,
            GENERATE_2D,
        ),
        (
            "4.52.1",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            GATHER_PAST_BATCH,
            # GenerationMixin.prepare_inputs_for_generation builds a 4-D mask for any compileable cache
            # (HybridCache included), whatever the attention implementation
            AFFECTED,
            SKIPPED,  # hidden by the 4-D mask's failure, not the probe's
            "index_first_axis: 46 of 57 indices fall outside [0, 14)",
        ),
        # 4.54 sends any position_ids down the varlen path and raises in its own metadata code
        (
            "4.54.1",
            NOT_AFFECTED,
            AFFECTED,
            "RuntimeError before any flash_attn call: max(): Expected reduction dim",
            OWN_GATHER_PAST_BATCH,
            NOT_AFFECTED,
            NOT_AFFECTED,
            GENERATE_2D,
        ),
        (
            "5.23.0",
            NOT_AFFECTED,
            NOT_AFFECTED,
            "flash_attn_func(q [2, 8, 4, 16])",
            OWN_GATHER_PAST_BATCH,
            NOT_AFFECTED,
            NOT_AFFECTED,
            GENERATE_2D,
        ),
    ],
)
def test_probe_on_release(
    release: str,
    cu_seqlens: ProbeVerdict,
    position_ids: ProbeVerdict,
    offset_evidence: str,
    mask_4d_evidence: str,
    generate: ProbeVerdict,
    hybrid: ProbeVerdict,
    generate_evidence: str,
) -> None:
    with release_venv(f"transformers=={release}") as venv:
        outcome = probe_in(venv, PROBE)
    observations = outcome.observations
    assert observations[CU_SEQLENS_RULE].verdict is cu_seqlens, observations
    assert observations[POSITION_IDS_RULE].verdict is position_ids, observations
    for rule in (CU_SEQLENS_RULE, POSITION_IDS_RULE):  # one batch, told apart by where it broke
        assert offset_evidence in observations[rule].evidence
    # No release is fixed: every one flattens the 4-D mask into indices past the 2x8 tokens.
    assert observations[MASK_4D_RULE].verdict is AFFECTED, observations
    assert mask_4d_evidence in observations[MASK_4D_RULE].evidence
    assert observations[GENERATE_RULE].verdict is generate, observations
    assert observations[HYBRID_PADDING_RULE].verdict is hybrid, observations
    for rule in (GENERATE_RULE, HYBRID_PADDING_RULE):  # one generate run
        assert generate_evidence in observations[rule].evidence
    if generate_evidence == GENERATE_2D:  # logits to compare, per row
        second, first = row_errors(observations[HYBRID_PADDING_RULE].evidence)
        assert first <= 1e-4  # the tolerance; about 1e-7 in every release here
        assert second > 0.1 if hybrid is AFFECTED else second <= 1e-4  # 4.48.0/4.48.1: about 0.43
