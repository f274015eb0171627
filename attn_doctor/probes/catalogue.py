"""Which probes exist, which rules each one observes, and what it needs installed.

Pure data, importable without torch: the probes' code is only imported inside a child process.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    id: str
    module: str  # defines run() -> list[Observation]
    rules: tuple[str, ...]  # the rule ids its observations are about
    needs: str  # the package (rule name) that must be installed for the probe to mean anything
    summary: str


# Imported once, before the probes fork from that process: what every probe child imports anyway,
# and nothing that binds a probe's stand-ins (the FA2 probe puts a fake flash_attn in place before
# transformers' modeling code is imported, so that import stays in each child). The torch modules
# are the heavy part of what transformers' modeling code imports from torch.
SHARED_IMPORTS = ("torch", "transformers", "torch._dynamo", "torch.distributed.tensor")

PROBES: tuple[Probe, ...] = (
    Probe(
        id="transformers-fa2-unpad",
        module="attn_doctor.probes.transformers_fa2_unpad",
        rules=(
            "gemma2-fa2-cu-seqlens",
            "transformers-fa2-position-ids-not-from-zero",
            "transformers-fa2-4d-attention-mask",
            "gemma2-fa2-generate-4d-mask",
            "gemma2-fa2-hybrid-cache-padding-slice",
        ),
        needs="transformers",
        summary="transformers' own FA2 path with validating stand-ins for flash_attn's functions",
    ),
    Probe(
        id="transformers-fa2-sliding-window",
        module="attn_doctor.probes.transformers_fa2_sliding_window",
        rules=(
            "gemma2-fa2-sliding-window-slice-4-44-0",
            "gemma2-fa2-sliding-window-prefill-slice",
            "gemma2-fa2-missing-top-left-mask-attribute",
            "gemma2-hybrid-cache-sliding-layer-index-error",
            "transformers-mistral-fa2-generate-mask-slice",
        ),
        needs="transformers",
        summary="Gemma-2 and Mistral FA2 past the sliding window (stand-ins that take window_size) vs eager",
    ),
    Probe(
        id="transformers-flex-blockmask",
        module="attn_doctor.probes.transformers_flex_blockmask",
        rules=("transformers-flex-blockmask-no-dim",),
        needs="transformers",
        summary="one-layer models of each flex_attention family given a BlockMask as attention_mask",
    ),
    Probe(
        id="transformers-flex-padding",
        module="attn_doctor.probes.transformers_flex_padding",
        rules=("transformers-flex-pad-none-key-length",),
        needs="transformers",
        summary="make_flex_block_causal_mask as generation calls it, then two generate() steps",
    ),
    Probe(
        id="fla-rotary",
        module="attn_doctor.probes.fla_rotary",
        rules=("fla-rotary-dim-exceeds-head-dim",),
        needs="flash-linear-attention",
        summary="fla's RotaryEmbedding with dim > head_dim on a [B, T, H, D] input",
    ),
)


def probes_for_rule(rule_id: str) -> list[Probe]:
    return [probe for probe in PROBES if rule_id in probe.rules]
