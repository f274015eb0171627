"""What can be reproduced: repro ids, their cases, and how a user names one.

Pure data, importable without torch: the cases' code lives in ``attn_doctor.repro.cases.*``
and is only imported inside a child process.
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_doctor.engine.loader import RuleSet
from attn_doctor.engine.references import rules_citing
from attn_doctor.errors import InputError


@dataclass(frozen=True)
class Case:
    name: str
    expect_bug: bool  # the buggy configuration must reproduce; the fixed one must pass
    description: str


@dataclass(frozen=True)
class Repro:
    id: str
    title: str
    module: str  # attn_doctor.repro.cases.<module>, defining run_case(name, device, seed) -> dict
    cases: tuple[Case, ...]


REPROS: tuple[Repro, ...] = (
    Repro(
        id="varlen-cu-seqlens",
        title=(
            "transformers FlashAttention-2 unpadding metadata out of bounds: cu_seqlens without a "
            "leading 0 from offset position_ids (4.44.0; huggingface/transformers#32487), and a 4-D "
            "mask flattened into gather indices (huggingface/transformers#39608)"
        ),
        module="attn_doctor.repro.cases.varlen_cu_seqlens",
        cases=(
            Case(
                "offset-position-ids",
                True,
                "2x8 tokens with position_ids 3..10: cu_seqlens=[16] (no leading 0), max_seqlen 11",
            ),
            Case(
                "4d-mask-unpad",
                True,
                "a 4-D [B,1,T,T] mask flattened by _get_unpad_data: gather indices up to B*T*T",
            ),
            Case("fixed", False, "cu_seqlens=[0, 8, 16] from a 2-D mask, as 4.44.1 builds them"),
        ),
    ),
    Repro(
        id="rotary-dim",
        title=(
            "flash-linear-attention < 0.6.0: RotaryEmbedding built with the model width "
            "(dim = heads * head_dim) addresses past each head of [B, T, H, D] "
            "(fla-org/flash-linear-attention#180)"
        ),
        module="attn_doctor.repro.cases.rotary_dim",
        cases=(
            Case("rotary-dim-is-model-dim", True, "rotary_dim = H*D = 256 on heads of D = 64"),
            Case("fixed", False, "rotary_dim = head_dim = 64"),
        ),
    ),
    Repro(
        id="flex-padding",
        title=(
            "transformers 4.51.0 flex_attention: make_flex_block_causal_mask gets no key length "
            "in cached generation (huggingface/transformers#37323); a block mask built for the new "
            "tokens alone leaves the cached keys out"
        ),
        module="attn_doctor.repro.cases.flex_padding",
        cases=(
            Case(
                "missing-key-length",
                True,
                "decoding with a cache: mask built for the query length, keys are longer",
            ),
            Case("fixed", False, "mask built for the real key length"),
        ),
    ),
)


def find_repro(repro_id: str) -> Repro | None:
    return next((repro for repro in REPROS if repro.id == repro_id), None)


def resolve(name: str, rules: RuleSet) -> tuple[Repro, str | None]:
    """A repro from a rule id, a repro id, an upstream URL or ``owner/repo#N``; and the rule id."""
    rule = rules.get(name)
    if rule is None:
        rule = next(iter(rules_citing(name, rules.rules)), None)
    if rule is not None:
        if rule.repro is None or find_repro(rule.repro) is None:
            raise InputError(name, f"rule {rule.id} has no bundled reproduction")
        return find_repro(rule.repro), rule.id  # type: ignore[return-value]
    repro = find_repro(name)
    if repro is None:
        raise InputError(
            name,
            "not a rule id, repro id or upstream issue that a rule cites (see `attn-doctor repro --list`)",
        )
    linked = next((r.id for r in rules.rules if r.repro == repro.id), None)
    return repro, linked
