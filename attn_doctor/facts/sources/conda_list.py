"""``conda list --export`` (``name=version=build`` lines) and ``conda list --explicit`` (package
URLs after ``@EXPLICIT``): an installed conda environment written down, with its build strings."""

from __future__ import annotations

import re
from pathlib import Path

from attn_doctor.facts.sources.common import Declared
from attn_doctor.facts.sources.conda_names import add_spec

_EXPORT_LINE = re.compile(r"^[A-Za-z0-9_.-]+=[^=\s]+=\S+$")
# https://conda.anaconda.org/pytorch/linux-64/pytorch-2.5.1-py3.11_cuda12.1_cudnn9.1.0_0.tar.bz2
_ARCHIVE = re.compile(
    r"/(?P<name>[A-Za-z0-9_.-]+?)-(?P<version>[0-9][^-/]*)-(?P<build>[^-/]+)\.(?:tar\.bz2|conda)$"
)


def recognises(path: Path, text: str) -> bool:
    lines = [line for line in text.splitlines()[:50] if line.strip() and not line.startswith("#")]
    return "@EXPLICIT" in text[:4096] or (bool(lines) and all(_EXPORT_LINE.match(line) for line in lines))


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    declared = Declared()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", "@")):
            continue
        if archive := _ARCHIVE.search(line.split("#", 1)[0][:2000]):
            add_spec(
                f"{archive['name']}={archive['version']}={archive['build']}", f"{path}:{number}", declared
            )
        else:
            add_spec(line, f"{path}:{number}", declared)
    return declared
