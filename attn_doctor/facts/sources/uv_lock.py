"""uv.lock (uv's universal lock): ``[[package]]`` tables; a package locked at several versions for
different platforms, Pythons or dependency groups carries ``resolution-markers``.

What ``uv sync`` installs is read from the lock's own graph: from the project (the entry whose
source is ``editable`` or ``virtual``) through each entry's ``dependencies``, the project's default
dependency groups (``dev``, or ``[tool.uv] default-groups`` of the pyproject.toml beside the lock)
and no optional extras, each edge's marker evaluated for the target. uv writes a group or an extra
into markers as ``extra == 'group-13-open-instruct-cuda12'``: those of the chosen groups hold, the
others do not. Each package's origin says which groups were resolved. A lock without a project
entry (an old or hand-made one) gives every entry whose resolution marker holds.

A package whose ``source`` is a wheel URL or path (``tool.uv.sources``: ``flash-attn = { url =
".../flash_attn-2.8.3+cu128torch2.10-cp312-cp312-linux_x86_64.whl" }``), or whose only artifact is
one wheel, is installed from that prebuilt wheel: the Package says which."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from attn_doctor.errors import InputError
from attn_doctor.facts.names import installed_name, rule_name
from attn_doctor.facts.sources.common import Declared, applies, wheel_file
from attn_doctor.facts.sources.toml_lock import any_marker, name_lines, read_entries
from attn_doctor.inputs import parse_toml

DEFAULT_GROUPS = ("dev",)  # uv sync's default, where the pyproject names none
_EXTRA = re.compile(r"""\bextra\s*(==|!=)\s*(['"])([^'"]+)\2""")


def recognises(path: Path, text: str) -> bool:
    return path.name == "uv.lock"


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    data = parse_toml(text, str(path))
    entries = data.get("package", [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise InputError(f"{path} package", "must be an array of tables")
    roots = [entry for entry in entries if _is_project(entry)]
    if not roots:
        return read_entries(
            path, text, markers, "package", lambda entry: any_marker(entry.get("resolution-markers")), _wheel
        )
    lines = name_lines(text, "package")
    groups = _default_groups(path)
    active = {_group_extra(str(root.get("name")), group) for root in roots for group in groups}
    active |= {_group_extra(str(root.get("name")), extra, "extra") for root in roots for extra in extras}
    reached = _walk(entries, roots, groups, extras, active, markers, path)
    resolved = f"groups {', '.join(groups)}" if groups else "no groups"
    resolved += f"; extras {', '.join(sorted(extras))}" if extras else ""
    declared = Declared(
        extras={str(name) for root in roots for name in _table(root, "optional-dependencies")}
    )
    root_line = {id(entry): lines[index] for index, entry in enumerate(entries) if index < len(lines)}
    for root in roots:  # an extra not asked for: its packages may be there
        for extra, edges in _table(root, "optional-dependencies").items():
            if extra not in extras:
                origin = f"{path}:{root_line.get(id(root), 1)}"
                for edge in _list(edges):
                    name = installed_name(str(edge.get("name")), None)
                    declared.optional.setdefault(name, f"the extra {extra!r} ({origin}; --extra {extra})")
    for index, entry in enumerate(entries):
        if id(entry) in reached and not _is_project(entry):
            line = lines[index] if index < len(lines) else 1
            declared.add(
                str(entry["name"]), entry.get("version"), f"{path}:{line} ({resolved})", wheel=_wheel(entry)
            )
    return declared


def _is_project(entry: dict[str, Any]) -> bool:
    source = entry.get("source")
    return isinstance(source, dict) and ("editable" in source or "virtual" in source)


def _default_groups(lock: Path) -> tuple[str, ...]:
    """The default groups of the pyproject.toml beside the lock, else uv's default."""
    pyproject = lock.with_name("pyproject.toml")
    try:
        data = parse_toml(pyproject.read_text(encoding="utf-8"), str(pyproject))
    except (OSError, InputError, UnicodeDecodeError):
        return DEFAULT_GROUPS
    return default_groups(data)


def default_groups(pyproject: dict[str, Any]) -> tuple[str, ...]:
    """``[tool.uv] default-groups`` of a parsed pyproject.toml, else uv's default (``dev``)."""
    tool = pyproject.get("tool")
    uv = tool.get("uv", {}) if isinstance(tool, dict) else {}
    groups = uv.get("default-groups") if isinstance(uv, dict) else None
    if isinstance(groups, list) and all(isinstance(group, str) for group in groups):
        return tuple(groups)
    return DEFAULT_GROUPS


def _group_extra(project: str, group: str, kind: str = "group") -> str:
    """How uv writes a dependency group (or an optional extra) of ``project`` into a marker's
    ``extra``: ``group-13-open-instruct-cuda12``, ``extra-13-open-instruct-code``."""
    name = rule_name(project)
    return f"{kind}-{len(name)}-{name}-{group}"


def _table(entry: dict[str, Any], key: str) -> dict[str, Any]:
    value = entry.get(key)
    return value if isinstance(value, dict) else {}


def _walk(
    entries: list[dict[str, Any]],
    roots: list[dict[str, Any]],
    groups: tuple[str, ...],
    extras: frozenset[str],
    active: set[str],
    markers: dict[str, str],
    path: Path,
) -> set[int]:
    """The ids of the entries reachable from ``roots`` for the target, the chosen groups and the
    project's extras asked for."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_name.setdefault(rule_name(str(entry.get("name"))), []).append(entry)
    reached: set[int] = set()
    decided = {**markers, "extra": "on"}  # _with_extras has decided every extra of the markers
    todo = list(roots)
    while todo:
        entry = todo.pop()
        if id(entry) in reached:
            continue
        reached.add(id(entry))
        edges = list(_list(entry.get("dependencies")))
        if entry in roots:
            for group in groups:
                edges += _list(_table(entry, "dev-dependencies").get(group))
            for extra in extras:
                edges += _list(_table(entry, "optional-dependencies").get(extra))
        for edge in edges:
            marker = edge.get("marker")
            if isinstance(marker, str) and not applies(_with_extras(marker, active), decided, str(path)):
                continue
            target = _chosen(by_name.get(rule_name(str(edge.get("name"))), []), edge, markers, path)
            if target is not None:
                todo.append(target)
                for extra in _list_of_str(edge.get("extra")):  # torch[opt]: the extra's own edges
                    for dep in _list(_table(target, "optional-dependencies").get(extra)):
                        chosen = _chosen(by_name.get(rule_name(str(dep.get("name"))), []), dep, markers, path)
                        todo += [chosen] if chosen is not None else []
    return reached


def _chosen(
    candidates: list[dict[str, Any]], edge: dict[str, Any], markers: dict[str, str], path: Path
) -> dict[str, Any] | None:
    """The entry an edge points at: the one of its version and source, else the one whose
    resolution markers hold for the target."""
    matching = [
        entry
        for entry in candidates
        if ("version" not in edge or entry.get("version") == edge["version"])
        and ("source" not in edge or entry.get("source") == edge["source"])
    ]
    if len(matching) == 1:
        return matching[0]
    for entry in matching:
        marker = any_marker(entry.get("resolution-markers"))
        if marker is None or applies(marker, markers, str(path)):
            return entry
    return None


def _with_extras(marker: str, active: set[str]) -> str:
    """``marker`` with each ``extra == 'X'`` decided by whether X is a chosen group or extra."""

    def decided(match: re.Match[str]) -> str:
        holds = (match.group(3) in active) == (match.group(1) == "==")
        return "extra == 'on'" if holds else "extra == 'off'"  # evaluated with extra = "on"

    return _EXTRA.sub(decided, marker)


def _list(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _list_of_str(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _wheel(entry: dict[str, Any]) -> str | None:
    """The wheel an entry installs: its source's URL or path when that is a wheel, else its one
    wheel when it has no sdist (a registry package with wheels for several platforms is not one)."""
    source = entry.get("source")
    if isinstance(source, dict):
        for key in ("url", "path"):
            if isinstance(source.get(key), str):
                return wheel_file(source[key])
    wheels = entry.get("wheels")
    if "sdist" not in entry and isinstance(wheels, list) and len(wheels) == 1 and isinstance(wheels[0], dict):
        url = wheels[0].get("url") or wheels[0].get("path") or wheels[0].get("filename")
        return wheel_file(url) if isinstance(url, str) else None
    return None
