"""flash-linear-attention (import name ``fla``): every release's fla/** from 0.1.

At 0.3.2 the package split in two: flash-linear-attention keeps fla/layers and fla/models and
fla-core carries the kernels (fla/ops, fla/modules, fla/utils); a release from 0.3.2 on is the
union of both distributions of the same version. Pure-Python wheels.
"""

from __future__ import annotations

from tools.messages.sources.archives import ArchiveTrees

FLA = ArchiveTrees(
    "flash-linear-attention",
    "fla",
    ("fla/**.py",),
    floor="0.1",
    also=(("fla-core", "0.3.2"),),
)
