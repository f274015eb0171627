"""poetry.lock: ``[[package]]`` tables; a package locked twice for different environments carries
``markers``, and the target's marker picks one."""

from __future__ import annotations

from pathlib import Path

from attn_doctor.facts.sources.common import Declared
from attn_doctor.facts.sources.toml_lock import any_marker, read_entries


def recognises(path: Path, text: str) -> bool:
    return path.name == "poetry.lock"


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    return read_entries(path, text, markers, "package", lambda entry: any_marker(entry.get("markers")))
