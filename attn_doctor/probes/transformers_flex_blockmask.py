"""Does each flex_attention model family take a ready-made BlockMask as its attention_mask?

transformers 4.47-4.51 build the flex mask in each family's ``_update_causal_mask``; families whose
code lacks a BlockMask branch call ``.dim()`` on it (4.47.0's only flex family, GPT-NeoX, among
them). Reading the source cannot tell which families of the installed release do, so one-layer
random models of each family are given one.

Also the helpers the flex_attention padding probe shares: loading the stack eagerly, tiny models,
and turning attempts into one observation.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from attn_doctor.isolation import installed_versions
from attn_doctor.probes.observation import Observation, ProbeSkipped, ProbeVerdict

RULE = "transformers-flex-blockmask-no-dim"
FIRST_FLEX_RELEASE = "4.47.0"  # GPT-NeoX, the first model with attn_implementation="flex_attention"
SYMPTOM = "'BlockMask' object has no attribute 'dim'"
SEQ_LEN = 16
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
FAMILIES = (  # (name, config class, base model class)
    ("GPTNeoX", "GPTNeoXConfig", "GPTNeoXModel"),  # the first flex_attention family (4.47.0)
    ("Llama", "LlamaConfig", "LlamaModel"),
    ("Mistral", "MistralConfig", "MistralModel"),
    ("Qwen2", "Qwen2Config", "Qwen2Model"),
    ("Gemma2", "Gemma2Config", "Gemma2Model"),
    ("Gemma3", "Gemma3TextConfig", "Gemma3TextModel"),
)


class Outcome(enum.Enum):
    SYMPTOM = "symptom"  # the rule's error
    CLEAN = "clean"  # completed: evidence against the rule
    OTHER = "other"  # failed otherwise: says nothing about the rule
    NOT_RUN = "not run"  # nothing to drive in this release


@dataclass(frozen=True)
class Attempt:
    label: str
    outcome: Outcome
    detail: str


def load_transformers(needs: str = "flex_attention", since: str = FIRST_FLEX_RELEASE) -> Any:
    """transformers with torch.compile off: on CPU, transformers' compiled flex_attention builds C++
    for tens of seconds, and fails on some releases; the code paths probed here are eager Python.

    Raises ProbeSkipped before importing anything (torch alone takes seconds) when torch has no
    flex_attention, or transformers is older than ``since``, the first release with what the probe
    ``needs``. transformers is judged by its release, not by a file: 4.47.0's flex_attention lives
    in GPT-NeoX's modeling file, which older releases have too.
    """
    homes = {}
    for package in ("torch", "transformers"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise ProbeSkipped(f"{package} is not installed")
        homes[package] = Path(spec.origin).parent
    if not (homes["torch"] / "nn/attention/flex_attention.py").is_file():
        release = installed_versions(("torch",)).get("torch", "(unknown release)")
        raise ProbeSkipped(f"torch {release} has no flex_attention (added in 2.5)")
    release = installed_versions(("transformers",)).get("transformers", "")
    if release and Version(release).release < Version(since).release:
        raise ProbeSkipped(f"transformers {release} has no {needs} (added in {since})")
    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # read by each torch.compile call
    return importlib.import_module("transformers")


def tiny_model(transformers: Any, config_class: str, model_class: str) -> Any:
    """A one-layer random-initialised model on flex_attention; raises if the release picked another."""
    import torch

    config = getattr(transformers, config_class)(**TINY_CONFIG, attn_implementation="flex_attention")
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    if model.config._attn_implementation != "flex_attention":
        raise RuntimeError(f"{model_class} runs {model.config._attn_implementation}, not flex_attention")
    return model


def attempt(label: str, action: Callable[[], str], is_symptom: Callable[[Exception], bool]) -> Attempt:
    """Run ``action`` (returns what it saw) and sort the result; never raises for the action."""
    try:
        return Attempt(label, Outcome.CLEAN, action())
    except Exception as exc:  # noqa: BLE001 - every failure is sorted into the observation
        if is_symptom(exc):
            return Attempt(label, Outcome.SYMPTOM, _gist(exc))
        return Attempt(label, Outcome.OTHER, f"failed otherwise, {_gist(exc)}")


def _gist(exc: Exception) -> str:
    """The exception's type and first sentence: torch's messages go on for a paragraph."""
    lines = str(exc).strip().splitlines()
    first = lines[0].split(". ")[0] if lines else ""
    return f"{type(exc).__name__}: {first}"[:200]


def observe(rule: str, context: str, attempts: list[Attempt]) -> Observation:
    """AFFECTED when any attempt shows the symptom, NOT_AFFECTED when none does and one completed.

    Raises when no attempt gave an answer either way: that is a probe error, not a verdict.
    """
    evidence = f"{context}: " + "; ".join(f"{item.label}: {item.detail}" for item in attempts)
    outcomes = {item.outcome for item in attempts}
    if Outcome.SYMPTOM in outcomes:
        return Observation(rule, ProbeVerdict.AFFECTED, evidence)
    if Outcome.CLEAN in outcomes:
        return Observation(rule, ProbeVerdict.NOT_AFFECTED, evidence)
    raise RuntimeError(f"no clean answer: {evidence}")


def run() -> list[Observation]:
    transformers = load_transformers()
    from torch.nn.attention.flex_attention import create_block_mask

    block_mask = create_block_mask(
        lambda b, h, q, kv: q >= kv, B=None, H=None, Q_LEN=SEQ_LEN, KV_LEN=SEQ_LEN, device="cpu"
    )
    attempts = [try_family(transformers, block_mask, *family) for family in FAMILIES]
    context = f"transformers {transformers.__version__}, one-layer flex_attention models given a BlockMask"
    return [observe(RULE, context, attempts)]


def try_family(transformers: Any, block_mask: Any, name: str, config_class: str, model_class: str) -> Attempt:
    import torch

    model_type = getattr(transformers, model_class, None)
    if model_type is None:
        return Attempt(name, Outcome.NOT_RUN, f"absent ({model_class} not in this release)")
    if not getattr(model_type, "_supports_flex_attn", False):
        return Attempt(name, Outcome.NOT_RUN, f"{model_class} does not claim flex_attention")

    def forward() -> str:
        model = tiny_model(transformers, config_class, model_class)
        with torch.no_grad():
            out = model(input_ids=torch.arange(SEQ_LEN)[None], attention_mask=block_mask, use_cache=False)
        if not bool(torch.isfinite(out.last_hidden_state).all()):
            raise RuntimeError("accepted it but returned non-finite outputs")
        return "accepted, finite outputs"

    return attempt(name, forward, lambda exc: isinstance(exc, AttributeError) and SYMPTOM in str(exc))
