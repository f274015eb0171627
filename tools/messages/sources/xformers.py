"""xformers: the Linux wheel of each release from 0.0.22, its memory-efficient attention
(xformers/ops/fmha/**, the dispatcher's "No operator found" reports), the operator loader
(xformers/ops/common.py) and the C++ library check that prints "xFormers was built for:" at import
(xformers/_cpp_lib.py, xformers/__init__.py). Wheels are manylinux2014 to 0.0.28 and manylinux_2_28
after. The compiled operators (xformers/_C.so) are not read: each release says so in ``unread``.
"""

from __future__ import annotations

from tools.messages.sources.archives import ArchiveTrees

XFORMERS = ArchiveTrees(
    "xformers",
    "xformers",
    (
        "xformers/__init__.py",
        "xformers/_cpp_lib.py",
        "xformers/ops/__init__.py",
        "xformers/ops/common.py",
        "xformers/ops/fmha/**.py",
    ),
    floor="0.0.22",  # September 2023
    binaries=("xformers/_C*.so",),
)
