"""Model families: which transformers models the user's code runs.

Many transformers bugs live in one family's modeling code (Gemma-2's generate with FA2 in 4.44.0),
so a rule about them holds only for a project that runs that family: ``models = ["gemma2"]`` in a
rule's ``[affects]``. A family is named as transformers names it, by its ``model_type``: the folder
of its code (``transformers/models/gemma2/``).

The project scan (facts/project_scan.py) knows a family by its class names (``Gemma2ForCausalLM``,
``Gemma2Config``), by its ``model_type`` in a config (``"model_type": "gemma2"``), or by the Hub
names of its checkpoints (``google/gemma-2-9b``); a log by a path in its modeling code (a traceback frame,
facts/log_facts.py). A project that shows no family leaves a rule that needs one unknown ("applies
if you use a gemma2 model"); a project that shows only other families is not affected.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    literal: str  # every match of the family's signal contains it (the scan's substring test)
    classes: str  # its class-name prefix in transformers: Gemma2 of Gemma2ForCausalLM (a regex)
    checkpoints: str = ""  # a regex of its checkpoints' Hub names, matched ignoring case
    model_types: tuple[str, ...] = ()  # config.json's model_type besides the family's own name


# The class names and model types are those of the transformers 5.3.0 wheel (models/<family>/);
# the checkpoint names are the families' official Hub repositories (meta-llama/Llama-3.1-8B,
# google/gemma-2-9b, Qwen/Qwen2.5-7B-Instruct, ...). A name that could be two families (Qwen2-57B-A14B
# is Qwen2-MoE, Llama-3.2-11B-Vision is Mllama) is left to the class names and configs.
MODEL_FAMILIES: dict[str, Family] = {
    "gemma": Family("emma", "Gemma", r"\b(?:code)?gemma-(?:1\.1-)?[27]b"),
    "gemma2": Family("emma", "Gemma2", r"gemma[-_]?2\b"),
    "gemma3": Family("emma", "Gemma3", r"gemma[-_]?3\b", ("gemma3_text",)),
    "glm4v": Family("lm4v", "Glm4v"),
    "jamba": Family("amba", "Jamba", r"\bJamba-(?:v0\.1|1\.5)"),
    "llama": Family(
        "lama", "Llama", r"\b(?:Meta-)?Llama-(?:2|3(?:\.[0-9])?)-[0-9.]+b(?!-vision)|\bCodeLlama-[0-9]"
    ),
    "llama4": Family("lama", "Llama4", r"\bLlama-4-"),
    "mistral": Family("istral", "Mistral", r"\bMistral-(?:7b|Nemo-|Large-|Small-24b)|\bMinistral-8b"),
    "mixtral": Family("ixtral", "Mixtral", r"\bMixtral-8x"),
    "phi3": Family("hi", "Phi3", r"\bPhi-3(?:\.5)?-(?:mini|medium)\b"),
    "qwen2": Family("wen", "Qwen2", r"\bQwen(?:1\.5|2|2\.5)-(?:Coder-|Math-)?[0-9.]+b(?!-a[0-9])"),
    "qwen2_5_omni": Family("wen", "Qwen2_5Omni(?:Thinker)?", r"\bQwen2\.5-Omni-"),
    "qwen2_5_vl": Family("wen", "Qwen2_5_VL", r"\bQwen2\.5-VL-"),
    "qwen2_moe": Family("wen", "Qwen2Moe", r"\bQwen1\.5-MoE-|\bQwen2-57b-a14b"),
    "qwen2_vl": Family("wen", "Qwen2VL", r"\bQwen2-VL-"),
    "qwen3": Family("wen", "Qwen3", r"\bQwen3-[0-9.]+b(?!-a[0-9])"),
    "qwen3_moe": Family("wen", "Qwen3Moe", r"\bQwen3-[0-9.]+b-a[0-9]"),
    "starcoder2": Family("tarcoder2", "Starcoder2", r"\bstarcoder2-[0-9]"),
}
# what follows a family's prefix in the names of its classes
_CLASSES = (
    r"(?:ForCausalLM|ForConditionalGeneration|ForSequenceClassification|ForTokenClassification"
    r"|ForQuestionAnswering|Model|TextModel|PreTrainedModel|Config|Attention|FlashAttention2|DecoderLayer)"
)
_MODEL_TYPE = r"""model_type\\?["']?\s*[:=]\s*\\?["']?"""


def family_pattern(name: str) -> bytes:
    """The scan's regex for one family: a class, a config's ``model_type``, or a checkpoint's name."""
    family = MODEL_FAMILIES[name]
    types = "|".join(re.escape(model_type) for model_type in (name, *family.model_types))
    ways = [rf"\b{family.classes}{_CLASSES}\b", rf"{_MODEL_TYPE}(?:{types})(?![\w-])"]
    if family.checkpoints:
        ways.append(rf"(?i:{family.checkpoints})")
    return "|".join(ways).encode()


def model_phrase(families: tuple[str, ...]) -> str:
    """``a gemma2 model``, ``a mistral, mixtral or qwen2 model``: what a rule needs, in words."""
    named = families[0] if len(families) == 1 else f"{', '.join(families[:-1])} or {families[-1]}"
    return f"a {named} model"


# a path in a family's modeling code: a traceback frame, a warning's location
_MODELING_PATH = re.compile(rb"transformers[/\\]+models[/\\]+([a-z0-9_]+)[/\\]+modeling_\1\.py")


def families_in(text: bytes) -> Iterator[tuple[str, int]]:
    """The families whose modeling code ``text`` (a log's lines) names, with each one's offset:
    the run went through that code (``.../transformers/models/gemma2/modeling_gemma2.py``)."""
    if b"modeling_" not in text:
        return
    for found in _MODELING_PATH.finditer(text):
        name = found[1].decode()
        if name in MODEL_FAMILIES:
            yield name, found.start()
