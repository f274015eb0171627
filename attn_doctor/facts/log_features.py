"""Features a log proves in use: the calls its traceback shows, what it builds, the kernels it names.

A traceback frame (``File ".../flash_attn_interface.py", line 1124, in flash_attn_varlen_func``)
or the code line under it (``    F.scaled_dot_product_attention(q, k, k)``) is evidence that the
run used that feature, as a pinned version in a freeze block is evidence of a version: such a
feature is in use "from the log, line N". A log that shows no such call proves nothing: the
feature stays unknown, never "not in use". The model families a log shows are found apart, in
every block (facts/model_families.py ``families_in``): a traceback sits at the end of a long log.
"""

from __future__ import annotations

# (what a frame or code line holds, the feature it proves); only traceback lines are read
CALLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("scaled_dot_product_attention", ("sdpa",)),
    ("sdpa_attention_forward", ("sdpa",)),
    ("flex_attention", ("flex_attention",)),
    ("flash_attn_varlen", ("flash_attention_2", "packed_sequences", "varlen")),
    ("flash_attn_func", ("flash_attention_2",)),
    ("_flash_attention_forward", ("flash_attention_2",)),
    ("memory_efficient_attention", ("xformers",)),
    ("torch/_inductor/", ("torch_compile",)),
    ("torch/_dynamo/", ("torch_compile",)),
    ("generation/utils.py", ("generate",)),
    (".generate(", ("generate",)),
    (".backward(", ("backward",)),
    ("in backward", ("backward",)),
    ("in _engine_run_backward", ("backward",)),
)
# (what a build or compiler line holds, the features it proves): nvcc compiling flash-attention's
# hopper/ is an FA3 source build, whatever the project folder holds
BUILDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("building 'flash_attn_3_cuda' extension", ("source_build", "flash_attention_3")),
    ("building 'flash_attn_2_cuda' extension", ("source_build", "flash_attention_2")),
    ("hopper/flash_", ("source_build", "flash_attention_3")),
    ("hopper/instantiations/", ("source_build", "flash_attention_3")),
    ("csrc/flash_attn/src/", ("source_build", "flash_attention_2")),
)
_BUILD_LINE = ("nvcc", "error:", "building '", "FAILED:", "error detected in the compilation")
# (a kernel or exception name, the features it proves): generated kernels name what they run, and
# only the compiler raises its own exceptions
KERNELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("triton_tem_fused_flex_attention", ("flex_attention", "torch_compile")),
    ("triton_tem_fused_", ("torch_compile",)),
    ("torch._inductor.exc.", ("torch_compile",)),
    ("torch._dynamo.exc.", ("torch_compile",)),
    ("InductorError", ("torch_compile",)),
    ("BackendCompilerFailed", ("torch_compile",)),
)
LITERALS = (
    *(text.encode() for table in (CALLS, BUILDS, KERNELS) for text, _ in table),
    b"_inductor",  # Windows frames: torch\_inductor\
    b"_dynamo",
)


def features_of(line: str) -> tuple[str, ...]:
    """The features one log line proves: a traceback frame (``File "..."``) or indented code line
    calling them, a build line compiling them, or a kernel named after them."""
    line = line.replace("\\\\", "/").replace("\\", "/")  # Windows paths, escaped or not
    found = [feature for name, features in KERNELS if name in line for feature in features]
    if any(mark in line for mark in _BUILD_LINE):
        found += [feature for path, features in BUILDS if path in line for feature in features]
    if line.lstrip().startswith('File "') or line.startswith("    "):
        found += [feature for call, features in CALLS if call in line for feature in features]
    return tuple(dict.fromkeys(found))


# the words that show a package is part of the story: its import and distribution names, and the
# names its messages and kernels use (a rule about a package the log never names is not the answer)
MENTIONS: dict[str, tuple[bytes, ...]] = {
    "flash-attn": (
        b"flash_attn",
        b"flash-attn",
        b"flash-attention",
        b"FlashAttention",
        b"Flash Attention",
        b"flash_fwd",
        b"flash_bwd",
    ),
    "flash-attn-3": (
        b"flash_attn_3",
        b"flash_attn_interface",
        b"hopper",
        b"FlashAttention3",
        b"FlashAttention-3",
        b"flash-attn-3",
        b"FA3",
        b"fa3",
    ),
    "flash-linear-attention": (
        b"fla.",
        b"fla/",
        b"fla\\",
        b"fla-core",
        b"flash-linear-attention",
        b"flash_linear_attention",
        b"import fla",
    ),
    "xformers": (b"xformers", b"xFormers", b"XFormers"),
    "transformers": (b"transformers",),
    "triton": (b"triton", b"Triton", b"TRITON"),
}


def mentioned_in(text: bytes) -> set[str]:
    """The packages whose names ``text`` holds (substring search, C speed)."""
    return {package for package, names in MENTIONS.items() if any(name in text for name in names)}
