"""A guard (the condition the catalogue read around a raise) in plain words, and what kind of
cause it makes: a check of the caller's arguments is a user error, a check of what is installed an
install problem, anything else the release's own behaviour."""

from __future__ import annotations

import re

from attn_doctor.releases.messages import Message

MAX_CONDITION = 240
# operands that are the caller's arguments or tensors
_ARGUMENTS = re.compile(
    # a tensor's properties, as any name holds them: torch_dtype, q_dtype, head_size_og, attn_mask_
    r"\b\w*(?:dtype|device|shape|ndim|stride|contiguous|head_?dim|head_size|headdim|num_heads|nheads|"
    r"seqlen|seq_len|batch_size|attn_mask|attention_mask|block_mask|requires_grad|is_causal|"
    r"softmax_scale|window_size|softcap|enable_gqa|numel|backend|attn_implementation|"
    r"kernel_options)\w*\b|"
    r"\b(?:layout|scale|query|key|value)\b|"  # these only as whole names
    r"\.(?:size|dim|stride|is_contiguous)\("
)
# operands that are the installation: a package, a version, a build
_INSTALL = re.compile(
    r"is_\w+_available|__version__|\bversion\b|importlib|find_spec|not installed|No module named|"
    r"pip install|please install|compiled with|built with|CUDA_HOME|nvcc",
    re.IGNORECASE,
)
_EXPECTS = re.compile(
    r"\b(must|expected|expects|should|only|needs? to|has to|is not supported|not supported)\b",
    re.IGNORECASE,
)


def kind_of(message: Message) -> str:
    """ "install", "usage" or "release" (guards.KINDS in interface)."""
    if _INSTALL.search(message.guard) or _INSTALL.search(message.template):
        return "install"
    if _ARGUMENTS.search(message.guard) or (
        _EXPECTS.search(message.template) and _ARGUMENTS.search(message.template.lower())
    ):
        return "usage"
    return "release"


def plain(guard: str) -> str:
    """``not (torch_dtype is None) and torch_dtype not in [torch.float16, torch.bfloat16]`` as
    "torch_dtype is set, and torch_dtype is not one of [torch.float16, torch.bfloat16]"."""
    if not guard.strip():
        return ""
    words = [_conjunct(part.strip()) for part in _top_level_and(_unwrap(guard.strip()))]
    text = ", and ".join(dict.fromkeys(word for word in words if word))
    return text if len(text) <= MAX_CONDITION else text[: MAX_CONDITION - 1] + "…"


# (a comparison's shape, its words), first match wins; NEGATED for a part under `not` or `!`
def _compiled(*phrases: tuple[str, str]) -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(shape), words) for shape, words in phrases)


_PHRASES = _compiled(
    (r"(.+?) is not None", "{} is set"),
    (r"(.+?) is None", "{} is not set"),
    (r"(.+?) not in (.+)", "{} is not one of {}"),
    (r"(.+?) in (.+)", "{} is one of {}"),
    (r"(.+?) != (.+)", "{} is not {}"),
    (r"(.+?) == (.+)", "{} is {}"),
)
_NEGATED = _compiled(
    (r"(.+?) is None", "{} is set"),
    (r"([\w.]+(?:\([^()]*\))?)", "{} is false"),
    (r"(.+?) (?:is|==) (.+)", "{} is not {}"),
    (r"(.+)", "not ({})"),
)


def _conjunct(part: str) -> str:
    part = _unwrap(part)
    phrases = _PHRASES
    if part.startswith(("not ", "!")):  # Python's and C++'s negation
        part, phrases = _unwrap(part.removeprefix("not ").removeprefix("!").strip()), _NEGATED
    for shape, words in phrases:
        if found := shape.fullmatch(part):
            return words.format(*found.groups())
    return part


def _unwrap(part: str) -> str:
    """``(a and b)`` less its outer parentheses, where they enclose the whole."""
    while part.startswith("(") and part.endswith(")") and _closes_at_end(part):
        part = part[1:-1].strip()
    return part


def _closes_at_end(part: str) -> bool:
    depth = 0
    for index, char in enumerate(part):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and index < len(part) - 1:
            return False
    return True


def _top_level_and(guard: str) -> list[str]:
    """The guard split at ``and`` outside brackets and strings."""
    parts, depth, start, quote = [], 0, 0, ""
    index = 0
    while index < len(guard):
        char = guard[index]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and guard.startswith(" and ", index):
            parts.append(guard[start:index])
            start = index + 5
            index += 4
        index += 1
    parts.append(guard[start:])
    return parts
