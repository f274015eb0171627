"""Features a log proves in use: the calls its traceback shows.

A traceback frame (``File ".../flash_attn_interface.py", line 1124, in flash_attn_varlen_func``)
or the code line under it (``    F.scaled_dot_product_attention(q, k, k)``) is evidence that the
run used that feature, as a pinned version in a freeze block is evidence of a version: such a
feature is in use "from the log, line N". A log that shows no such call proves nothing: the
feature stays unknown, never "not in use".
"""

from __future__ import annotations

# (what a frame or code line holds, the feature it proves); only traceback lines are read
CALLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("scaled_dot_product_attention", ("sdpa",)),
    ("sdpa_attention_forward", ("sdpa",)),
    ("flex_attention", ("flex_attention",)),
    ("flash_attn_varlen", ("flash_attention_2", "packed_sequences")),
    ("flash_attn_func", ("flash_attention_2",)),
    ("_flash_attention_forward", ("flash_attention_2",)),
    ("memory_efficient_attention", ("xformers",)),
    ("torch/_inductor/", ("torch_compile",)),
    ("torch/_dynamo/", ("torch_compile",)),
    ("generation/utils.py", ("generate",)),
    (".generate(", ("generate",)),
)
LITERALS = tuple(call.encode() for call, _ in CALLS)


def features_of(line: str) -> tuple[str, ...]:
    """The features a traceback line proves: a frame (``File "..."``) or an indented code line."""
    if not (line.lstrip().startswith('File "') or line.startswith("    ")):
        return ()
    return tuple(feature for call, features in CALLS if call in line for feature in features)
