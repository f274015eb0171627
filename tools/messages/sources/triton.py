"""triton (its Python): the Linux wheel of each release from 2.1 (150-400 MB each; only the .py
files of the compiler, runtime, language and the backends' drivers are kept).

triton has no sdist on the registry; its wheels are manylinux2014 to 3.2 and manylinux_2_27/2_28
from 3.3. The compiled parts (libtriton, ptxas, the MLIR passes' C++ diagnostics) are not read:
each release says so in ``unread``.
"""

from __future__ import annotations

from tools.messages.sources.archives import ArchiveTrees

TRITON = ArchiveTrees(
    "triton",
    "triton",
    (
        "triton/*.py",  # errors.py, testing.py, knobs.py, _utils.py ...
        "triton/compiler/**.py",
        "triton/runtime/**.py",  # OutOfResources, the autotuner, the JIT, the driver loader
        "triton/language/**.py",
        "triton/backends/*.py",
        "triton/backends/nvidia/*.py",
        "triton/backends/amd/*.py",
        "triton/common/*.py",  # 2.1's backend and build helpers
        "triton/ops/**.py",  # triton.ops (flash attention, matmul) until 3.0
    ),
    floor="2.1.0",  # September 2023
    platforms=("manylinux2014_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64"),
    binaries=("triton/_C/libtriton*.so",),
)
