"""kernels (Hugging Face's hub kernels loader): every release's kernels/**.py.

From 0.17 the wheel also carries compiled Rust (kernels/_rust.abi3.so); its messages are not read,
and each release that has it says so in ``unread``.
"""

from __future__ import annotations

from tools.messages.sources.archives import ArchiveTrees

KERNELS = ArchiveTrees(
    "kernels",
    "kernels",
    ("kernels/**.py",),
    exclude=("kernels/benchmarks/**", "kernels/benchmark*.py"),
    binaries=("kernels/*.so",),
)
