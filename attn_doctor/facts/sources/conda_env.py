"""conda's environment.yml: ``dependencies`` (conda specs) and their ``pip:`` list (requirement
lines). Read with a small reader of the YAML subset these files use (a key, a list of scalars, one
nested ``pip:`` list), so no YAML library is needed; anchors, flow lists and multi-line scalars are
reported, not guessed."""

from __future__ import annotations

import re
from pathlib import Path

from attn_doctor.facts.sources import requirements
from attn_doctor.facts.sources.common import Declared, shown
from attn_doctor.facts.sources.conda_names import add_spec

_ITEM = re.compile(r"^(?P<indent>\s*)-\s*(?P<value>.*)$")
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(?P<rest>.*)$")


def recognises(path: Path, text: str) -> bool:
    if path.name.endswith((".yml", ".yaml")):
        return True
    return bool(re.search(r"(?m)^dependencies[ \t]*:", text)) and bool(
        re.search(r"(?m)^[ \t]*-[ \t]*pip[ \t]*:", text)
    )


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    declared = Declared()
    conda, pip = _dependency_lists(text)
    for number, spec in conda:
        if spec.startswith(("{", "[", "&", "*", "|", ">")):
            declared.problems.append(
                f"{path}:{number}: {shown(spec)}: YAML this reader does not read (skipped)"
            )
        else:
            add_spec(spec, f"{path}:{number}", declared)
    requirements.read_lines(path, pip, markers, declared)
    return declared


def _dependency_lists(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(line, conda spec) and (line, pip requirement) under the top-level ``dependencies:``."""
    conda: list[tuple[int, str]] = []
    pip: list[tuple[int, str]] = []
    in_dependencies, pip_indent = False, -1
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _without_comment(raw)
        if not line.strip():
            continue
        key = _KEY.match(line)
        if key and not key["indent"]:
            in_dependencies, pip_indent = key["key"] == "dependencies", -1
            continue
        item = _ITEM.match(line) if in_dependencies else None
        if item is None:
            continue
        indent, value = len(item["indent"]), _unquoted(item["value"])
        if pip_indent >= 0 and indent > pip_indent:
            pip.append((number, value))
            continue
        pip_indent = -1
        if re.fullmatch(r"pip\s*:", value):
            pip_indent = indent
        elif value:
            conda.append((number, value))
    return conda, pip


def _without_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line.rstrip())


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value
