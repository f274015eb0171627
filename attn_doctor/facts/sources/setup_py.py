"""setup.py: the ``install_requires`` of its ``setup(...)`` call, where that is a literal list (or
tuple) written in the call or in a module-level variable the call names and nothing else changes.
Its items are strings, or ``deps["name"]``: an entry of a table built from a module-level literal
list of requirement strings (``_deps = ["torch==2.6.0", ...]`` and ``deps = {b: a for a, b in
(re.findall(..., x)[0] for x in _deps)}``, as transformers, diffusers, trl and open-r1 write it),
found by the requirement's name. The file is parsed, never run: any other ``install_requires`` (a
function's result, one appended to) is not supported, and the file is refused with one line.
``extras_require`` is not read: an extra is installed only when asked for.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from packaging.utils import canonicalize_name

from attn_doctor.errors import InputError
from attn_doctor.facts.sources.common import Declared, applies, exact_version, requirement

_NOT_LITERAL = "install_requires is not a literal list; not supported"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a requirement string's package name


def recognises(path: Path, text: str) -> bool:
    return path.name == "setup.py"


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    try:
        tree = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None)
        raise InputError(f"{path}:{line}" if line else str(path), "not Python that parses") from None
    setup = _setup_call(tree)
    if setup is None:
        raise InputError(str(path), "no setup(...) call; not supported")
    node = next((k.value for k in setup.keywords if k.arg == "install_requires"), None)
    declared = Declared()
    if node is None:
        if any(k.arg is None for k in setup.keywords):  # setup(**kwargs)
            raise InputError(str(path), _NOT_LITERAL)
        return declared
    if isinstance(node, ast.Name):
        node = _module_list(tree, node.id)
    if not isinstance(node, ast.List | ast.Tuple):
        raise InputError(str(path), _NOT_LITERAL)
    tables: dict[str, dict[str, ast.Constant]] = {}
    for item in node.elts:
        element: ast.expr | None = item
        if isinstance(item, ast.Subscript) and isinstance(item.value, ast.Name):
            table = tables.setdefault(item.value.id, _requirement_table(tree, item.value.id))
            key = item.slice.value if isinstance(item.slice, ast.Constant) else None
            element = table.get(canonicalize_name(key)) if isinstance(key, str) else None
        if not isinstance(element, ast.Constant) or not isinstance(element.value, str):
            raise InputError(str(path), _NOT_LITERAL)
        origin = f"{path}:{element.lineno}"
        req = requirement(element.value, origin)
        if applies(str(req.marker) if req.marker else None, markers, origin):
            declared.add(req.name, exact_version(req), origin, specifier=str(req.specifier))
    return declared


def _requirement_table(tree: ast.Module, name: str) -> dict[str, ast.Constant]:
    """The requirement strings a module-level ``NAME = {... for ... in LIST}`` table is built from,
    by package name, where LIST is a module-level literal list of strings; else none."""
    built = _module_value(tree, name)
    if not isinstance(built, ast.DictComp):
        return {}
    sources = {node.id for node in ast.walk(built) if isinstance(node, ast.Name)}
    table: dict[str, ast.Constant] = {}
    for source in sorted(sources):
        listed = _module_list(tree, source)
        if isinstance(listed, ast.List | ast.Tuple) and all(
            isinstance(item, ast.Constant) and isinstance(item.value, str) for item in listed.elts
        ):
            for item in listed.elts:
                assert isinstance(item, ast.Constant)
                match = _NAME.match(str(item.value))
                if match:
                    table.setdefault(canonicalize_name(match.group(0)), item)
    return table


def _module_value(tree: ast.Module, name: str) -> ast.expr | None:
    """What a single module-level assignment binds to ``name`` (None: none, or several)."""
    values = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(_names(target, name) for target in node.targets)
    ]
    return values[0] if len(values) == 1 else None


def _setup_call(tree: ast.Module) -> ast.Call | None:
    """The ``setup(...)`` (or ``setuptools.setup(...)``) call, at any depth (``if __name__ ==``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name == "setup":
                return node
    return None


def _module_list(tree: ast.Module, name: str) -> ast.expr | None:
    """The list a module-level ``NAME = [...]`` binds, where nothing else binds or changes NAME
    (``NAME += ...``, ``NAME.append(...)``, a second assignment): else None."""
    bound: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(_names(target, name) for target in node.targets):
            bound.append(node.value)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and _names(node.target, name):
            bound.append(node.value or ast.Constant(None))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == name
            and node.attr in ("append", "extend", "insert", "remove", "pop", "clear", "__iadd__")
        ):
            return None
    top_level = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(_names(target, name) for target in node.targets)
    ]
    return bound[0] if len(bound) == 1 and top_level == bound else None


def _names(target: ast.expr, name: str) -> bool:
    return isinstance(target, ast.Name) and target.id == name
