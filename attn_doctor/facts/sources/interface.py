"""What a pin-file format module provides (SOURCES in facts/sources/__init__.py), so mypy checks a
new one: whether it reads a file, and the facts it states."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from attn_doctor.facts.sources.common import Declared


class PinFileFormat(Protocol):
    def recognises(self, path: Path, text: str) -> bool:
        """Whether this format reads ``path`` (its name, or its first lines)."""
        ...

    def read(
        self, path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()
    ) -> Declared:
        """The packages the file installs for a target of ``markers``; ``extras``: the optional
        extras asked for (``--extra``), which a format without them ignores."""
        ...
