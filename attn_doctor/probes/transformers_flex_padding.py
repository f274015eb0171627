"""Does flex_attention generation survive make_flex_block_causal_mask with key_length left None?

transformers 4.51.0 pads the 2-D mask with ``pad=(0, key_length)``, and its callers leave the length
None: Llama 4 passes ``get_max_cache_shape()``, None under the default DynamicCache, and Llama passes
no lengths at all, so torch's pad() gets None. The function is called the way generation calls it,
then a tiny Llama generates two tokens: that shows whether the installed generate path still reaches
the failing call. Llama rather than Llama 4: it exists in every release with flex_attention, and on
4.51.0 it fails the same way from the first forward.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from attn_doctor.probes.observation import Observation
from attn_doctor.probes.transformers_flex_blockmask import (
    SEQ_LEN,
    Attempt,
    Outcome,
    attempt,
    load_transformers,
    observe,
    tiny_model,
)

RULE = "transformers-flex-pad-none-key-length"


def run() -> list[Observation]:
    transformers = load_transformers("make_flex_block_causal_mask", since="4.48.0")
    attempts = [build_mask_attempt(), generate_attempt(transformers)]
    return [observe(RULE, f"transformers {transformers.__version__}", attempts)]


def is_pad_none(exc: Exception) -> bool:
    return isinstance(exc, TypeError) and "pad()" in str(exc) and "NoneType" in str(exc)


def build_mask_attempt() -> Attempt:
    """The function alone, with the lengths a DynamicCache leaves it (releases before 4.51 take none)."""
    import torch

    module = importlib.import_module("transformers.integrations.flex_attention")
    build = getattr(module, "make_flex_block_causal_mask", None)
    if build is None:
        return Attempt("make_flex_block_causal_mask", Outcome.NOT_RUN, "not in this release")
    takes_lengths = "key_length" in inspect.signature(build).parameters
    lengths: dict[str, Any] = {"query_length": SEQ_LEN, "key_length": None} if takes_lengths else {}
    arguments = ", ".join(["mask_2d", *(f"{name}={value}" for name, value in lengths.items())])

    def call() -> str:
        mask = build(torch.ones(1, SEQ_LEN, dtype=torch.long), **lengths)
        return f"returned a {type(mask).__name__} of shape {tuple(mask.shape)}"

    return attempt(f"make_flex_block_causal_mask({arguments})", call, is_pad_none)


def generate_attempt(transformers: Any) -> Attempt:
    import torch

    def generate() -> str:
        model = tiny_model(transformers, "LlamaConfig", "LlamaForCausalLM")
        prompt = torch.arange(3, 3 + SEQ_LEN)[None]
        with torch.no_grad():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                past_key_values=transformers.DynamicCache(),
                max_new_tokens=2,
                min_new_tokens=2,
                do_sample=False,
            )
        return f"completed, {out.shape[-1] - SEQ_LEN} new tokens"

    return attempt("one-layer Llama generate() with a DynamicCache", generate, is_pad_none)
