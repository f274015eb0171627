"""The shape uv.lock, poetry.lock and pylock.toml share: an array of tables, one per locked
package, each with a name, a version and, where one lock holds several resolutions, the markers
that choose between them. Lines are found in the text, so each fact says where the lock pins it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attn_doctor.errors import InputError
from attn_doctor.facts.sources.common import Declared, applies
from attn_doctor.inputs import parse_toml

_NAME_LINE = re.compile(r'^\s*name\s*=\s*"')


def read_entries(
    path: Path,
    text: str,
    markers: dict[str, str],
    array: str,
    marker_of: Callable[[dict[str, Any]], str | None],
    wheel_of: Callable[[dict[str, Any]], str | None] = lambda entry: None,
) -> Declared:
    """Every entry of ``[[array]]`` whose marker holds for the target, as packages; ``wheel_of``
    names the prebuilt wheel an entry installs, where the lock says it is one."""
    data = parse_toml(text, str(path))
    entries = data.get(array, [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise InputError(f"{path} {array}", "must be an array of tables")
    lines = name_lines(text, array)
    declared = Declared()
    for index, entry in enumerate(entries):
        line = lines[index] if index < len(lines) else 1
        origin = f"{path}:{line}"
        name, version = entry.get("name"), entry.get("version")
        if not isinstance(name, str) or not (version is None or isinstance(version, str)):
            raise InputError(origin, f"a {array} entry needs a string name and version")
        if applies(marker_of(entry), markers, origin):
            declared.add(name, version, origin, wheel=wheel_of(entry))
    return declared


def any_marker(markers: Any) -> str | None:
    """uv's resolution-markers (a list: any of them) as one marker."""
    if isinstance(markers, list) and markers and all(isinstance(m, str) for m in markers):
        return " or ".join(f"({marker})" for marker in markers)
    return markers if isinstance(markers, str) else None


def name_lines(text: str, array: str) -> list[int]:
    """For each ``[[array]]`` header in order, the line of its ``name =`` (or the header's own)."""
    header = f"[[{array}]]"
    found: list[int] = []
    in_entry = False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("["):
            in_entry = stripped == header
            if in_entry:
                found.append(number)
        elif in_entry and _NAME_LINE.match(line) and found:
            found[-1] = number
            in_entry = False
    return found
