"""Probe: FlashAttention-2 in transformers' Gemma-2 and Mistral past the sliding window, against eager.

Some releases slice the 2-D padding mask (and sometimes the keys) of a sliding-window layer to the
window in Python before flash_attn is called: Gemma-2 on every forward in 4.44.0 and in generate's
prefill in 4.44.1-4.46.x, Mistral when decoding past the window with padding (4.36-4.45). The probe runs
tiny one-layer models of the installed release on CPU with FA2 served by stand-ins for flash_attn that
also take ``window_size`` (as flash_attn >= 2.3 does) and compute in float64, and compares their logits
with the same weights run with eager attention. The same runs show two Gemma-2 crashes that stand in
the way: 4.47.x's FA2 reads an attribute nothing sets, 4.48.0/4.48.1's cache goes out of bounds past the
window with any attention.

transformers before 4.56 passes ``window_size=(W, W)``, which flash_attn reads as W + 1 keys where eager
attends W (rule transformers-fa2-sliding-window-off-by-one). So the eager reference is given the window
the FA2 calls were asked for (``left + 1``); the difference from eager at the configured W is reported
beside it.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any

import torch

from attn_doctor.kernels.metadata import check_metadata
from attn_doctor.probes.observation import Observation, ProbeVerdict
from attn_doctor.probes.transformers_fa2_unpad import (
    EVIDENCE_CHARS,
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    StandInMisuse,
    StandIns,
    Violation,
    install_fake_flash_attn,
    reference_attention,
)

SLICE_4_44_0_RULE = "gemma2-fa2-sliding-window-slice-4-44-0"  # a forward without cache
PREFILL_SLICE_RULE = "gemma2-fa2-sliding-window-prefill-slice"  # generate's prefill
TOP_LEFT_MASK_RULE = "gemma2-fa2-missing-top-left-mask-attribute"  # 4.47.x: every FA2 forward raises
CACHE_INDEX_RULE = "gemma2-hybrid-cache-sliding-layer-index-error"  # 4.48.0-4.48.1: generate past W
GEMMA2_RULES = (SLICE_4_44_0_RULE, PREFILL_SLICE_RULE, TOP_LEFT_MASK_RULE, CACHE_INDEX_RULE)
MISTRAL_SLICE_RULE = "transformers-mistral-fa2-generate-mask-slice"
WINDOW, VOCAB = 4, 128
TOLERANCE = 1e-4  # on logits of order 1; float32 model, float64 attention


@dataclass
class WindowedStandIns(StandIns):
    """The stand-ins with flash_attn >= 2.3's ``window_size``, which transformers then passes."""

    windows: list[tuple[int, int]] = field(default_factory=list)  # of the calls that were given one

    def flash_attn_func(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        dropout_p: float = 0.0,
        softmax_scale: float | None = None,
        causal: bool = False,
        window_size: tuple[int, int] = (-1, -1),
        softcap: float = 0.0,
        alibi_slopes: Any = None,
        deterministic: bool = False,
        return_attn_probs: bool = False,
    ) -> torch.Tensor:
        window = self._window(window_size, dropout_p, softcap, alibi_slopes, return_attn_probs)
        self.calls.append(f"flash_attn_func k {list(k.shape)}")
        rows = [
            reference_attention(q[b], k[b], v[b], causal, softmax_scale, window) for b in range(q.shape[0])
        ]
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
        window_size: tuple[int, int] = (-1, -1),
        softcap: float = 0.0,
        alibi_slopes: Any = None,
        deterministic: bool = False,
        return_attn_probs: bool = False,
    ) -> torch.Tensor:
        window = self._window(window_size, dropout_p, softcap, alibi_slopes, return_attn_probs)
        self.calls.append(f"flash_attn_varlen_func cu_seqlens_k {cu_seqlens_k.tolist()}")
        max_q, max_k = int(max_seqlen_q), int(max_seqlen_k)
        problems = check_metadata(cu_seqlens_q, cu_seqlens_k, max_q, max_k, q.shape[0], k.shape[0])
        if problems:
            raise Violation(f"flash_attn_varlen_func(max_seqlen_q={max_q}): {'; '.join(problems)}")
        bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        pieces = [
            reference_attention(q[qa:qb], k[ka:kb], v[ka:kb], causal, softmax_scale, window)
            for qa, qb, ka, kb in zip(bounds_q, bounds_q[1:], bounds_k, bounds_k[1:])
        ]
        return torch.cat(pieces).to(q.dtype)

    def _window(
        self, window_size: Any, dropout_p: float, softcap: float, alibi_slopes: Any, return_attn_probs: bool
    ) -> tuple[int, int]:
        if dropout_p or softcap or alibi_slopes is not None or return_attn_probs:
            raise StandInMisuse(
                f"flash_attn called with dropout_p={dropout_p!r}, softcap={softcap!r}, alibi_slopes or "
                "return_attn_probs: the probe's models use none of them"
            )
        window = (int(window_size[0]), int(window_size[1]))
        if window != (-1, -1):
            self.windows.append(window)
        return window


