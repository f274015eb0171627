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
    classes: str  # its classes' prefix in transformers: Gemma2 of Gemma2ForCausalLM
    checkpoints: str = ""  # a regex of its checkpoints' Hub names, matched ignoring case
    named: str = ""  # lower-case text every checkpoint name holds: the scan's substring test
    model_types: tuple[str, ...] = ()  # config.json's model_type besides the family's own name


# The class names and model types are those of the transformers 5.3.0 wheel (models/<family>/);
# the checkpoint names are the families' official Hub repositories (meta-llama/Llama-3.1-8B,
# google/gemma-2-9b, Qwen/Qwen2.5-7B-Instruct, ...). A name that could be two families (Qwen2-57B-A14B
# is Qwen2-MoE, Llama-3.2-11B-Vision is Mllama) is left to the class names and configs.
MODEL_FAMILIES: dict[str, Family] = {
    "gemma": Family("Gemma", r"\b(?:code)?gemma-(?:1\.1-)?[27]b", "gemma-"),
    "gemma2": Family("Gemma2", r"gemma[-_]?2\b", "gemma"),
    "gemma3": Family("Gemma3", r"gemma[-_]?3\b", "gemma", ("gemma3_text",)),
    "glm4v": Family("Glm4v"),
    "jamba": Family("Jamba", r"\bJamba-(?:v0\.1|1\.5)", "jamba-"),
    "llama": Family(
        "Llama", r"\b(?:Meta-)?Llama-(?:2|3(?:\.[0-9])?)-[0-9.]+b(?!-vision)|\bCodeLlama-[0-9]", "llama-"
    ),
    "llama4": Family("Llama4", r"\bLlama-4-", "llama-4-"),
    "mistral": Family("Mistral", r"\bMistral-(?:7b|Nemo-|Large-|Small-24b)|\bMinistral-8b", "istral-"),
    "mixtral": Family("Mixtral", r"\bMixtral-8x", "mixtral-8x"),
    "phi3": Family("Phi3", r"\bPhi-3(?:\.5)?-(?:mini|medium)\b", "phi-3"),
    "qwen2": Family("Qwen2", r"\bQwen(?:1\.5|2|2\.5)-(?:Coder-|Math-)?[0-9.]+b(?!-a[0-9])", "qwen"),
    "qwen2_5_omni": Family("Qwen2_5Omni", r"\bQwen2\.5-Omni-", "qwen2.5-omni-"),
    "qwen2_5_vl": Family("Qwen2_5_VL", r"\bQwen2\.5-VL-", "qwen2.5-vl-"),
    "qwen2_moe": Family("Qwen2Moe", r"\bQwen1\.5-MoE-|\bQwen2-57b-a14b", "qwen"),
    "qwen2_vl": Family("Qwen2VL", r"\bQwen2-VL-", "qwen2-vl-"),
    "qwen3": Family("Qwen3", r"\bQwen3-[0-9.]+b(?!-a[0-9])", "qwen3-"),
    "qwen3_moe": Family("Qwen3Moe", r"\bQwen3-[0-9.]+b-a[0-9]", "qwen3-"),
    "starcoder2": Family("Starcoder2", r"\bstarcoder2-[0-9]", "starcoder2-"),
}
# what follows a family's prefix in the names of its classes
_CLASSES = (
    r"(?:ForCausalLM|ForConditionalGeneration|ThinkerForConditionalGeneration|ForSequenceClassification"
    r"|ForTokenClassification|ForQuestionAnswering|Model|TextModel|PreTrainedModel|Config|Attention"
    r"|FlashAttention2|DecoderLayer)"
)
_MODEL_TYPE = r"""model_type\\?["']?\s*[:=]\s*\\?["']?"""


def family_signals(name: str) -> Iterator[tuple[str, bytes, bool]]:
    """The scan's tests for one family, each (a literal every match holds, the regex, whether the
    literal is lower-case and sought in the lower-cased text): a class, a config's ``model_type``,
    a checkpoint's name."""
    family = MODEL_FAMILIES[name]
    yield family.classes, rf"\b{family.classes}{_CLASSES}\b".encode(), False
    types = "|".join(re.escape(model_type) for model_type in (name, *family.model_types))
    yield "model_type", rf"{_MODEL_TYPE}(?:{types})(?![\w-])".encode(), False
    if family.checkpoints:
        yield family.named, rf"(?i:{family.checkpoints})".encode(), True


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
