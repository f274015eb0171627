"""pyproject.toml: what installing the project installs: ``[project] dependencies``, the default
``[dependency-groups]`` (uv's: ``dev``, or ``[tool.uv] default-groups``) and the optional extras
asked for (``--extra``; an extra is installed only when asked). Ranges there say what may be
installed, not what is: a package declared with a range has an unknown version, unless a lock
beside the file (uv.lock, poetry.lock, pylock.toml) pins it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from attn_doctor.errors import InputError
from attn_doctor.facts.names import installed_name
from attn_doctor.facts.sources import poetry_lock, pylock, uv_lock
from attn_doctor.facts.sources.common import Declared, applies, exact_version, requirement, wheel_file
from attn_doctor.inputs import parse_toml, read_text

_QUOTED = re.compile(r'"([^"\n]*)"|\'([^\'\n]*)\'')
_LOCKS = (("uv.lock", uv_lock), ("poetry.lock", poetry_lock), ("pylock.toml", pylock))


def recognises(path: Path, text: str) -> bool:
    return path.name == "pyproject.toml"


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    data = parse_toml(text, str(path))
    project = data.get("project", {})
    groups = data.get("dependency-groups", {})
    if not isinstance(project, dict) or not isinstance(groups, dict):
        raise InputError(str(path), "[project] and [dependency-groups] must be tables")
    optional = project.get("optional-dependencies", {})
    if not isinstance(optional, dict):
        raise InputError(f"{path} [project.optional-dependencies]", "must be a table")
    default_groups = uv_lock.default_groups(data)
    lists = [
        project.get("dependencies", []),
        *(entries for name, entries in optional.items() if name in extras),
        *(entries for name, entries in groups.items() if name in default_groups),
    ]
    declared = Declared(extras={str(name) for name in optional})
    for lock_name, lock in _LOCKS:  # a lock beside it pins what the ranges leave open
        beside = path.parent / lock_name
        if beside.exists():
            declared.merge(lock.read(beside, read_text(beside), markers, extras))
            break
    lines = _string_lines(text)
    for extra, entries in optional.items():  # an extra not asked for: its packages may be there
        if extra not in extras:
            for entry in _strings(entries, path):
                origin = f"{path}:{lines.get(entry, 1)}"
                name = installed_name(requirement(entry, origin).name, None)
                declared.optional.setdefault(name, f"the extra {extra!r} ({origin}; --extra {extra})")
    for entries in lists:
        for entry in _strings(entries, path):
            origin = f"{path}:{lines.get(entry, 1)}"
            req = requirement(entry, origin)
            if applies(str(req.marker) if req.marker else None, markers, origin):
                wheel = wheel_file(req.url) if req.url else None
                version = _wheel_version(wheel) if wheel else exact_version(req)
                spec = None if req.url else str(req.specifier)
                declared.add(req.name, version, origin, specifier=spec, wheel=wheel)
    return declared


def _strings(entries: Any, path: Path) -> list[str]:
    """The requirement strings of a list; ``{include-group = ...}`` tables name other groups."""
    if not isinstance(entries, list):
        raise InputError(str(path), "dependency lists must be arrays")
    return [entry for entry in entries if isinstance(entry, str)]


def _string_lines(text: str) -> dict[str, int]:
    """The first line of each quoted string in the file (one pass: the lines requirements sit on)."""
    found: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        for double, single in _QUOTED.findall(line):
            found.setdefault(double or single, number)
    return found


def _wheel_version(wheel: str) -> str | None:
    """``name @ URL.whl``: the version its file name states."""
    from packaging.utils import parse_wheel_filename

    try:
        return str(parse_wheel_filename(wheel)[1])
    except ValueError:  # InvalidWheelFilename, InvalidVersion
        return None