@dataclass(frozen=True)
class Case:
    """A seeded random batch of two rows (row 2 left-padded by ``padding``) through a tiny one-layer
    model of ``family``."""

    description: str
    family: str  # "gemma2" or "mistral": transformers.models.<family>
    prompt: int
    padding: int  # left padding of row 2
    new_tokens: int  # 0: one forward without a cache, the logits of every prompt token

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids = torch.randint(1, VOCAB, (2, self.prompt), generator=torch.Generator().manual_seed(0))
        attention_mask = torch.ones(2, self.prompt, dtype=torch.long)
        input_ids[1, : self.padding], attention_mask[1, : self.padding] = 0, 0
        return input_ids, attention_mask

    def model(self, attn_implementation: str, window: int) -> Any:
        """float32 on CPU; the same weights for any attention and window (seeded, no window-shaped weight).
        No logit softcapping (Gemma-2): eager would apply it, the stand-ins would refuse it."""
        family = self.family
        configuration: Any = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
        modeling: Any = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        shared = dict(
            vocab_size=VOCAB,
            hidden_size=HEADS * HEAD_DIM,
            intermediate_size=128,
            num_hidden_layers=1,  # layer 0: a sliding-window layer in Gemma-2 too
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            sliding_window=window,
            max_position_embeddings=64,
            pad_token_id=0,
            eos_token_id=None,  # greedy generate runs every step, and no score is -inf
            attn_implementation=attn_implementation,
        )
        if family == "gemma2":
            config = configuration.Gemma2Config(
                head_dim=HEAD_DIM, attn_logit_softcapping=None, final_logit_softcapping=None, **shared
            )
            model_class = modeling.Gemma2ForCausalLM
        else:
            config = configuration.MistralConfig(**shared)
            model_class = modeling.MistralForCausalLM
        torch.manual_seed(0)
        return model_class(config).eval()

    def run(self, model: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [steps, 2, positions, VOCAB] and the generated tokens [2, steps] (empty for a forward)."""
        input_ids, attention_mask = self.inputs()
        with torch.no_grad():
            if not self.new_tokens:
                # position_ids per row, as generate makes them: 4.54's FA2 reads the model's own [1, T]
                # as one packed sequence for the whole batch, another rule's bug
                positions = torch.arange(self.prompt).expand(2, -1)
                logits = model(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    position_ids=positions,
                    use_cache=False,
                ).logits
                return logits[None], torch.zeros(2, 0, dtype=torch.long)
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=self.new_tokens,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
            )
        return torch.stack(output.scores)[:, :, None], output.sequences[:, self.prompt :]

    def eager_failure(self) -> str | None:
        """What eager at the configured window raises on this case; None if it runs."""
        try:
            self.run(self.model("eager", WINDOW))
        except Exception as exc:  # noqa: BLE001 - the evidence
            return f"{type(exc).__name__}: {exc}"
        return None


# Gemma-2 4.44.0 slices in every forward; 4.44.1 to 4.46.x only with a cache, which generate creates
# before the prefill (so one new token, the prefill's, is enough; later steps attend a window-sized
# cache, where FA2's W + 1 keys and eager's W differ, which is another rule).
GEMMA2_FORWARD = Case("Gemma2 forward without cache (FA2, 2x10 tokens, window 4)", "gemma2", 10, 0, 0)
GEMMA2_GENERATE = Case(
    "Gemma2 generate (FA2, 2x10 prompt, no padding, window 4, 1 new token)", "gemma2", 10, 0, 1
)
# Mistral 4.36-4.45 slices the mask when decoding past the window, only when there is a mask (padding).
MISTRAL_GENERATE = Case(
    "Mistral generate (FA2, 2x6 prompt, row 2 left-padded by 2, window 4, 3 new tokens)",
    "mistral",
    6,
    2,
    3,
)


@dataclass(frozen=True)
class Outcome:
    case: Case
    calls: tuple[str, ...] = ()
    error: float = float("nan")  # max |FA2 - eager| over the compared logits, eager at ``eager_window``
    error_at_window: float = float("nan")  # the same against eager at the configured WINDOW
    given: tuple[int, int] | None = None  # the window_size the FA2 calls got, if any
    failure: str | None = None  # what stopped the FA2 run: a stand-in's refusal or an exception
    eager_failure: str | None = None  # what eager raised, if anything, where FA2 failed

    @property
    def eager_window(self) -> int:
        """The window eager needs to attend the keys FA2 was asked for: flash_attn's (left, right) spans
        left + 1 keys when causal."""
        return WINDOW if self.given is None else self.given[0] + 1

    @property
    def exact(self) -> bool:
        return self.failure is None and self.error <= TOLERANCE

    def evidence(self) -> str:
        if self.failure is not None:
            if self.eager_failure is None:
                eager = "eager runs"
            elif self.failure.endswith(self.eager_failure):
                eager = "eager raises it too"
            else:
                eager = f"eager raises {self.eager_failure}"
            text = f"{self.case.description}: {self.failure}; {eager}"
        else:
            if self.given is None:
                against = f"eager at window {WINDOW}, FA2 given no window_size"
            elif self.eager_window == WINDOW:
                against = f"eager at window {WINDOW}, which FA2's window_size={self.given} spans"
            else:
                against = (
                    f"eager at window {self.eager_window} as FA2's window_size={self.given} reads it, "
                    f"{self.error_at_window:.1e} at {WINDOW}"
                )
            text = (
                f"{self.case.description}: logits max |FA2 - eager| = {self.error:.1e} ({against}; tolerance "
                f"{TOLERANCE:g}); {_collapsed(self.calls)}"
            )
        return " ".join(text.split())[:EVIDENCE_CHARS]


def _collapsed(calls: tuple[str, ...]) -> str:
    """The calls in order, repeats counted, a function named once per run of its calls:
    'flash_attn_varlen_func cu_seqlens_k [0, 6, 10]; [0, 4, 8] x2'."""
    runs: list[list[Any]] = []
    for call in calls:
        if runs and runs[-1][0] == call:
            runs[-1][1] += 1
        else:
            runs.append([call, 1])
    shown, function = [], None
    for call, times in runs:
        name, _, detail = call.partition(" ")
        text = call if name != function else detail
        shown.append(text if times == 1 else f"{text} x{times}")
        function = name
    return "; ".join(shown) or "no flash_attn call"


def _compared(tokens: torch.Tensor, reference_tokens: torch.Tensor, steps: int) -> torch.Tensor:
    """[steps, 2]: the steps of each row whose input is the same in both runs (no token has diverged)."""
    if not tokens.shape[1]:
        return torch.ones(steps, 2, dtype=torch.bool)
    same = (tokens == reference_tokens).long().cumprod(dim=1)  # [2, steps]: all equal so far
    before = torch.cat([torch.ones(2, 1, dtype=torch.long), same[:, :-1]], dim=1)
    return before.T.bool()


def observe(case: Case, stand_ins: WindowedStandIns) -> Outcome:
    stand_ins.calls.clear()
    stand_ins.windows.clear()
    try:
        model = case.model("flash_attention_2", WINDOW)
    except ValueError as exc:  # 4.34-4.36: "Flash Attention 2.0 only supports torch.float16 and ..."
        raise _CannotBuild(f"FA2 model not built in float32: {exc}") from exc
    try:
        logits, tokens = case.run(model)
    except Violation as violation:
        return Outcome(
            case, tuple(stand_ins.calls), failure=str(violation), eager_failure=case.eager_failure()
        )
    except StandInMisuse:
        raise
    except Exception as exc:  # noqa: BLE001 - the release's own error, told apart from eager's
        failure = f"FA2 raised {type(exc).__name__}: {exc}"
        return Outcome(case, tuple(stand_ins.calls), failure=failure, eager_failure=case.eager_failure())
    calls = tuple(stand_ins.calls)
    windows = set(stand_ins.windows)
    if len(windows) > 1 or any(left != right for left, right in windows):
        raise StandInMisuse(f"{case.description}: FA2 was given windows {sorted(windows)}")
    given = windows.pop() if windows else None
    errors = []
    for window in (WINDOW if given is None else given[0] + 1, WINDOW):
        eager = case.model("eager", window)
        eager.load_state_dict(model.state_dict())
        reference, reference_tokens = case.run(eager)
        compared = _compared(tokens, reference_tokens, logits.shape[0])
        errors.append((logits - reference).abs().amax(dim=(2, 3))[compared].max().item())
    return Outcome(case, calls, errors[0], errors[1], given)


class _CannotBuild(Exception):
    """The release will not build the FA2 model on CPU in float32."""


def _verdict(rule: str, outcome: Outcome) -> Observation:
    """Affected when FA2's logits differ from eager while flash_attn took every call's metadata; a crash
    or refused metadata is not this silent slicing, and hides it: skipped (another rule names that
    crash), unless it is the probe's own stand-in that was misused (an error of the probe)."""
    if outcome.failure is not None:
        own = "StandInMisuse" in outcome.failure or "cannot drive" in outcome.failure
        return Observation(rule, ProbeVerdict.ERROR if own else ProbeVerdict.SKIPPED, outcome.evidence())
    verdict = ProbeVerdict.NOT_AFFECTED if outcome.exact else ProbeVerdict.AFFECTED
    return Observation(rule, verdict, outcome.evidence())


def _top_left_mask(forward: Outcome) -> Observation:
    """4.47.x: the FA2 forward raises on the attribute while eager runs."""
    if forward.failure is not None and "_flash_attn_uses_top_left_mask" in forward.failure:
        verdict = ProbeVerdict.AFFECTED if forward.eager_failure is None else ProbeVerdict.ERROR
    else:
        verdict = ProbeVerdict.NOT_AFFECTED if forward.calls else ProbeVerdict.ERROR  # FA2 was reached
    return Observation(TOP_LEFT_MASK_RULE, verdict, forward.evidence())


def _cache_index(generate: Outcome) -> Observation:
    """4.48.0-4.48.1: generate past the window goes out of bounds in the cache, eager included."""
    if generate.failure is None or generate.eager_failure is None:  # eager generated, FA2 aside
        return Observation(CACHE_INDEX_RULE, ProbeVerdict.NOT_AFFECTED, generate.evidence())
    out_of_bounds = (
        generate.eager_failure.startswith("IndexError") and "out of bounds" in generate.eager_failure
    )
    verdict = ProbeVerdict.AFFECTED if out_of_bounds else ProbeVerdict.ERROR
    return Observation(CACHE_INDEX_RULE, verdict, generate.evidence())


def _for_each(rules: tuple[str, ...], verdict: ProbeVerdict, evidence: str) -> list[Observation]:
    return [Observation(rule, verdict, " ".join(evidence.split())[:EVIDENCE_CHARS]) for rule in rules]


def _gemma2(stand_ins: WindowedStandIns) -> list[Observation]:
    if importlib.util.find_spec("transformers.models.gemma2") is None:  # before 4.42
        return _for_each(GEMMA2_RULES, ProbeVerdict.NOT_AFFECTED, "no gemma2 model in this release")
    try:
        forward, generate = (observe(case, stand_ins) for case in (GEMMA2_FORWARD, GEMMA2_GENERATE))
    except Exception as exc:  # noqa: BLE001 - these rules' verdicts only; Mistral's stands
        return _for_each(
            GEMMA2_RULES, ProbeVerdict.ERROR, f"the probe cannot drive it: {type(exc).__name__}: {exc}"
        )
    return [
        _verdict(SLICE_4_44_0_RULE, forward),
        _verdict(PREFILL_SLICE_RULE, generate),
        _top_left_mask(forward),
        _cache_index(generate),
    ]


def _mistral(stand_ins: WindowedStandIns) -> Observation:
    if importlib.util.find_spec("transformers.models.mistral") is None:  # before 4.34
        return Observation(MISTRAL_SLICE_RULE, ProbeVerdict.NOT_AFFECTED, "no mistral model in this release")
    try:
        return _verdict(MISTRAL_SLICE_RULE, observe(MISTRAL_GENERATE, stand_ins))
    except _CannotBuild as exc:
        return Observation(
            MISTRAL_SLICE_RULE, ProbeVerdict.SKIPPED, " ".join(str(exc).split())[:EVIDENCE_CHARS]
        )
    except Exception as exc:  # noqa: BLE001 - this rule's verdict only; Gemma-2's stand
        [observation] = _for_each(
            (MISTRAL_SLICE_RULE,),
            ProbeVerdict.ERROR,
            f"the probe cannot drive it: {type(exc).__name__}: {exc}",
        )
        return observation


def run() -> list[Observation]:
    stand_ins = WindowedStandIns()
    install_fake_flash_attn(stand_ins)
    return [*_gemma2(stand_ins), _mistral(stand_ins)]
