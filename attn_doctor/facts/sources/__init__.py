"""Declared targets: the files a project pins its stack in. Each format is one module with two
functions, ``recognises(path, text)`` and ``read(path, text, markers, extras) -> Declared``
(interface.PinFileFormat); they all build
the same facts (packages with FILE:LINE origins; conda's CUDA and Python), which
facts/assemble.py lays over the target like any other input. Adding a format is adding a module to
SOURCES, before ``requirements`` (the format of last resort).

Markers are evaluated for the target (its platform and Python, ``marker_environment``), so a lock
with several resolutions gives the target's.
"""

from __future__ import annotations

from pathlib import Path

from attn_doctor.facts.sources import (
    conda_env,
    conda_list,
    dockerfile,
    pipfile_lock,
    poetry_lock,
    pylock,
    pyproject,
    requirements,
    setup_py,
    uv_lock,
)
from attn_doctor.facts.sources.common import Declared
from attn_doctor.facts.sources.interface import PinFileFormat
from attn_doctor.inputs import read_text

SOURCES: tuple[PinFileFormat, ...] = (
    dockerfile,
    uv_lock,
    poetry_lock,
    pylock,
    pipfile_lock,
    pyproject,
    setup_py,
    conda_env,
    conda_list,
    requirements,
)


def read_declared(
    path: Path, markers: dict[str, str], option: str = "-r", extras: frozenset[str] = frozenset()
) -> Declared:
    """The facts a pin file states, with the optional ``extras`` asked for; errors name ``option
    PATH`` for the file, FILE:LINE inside it."""
    text = read_text(path, f"{option} {path}")
    source = next(source for source in SOURCES if source.recognises(path, text))
    return source.read(path, text, markers, extras)


def read_dockerfile(path: Path, markers: dict[str, str], stage: str | None) -> Declared:
    """``--dockerfile PATH [--stage NAME]``: the stage's image with its installs laid over it."""
    return dockerfile.read(path, read_text(path, f"--dockerfile {path}"), markers, stage=stage)


def read_image(reference: str) -> Declared:
    """``--image REF``: what a known image ships."""
    from attn_doctor.facts.images import image_facts
    from attn_doctor.releases.facts import snapshot

    return image_facts(reference, snapshot(), f"--image {reference}")
