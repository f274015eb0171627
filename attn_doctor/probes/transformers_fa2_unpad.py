"""Probe: transformers' own FlashAttention-2 glue, run on stand-ins for flash_attn that check its metadata.

Seed A's crashes come from what transformers builds before it calls flash_attn (cu_seqlens without a
leading 0, gather indices from a flattened 4-D mask), not from the kernels. So the probe hands the
installed transformers a fake ``flash_attn`` package whose functions validate that metadata and compute
attention in float64 torch, runs the release's own FA2 entry point on a few tiny CPU batches, and
compares each output with reference attention. The release's own import code picks the stand-ins up,
whichever names and loading scheme it uses; neither flash_attn nor a GPU is needed. A tiny Gemma-2
generate on a left-padded batch, compared with eager, shows whether that path gets a 4-D mask and
whether the batch's second row comes out right.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import torch
import torch.nn.functional as F

from attn_doctor.kernels.metadata import check_indices, check_metadata
from attn_doctor.probes.observation import Observation, ProbeSkipped, ProbeVerdict

CU_SEQLENS_RULE = "gemma2-fa2-cu-seqlens"  # 4.44.0: bad cu_seqlens reach flash_attn_varlen_func
POSITION_IDS_RULE = "transformers-fa2-position-ids-not-from-zero"  # 4.54: transformers itself raises
MASK_4D_RULE = "transformers-fa2-4d-attention-mask"
GENERATE_RULE = "gemma2-fa2-generate-4d-mask"  # 4.44.0: Gemma2's generate hands FA2 a 4-D mask
HYBRID_PADDING_RULE = "gemma2-fa2-hybrid-cache-padding-slice"  # 4.48.0-4.48.1: row 2 of a batch wrong
GENERATE_RULES = (GENERATE_RULE, HYBRID_PADDING_RULE)  # one generate run, observed for both
TOLERANCE = 1e-4
LENGTH, HEADS, KV_HEADS, HEAD_DIM = 8, 4, 2, 16
EVIDENCE_CHARS = 299


class Violation(Exception):
    """Metadata that flash_attn would misread; the message is the evidence."""


class StandInMisuse(Exception):
    """A stand-in called in a way the probe's batches should not cause: the probe misreads this release."""


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    window: tuple[int, int] = (-1, -1),
) -> torch.Tensor:
    """One sequence, [Sq, H, D] x [Sk, Hk, D] -> [Sq, H, D] in float64, as flash_attn >= 2.1 computes it:
    causal and ``window`` (left, right; -1 unbounded) are bottom-right aligned, query i sees key j for
    i + Sk - Sq - left <= j <= i + Sk - Sq + right, kv heads are shared by groups of query heads, and a
    query that sees no key gets zeros."""
    groups = q.shape[1] // k.shape[1]
    keys, values = (x.double().repeat_interleave(groups, dim=1) for x in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("qhd,khd->hqk", q.double(), keys) * scale
    left, right = window
    right = 0 if causal else right
    offset = k.shape[0] - q.shape[0]  # bottom-right alignment
    distance = torch.arange(k.shape[0])[None, :] - torch.arange(q.shape[0])[:, None] - offset  # key - query
    allowed = torch.ones_like(distance, dtype=torch.bool)
    if right >= 0:
        allowed &= distance <= right
    if left >= 0:
        allowed &= distance >= -left
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", weights, values)


def _listed(values: list[int]) -> str:
    return str(values) if len(values) <= 12 else f"[{', '.join(map(str, values[:12]))}, ...]"


def _refuse_indices(function: str, indices: torch.Tensor, rows: int) -> None:
    problems = check_indices(indices, rows)
    if problems:
        raise Violation(f"{function}: {problems[0]}")


def _import_only(name: str) -> Callable[..., Any]:
    """For a name the release imports but the probe's batches never reach."""

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise StandInMisuse(f"{name} was called: none of the probe's batches should reach it")

    return stand_in


@dataclass
class StandIns:
    """flash_attn's functions as transformers calls them, each logging its call and validating its input."""

    calls: list[str] = field(default_factory=list)

    def flash_attn_func(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        dropout_p: float = 0.0,
        softmax_scale: float | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        self.calls.append(f"flash_attn_func(q {list(q.shape)})")
        _no_dropout(dropout_p)
        rows = [reference_attention(q[b], k[b], v[b], causal, softmax_scale) for b in range(q.shape[0])]
        return torch.stack(rows).to(q.dtype)

    def flash_attn_varlen_func(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: Any,
        max_seqlen_k: Any,
        dropout_p: float = 0.0,
        softmax_scale: float | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        self.calls.append(f"flash_attn_varlen_func(cu_seqlens_q={_listed(cu_seqlens_q.flatten().tolist())})")
        _no_dropout(dropout_p)
        max_q, max_k = int(max_seqlen_q), int(max_seqlen_k)  # 0-dim tensors in some releases
        problems = check_metadata(cu_seqlens_q, cu_seqlens_k, max_q, max_k, q.shape[0], k.shape[0])
        if problems:
            raise Violation(f"flash_attn_varlen_func(max_seqlen_q={max_q}): {'; '.join(problems)}")
        bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        pieces = [
            reference_attention(q[qa:qb], k[ka:kb], v[ka:kb], causal, softmax_scale)
            for qa, qb, ka, kb in zip(bounds_q, bounds_q[1:], bounds_k, bounds_k[1:])
        ]
        return torch.cat(pieces).to(q.dtype)

    def index_first_axis(self, tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        _refuse_indices("index_first_axis", indices, tensor.shape[0])
        return tensor[indices]

    def pad_input(self, hidden: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
        _refuse_indices("pad_input", indices, batch * seqlen)
        if indices.numel() != hidden.shape[0]:
            raise Violation(f"pad_input got {indices.numel()} indices for {hidden.shape[0]} tokens")
        output = hidden.new_zeros(batch * seqlen, *hidden.shape[1:])
        output[indices] = hidden
        return output.view(batch, seqlen, *hidden.shape[1:])

    def unpad_input(
        self, hidden: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """flash_attn 2.5's: the tokens the mask keeps, gathered from ``hidden`` flattened to (b s). Reached
        where the query is shorter or longer than the keys (a cache), with a mask as long as the query."""
        seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
        flat = hidden.reshape(-1, *hidden.shape[2:])
        problems = check_indices(indices, flat.shape[0])
        if problems:
            raise Violation(f"unpad_input: {problems[0]}")
        cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
        return flat[indices], indices, cu_seqlens, int(seqlens.max().item())

    def contents(self) -> dict[str, dict[str, Any]]:
        """The fake flash_attn package, module by module: everything any release imports from it."""
        return {
            "flash_attn": {
                "flash_attn_func": self.flash_attn_func,
                "flash_attn_varlen_func": self.flash_attn_varlen_func,
                # No paged kernel: transformers 5.x reads None as "not supported" (and skips wrapping it
                # in torch.compiler.disable, which would import torch._dynamo).
                "flash_attn_with_kvcache": None,
            },
            "flash_attn.bert_padding": {
                "index_first_axis": self.index_first_axis,
                "pad_input": self.pad_input,
                "unpad_input": self.unpad_input,
            },
            "flash_attn.layers": {},
            "flash_attn.layers.rotary": {
                "apply_rotary_emb": _import_only("flash_attn.layers.rotary.apply_rotary_emb")
            },
        }

    def install(self) -> None:
        """The fake flash_attn package in sys.modules."""
        for name, attributes in self.contents().items():
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
            module.__dict__.update(attributes)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)


def _no_dropout(dropout_p: float) -> None:
    if dropout_p:
        raise StandInMisuse(f"dropout_p={dropout_p!r} reached flash_attn, but the probe passes dropout 0.0")


@dataclass(frozen=True)
class Case:
    """A batch given as causal sequences per row, (start, end); tokens outside every sequence are padding."""

    description: str
    sequences: tuple[tuple[tuple[int, int], ...], ...]
    mask: Literal["2d", "4d"] | None = None  # a padding mask [B, T], or [B, 1, T, T] with 1 = attend
    first_position: int | None = None  # position_ids count from here in each sequence; None: not passed

    def sequence_ids(self) -> torch.Tensor:
        """[B, T]: which sequence of its row each token belongs to, -1 for padding."""
        ids = torch.full((len(self.sequences), LENGTH), -1)
        for row, sequences in enumerate(self.sequences):
            for number, (start, end) in enumerate(sequences):
                ids[row, start:end] = number
        return ids

    def attention_mask(self) -> torch.Tensor | None:
        ids = self.sequence_ids()
        if self.mask == "2d":
            return (ids >= 0).long()
        if self.mask == "4d":
            same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] >= 0)
            return (same & torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril())[:, None].long()
        return None

    def position_ids(self) -> torch.Tensor | None:
        if self.first_position is None:
            return None
        positions = torch.zeros(len(self.sequences), LENGTH, dtype=torch.long)
        for row, sequences in enumerate(self.sequences):
            for start, end in sequences:
                positions[row, start:end] = torch.arange(end - start) + self.first_position
        return positions

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        batch = len(self.sequences)
        q = torch.randn(batch, LENGTH, HEADS, HEAD_DIM, generator=generator)
        k, v = (torch.randn(batch, LENGTH, KV_HEADS, HEAD_DIM, generator=generator) for _ in range(2))
        return q, k, v

    def expected(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Reference output (float64), zero at padding."""
        output = torch.zeros(q.shape, dtype=torch.float64)
        for row, sequences in enumerate(self.sequences):
            for start, end in sequences:
                part = slice(start, end)
                output[row, part] = reference_attention(q[row, part], k[row, part], v[row, part], True, None)
        return output


DENSE = Case("2x8 tokens, no mask, no position_ids", (((0, 8),), ((0, 8),)))
PADDED = Case("2x8 tokens, 2-D mask, row 2 left-padded by 3", (((0, 8),), ((3, 8),)), mask="2d")
PACKED = Case("1x8 tokens packed 5+3, position_ids [0..4, 0..2]", (((0, 5), (5, 8)),), first_position=0)
OFFSET = Case("2x8 tokens, position_ids 3..10, no mask", (((0, 8),), ((0, 8),)), first_position=3)
MASK_4D = Case("2x8 tokens, block-causal 4-D mask [2, 1, 8, 8]", (((0, 5), (5, 8)), ((0, 8),)), mask="4d")


@dataclass(frozen=True)
class Outcome:
    calls: tuple[str, ...]
    failure: str | None = None  # what a stand-in rejected, or what transformers raised
    error: float = float("nan")  # max |output - reference| over the real tokens
    raised_by_transformers: bool = False  # before any flash_attn call

    @property
    def exact(self) -> bool:
        return self.failure is None and self.error <= TOLERANCE

    def summary(self) -> str:
        if self.failure is not None:
            return self.failure
        calls = "; ".join(self.calls) or "no flash_attn call"
        return f"{calls}; max |out - ref| = {self.error:.1e} (tolerance {TOLERANCE:g})"


@dataclass(frozen=True)
class Fa2Path:
    """The release's FA2 entry point, called the way its own signature asks."""

    name: str
    function: Callable[..., Any]
    stand_ins: StandIns

    @property
    def parameters(self) -> dict[str, inspect.Parameter]:
        return dict(inspect.signature(self.function).parameters)

    def keywords(self, case: Case) -> dict[str, Any]:
        offered = {
            "attention_mask": case.attention_mask(),
            "query_length": LENGTH,
            "is_causal": True,
            "position_ids": case.position_ids(),
            "attn_implementation": "flash_attention_2",  # 5.x
            "implementation": "flash_attention_2",  # its name in 4.54 to 4.56
        }
        after_qkv = list(self.parameters.values())[3:]
        unknown = [
            p.name
            for p in after_qkv
            if p.default is p.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in offered
        ]
        if unknown:
            raise StandInMisuse(f"{self.name} requires {unknown}: a signature this probe does not know")
        return {p.name: offered[p.name] for p in after_qkv if p.name in offered}

    def drive(self, case: Case) -> Outcome:
        q, k, v = case.inputs()
        self.stand_ins.calls.clear()
        try:
            output = self.function(q, k, v, **self.keywords(case))
        except Violation as violation:
            return Outcome(tuple(self.stand_ins.calls), failure=str(violation))
        except Exception as exc:
            if type(exc) not in (IndexError, RuntimeError):  # torch's errors on bad indices, sizes, shapes
                raise  # anything else (NotImplementedError, TypeError, ...) is the probe's problem
            where = (
                "after " + self.stand_ins.calls[-1] if self.stand_ins.calls else "before any flash_attn call"
            )
            return Outcome(
                tuple(self.stand_ins.calls),
                failure=f"{type(exc).__name__} {where}: {exc}",
                raised_by_transformers=not self.stand_ins.calls,
            )
        calls = tuple(self.stand_ins.calls)
        if output.shape != q.shape:
            return Outcome(calls, failure=f"output of shape {list(output.shape)} for q {list(q.shape)}")
        real = case.sequence_ids() >= 0
        error = (output.double() - case.expected(q, k, v))[real].abs().max().item()
        return Outcome(calls, error=error)


def install_fake_flash_attn(stand_ins: StandIns) -> None:
    """``stand_ins`` as flash_attn for the installed transformers, before its modeling code is imported."""
    utils: Any = importlib.import_module("transformers.utils")
    stand_ins.install()
    # Every release asks these (imported from transformers.utils) before it imports flash_attn; with the
    # fake in sys.modules their package scans would be confused, so say what the fake is: FA2 and no other.
    for name in dir(utils):
        found = re.fullmatch(r"is_flash_attn_(\d+)_available", name)
        if found:
            setattr(utils, name, _answer(found.group(1) == "2"))


def fa2_path(stand_ins: StandIns) -> Fa2Path:
    """The installed release's FA2 entry, imported after the fake flash_attn is in place."""
    install_fake_flash_attn(stand_ins)
    if importlib.util.find_spec("transformers.modeling_flash_attention_utils") is not None:  # 4.43+
        shared = importlib.import_module("transformers.modeling_flash_attention_utils")
        return Fa2Path(
            "modeling_flash_attention_utils._flash_attention_forward",
            shared._flash_attention_forward,
            stand_ins,
        )
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    layer = getattr(llama, "LlamaFlashAttention2", None)
    if layer is None:
        raise ProbeSkipped(
            "this transformers has no FlashAttention-2 path to drive "
            "(neither modeling_flash_attention_utils nor LlamaFlashAttention2)"
        )
    # Up to 4.42 the path is a method; these are the attributes it reads from the layer.
    owner = types.SimpleNamespace(is_causal=True, _flash_attn_uses_top_left_mask=False, num_heads=HEADS)
    owner._upad_input = partial(layer._upad_input, owner)
    return Fa2Path(
        "LlamaFlashAttention2._flash_attention_forward",
        partial(layer._flash_attention_forward, owner),
        stand_ins,
    )


def _answer(value: bool) -> Callable[..., bool]:
    return lambda *args, **kwargs: value


def _observe(
    rule: str, case: Case, outcome: Outcome, note: str = "", affected: bool | None = None
) -> Observation:
    hit = not outcome.exact if affected is None else affected
    verdict = ProbeVerdict.AFFECTED if hit else ProbeVerdict.NOT_AFFECTED
    evidence = " ".join(f"{case.description}{note}: {outcome.summary()}".split())
    return Observation(rule, verdict, evidence[:EVIDENCE_CHARS])


def _offset_observations(outcome: Outcome, note: str) -> list[Observation]:
    """Offset position_ids mistaken for packed sequences, told apart by where it breaks: bad metadata
    handed to flash_attn (4.44.0) or an error in transformers' own metadata code (4.54.x)."""
    in_transformers = not outcome.exact and outcome.raised_by_transformers
    return [
        _observe(CU_SEQLENS_RULE, OFFSET, outcome, note, affected=not outcome.exact and not in_transformers),
        _observe(POSITION_IDS_RULE, OFFSET, outcome, note, affected=in_transformers),
    ]


GENERATE_CASE = "Gemma2ForCausalLM.generate (FA2, 2x6 prompt, 2-D mask, row 2 left-padded by 3, 2 new tokens)"
PROMPT, PADDING, NEW_TOKENS, VOCAB = 6, 3, 2, 128


def _gemma2(attn_implementation: str) -> Any:
    """A random one-layer Gemma2ForCausalLM, float32 on CPU.

    The layer is a sliding one (layer 0) with a window no shorter than prompt + new tokens, so the
    stand-ins, which know no window, compute what the model means. No logit softcapping: 5.x would
    hand ``softcap`` to the stand-ins (4.44 only when flash_attn's metadata says >= 2.6), and eager
    would then differ from them. FA2 on CPU in float32 only draws warnings in every release tried
    (4.44.0 to 5.23.0); availability is what the release asks ``is_flash_attn_2_available`` (and its
    siblings), which ``fa2_path`` already answers for the fake flash_attn before the model code loads.
    """
    configuration: Any = importlib.import_module("transformers.models.gemma2.configuration_gemma2")
    modeling: Any = importlib.import_module("transformers.models.gemma2.modeling_gemma2")
    config = configuration.Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        sliding_window=PROMPT + NEW_TOKENS,
        max_position_embeddings=64,
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        pad_token_id=0,
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(0)
    return modeling.Gemma2ForCausalLM(config).eval()


def _generate(model: Any) -> torch.Tensor:
    """Greedy generate on a left-padded batch; the logits of each new token, [NEW_TOKENS, 2, VOCAB]."""
    input_ids = torch.randint(1, VOCAB, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones(2, PROMPT, dtype=torch.long)
    input_ids[1, :PADDING], attention_mask[1, :PADDING] = 0, 0
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
        )
    return torch.stack(output.scores)


def _generate_observations(stand_ins: StandIns) -> list[Observation]:
    """Gemma2's generate with FA2 on a left-padded batch, compared with eager: does the FA2 path get a
    2-D mask (GENERATE_RULE), and are row 2's logits right (HYBRID_PADDING_RULE: 4.48.0 and 4.48.1 unpad
    the cache's keys, 8 slots per row, by the flat positions of the prompt's 2-D mask, 6 per row, so every
    row after the first reads the wrong slots; padded or not: tried by hand on 4.48.0, row 2 unpadded is
    0.31 off, row 1 left-padded exact)?"""

    def observed(verdicts: tuple[ProbeVerdict, ProbeVerdict], evidence: str) -> list[Observation]:
        text = " ".join(f"{GENERATE_CASE}: {evidence}".split())[:EVIDENCE_CHARS]
        return [Observation(rule, verdict, text) for rule, verdict in zip(GENERATE_RULES, verdicts)]

    if importlib.util.find_spec("transformers.models.gemma2") is None:  # before 4.42
        absent = "no Gemma2 in this release"
        return [Observation(rule, ProbeVerdict.NOT_AFFECTED, absent) for rule in GENERATE_RULES]
    error, affected, not_affected = ProbeVerdict.ERROR, ProbeVerdict.AFFECTED, ProbeVerdict.NOT_AFFECTED
    stand_ins.calls.clear()
    try:
        model = _gemma2("flash_attention_2")
        scores = _generate(model)
    # A 4-D mask fails before there are logits to look at: the padded row cannot be judged.
    # (the hybrid-cache rule is then not observable here: skipped, not a failure of the probe)
    except Violation as violation:
        return observed((affected, ProbeVerdict.SKIPPED), str(violation))
    except IndexError as exc:  # transformers' own gather (4.53+), before flash_attn
        where = "after " + stand_ins.calls[-1] if stand_ins.calls else "before any flash_attn call"
        return observed((affected, ProbeVerdict.SKIPPED), f"IndexError {where}: {exc}")
    except Exception as exc:  # noqa: BLE001 - these rules' verdicts only; the other observations stand
        return observed((error, error), f"the probe cannot drive it: {type(exc).__name__}: {exc}")
    calls = "; ".join(stand_ins.calls) or "no flash_attn call"
    try:  # the same weights with eager attention, which takes the 4-D mask it is meant to
        eager = _gemma2("eager")
        eager.load_state_dict(model.state_dict())
        first, second = (scores - _generate(eager)).abs().amax(dim=(0, 2)).tolist()  # per row
    except Exception as exc:  # noqa: BLE001 - as above
        return observed((error, error), f"{calls}; then eager failed: {type(exc).__name__}: {exc}")
    numbers = (
        f"logits max |FA2 - eager| = {second:.1e} on row 2 (left-padded), {first:.1e} on row 1 "
        f"(tolerance {TOLERANCE:g})"
    )
    if not stand_ins.calls or not first <= TOLERANCE:  # wrong, but not the way either rule says
        return observed((error, error), f"{calls}; {numbers}")
    # flash_attn took the 2-D mask's metadata either way; only row 2 can still be wrong
    second_row = not_affected if second <= TOLERANCE else affected
    return observed((not_affected, second_row), f"{calls}; {numbers}")


def run() -> list[Observation]:
    stand_ins = StandIns()
    path = fa2_path(stand_ins)
    takes_positions = "position_ids" in path.parameters
    for case in (DENSE, PADDED, PACKED) if takes_positions else (DENSE, PADDED):
        outcome = path.drive(case)
        if not outcome.exact:  # the stand-ins, not transformers, would be at fault: no verdict from them
            raise StandInMisuse(f"{path.name} fails a sanity batch ({case.description}: {outcome.summary()})")
    note = "" if takes_positions else " (the FA2 entry takes no position_ids)"
    return [
        *_offset_observations(path.drive(OFFSET), note),
        _observe(MASK_4D_RULE, MASK_4D, path.drive(MASK_4D)),
        *_generate_observations(stand_ins),
    ]
