"""pylock.toml (PEP 751): ``[[packages]]`` tables, each with an optional ``marker``."""

from __future__ import annotations

import re
from pathlib import Path

from attn_doctor.facts.sources.common import Declared
from attn_doctor.facts.sources.toml_lock import any_marker, read_entries

_NAME = re.compile(r"^pylock\.([^.]+\.)?toml$")  # pylock.toml, pylock.NAME.toml


def recognises(path: Path, text: str) -> bool:
    return bool(_NAME.match(path.name))


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    return read_entries(path, text, markers, "packages", lambda entry: any_marker(entry.get("marker")))
