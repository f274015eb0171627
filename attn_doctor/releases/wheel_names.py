"""The exact file name and URL of a flash-attn release's prebuilt wheel for a target.

The same name setup.py's get_wheel_url() computes at install time, from the scheme each tag uses
(snapshot/flash-attn-wheel-names.json, written by ``python -m tools.flash_attn_wheel_names``): the
CUDA part is torch's CUDA major (v2.7.0 on), or major and minor of the CUDA the tag forces for
that major (11.8, 12.2 or 12.3), else of torch's own (v2.1-v2.2).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from attn_doctor.releases.facts import SNAPSHOT

NAMES = SNAPSHOT / "flash-attn-wheel-names.json"


@dataclass(frozen=True)
class WheelFile:
    name: str  # flash_attn-2.8.3+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl
    url: str  # the GitHub release asset

    def pip_command(self) -> str:
        return f"pip install '{self.url}'"


@functools.lru_cache(maxsize=1)
def _schemes() -> dict[str, Any]:
    releases: dict[str, Any] = json.loads(NAMES.read_text(encoding="utf-8"))["releases"]
    return releases


def flash_attn_wheel(
    version: str, torch: str, cuda: str, python: str, cxx11_abi: bool, platform: str = "linux_x86_64"
) -> WheelFile | None:
    """``torch`` and ``python`` as major.minor ("2.6", "3.11"), ``cuda`` torch's CUDA ("12.4").
    None for a release whose setup.py downloads no wheel (or that the snapshot does not know)."""
    scheme = _schemes().get(version)
    if scheme is None:
        return None
    major, _, minor = cuda.partition(".")
    if scheme["cuda"] == "major":
        cuda_part = major
    else:
        cuda_part = scheme["cuda_forced"].get(major, f"{major}.{minor.split('.')[0]}").replace(".", "")
    py = "cp" + python.replace(".", "")
    name = (
        f"flash_attn-{version}+cu{cuda_part}torch{torch}cxx11abi{str(cxx11_abi).upper()}"
        f"-{py}-{py}-{platform}.whl"
    )
    return WheelFile(name, scheme["url"].format(tag_name=scheme["tag"], wheel_name=name))
