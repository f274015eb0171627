"""Pipfile.lock (pipenv): JSON whose ``default`` section maps each package to ``{"version":
"==X", "markers": ...}``. ``develop`` (test and lint tools) is not the deployed stack."""

from __future__ import annotations

import json
import re
from pathlib import Path

from attn_doctor.errors import InputError
from attn_doctor.facts.sources.common import Declared, applies
from attn_doctor.inputs import parse_json

_KEY_LINE = re.compile(r'^\s*"(?P<name>[^"]+)"\s*:\s*\{')


def recognises(path: Path, text: str) -> bool:
    return path.name == "Pipfile.lock"


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    data = parse_json(text, str(path))
    section = data.get("default", {}) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise InputError(f"{path} default", "must be an object of packages")
    lines = _key_lines(text)
    declared = Declared()
    for name, entry in section.items():
        origin = f"{path}:{lines.get(name, 1)}"
        if not isinstance(entry, dict):
            raise InputError(origin, f"{json.dumps(name)} must be an object")
        version = entry.get("version")
        pinned = version[2:] if isinstance(version, str) and version.startswith("==") else None
        marker = entry.get("markers")
        if applies(marker if isinstance(marker, str) else None, markers, origin):
            declared.add(name, pinned, origin)
    return declared


def _key_lines(text: str) -> dict[str, int]:
    """The line of each ``"name": {`` (the first one: ``default`` comes before ``develop``)."""
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if match := _KEY_LINE.match(line):
            lines.setdefault(match["name"], number)
    return lines
