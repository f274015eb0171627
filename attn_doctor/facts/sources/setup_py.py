"""setup.py: the ``install_requires`` of its ``setup(...)`` call, where that is a literal list (or
tuple) of strings, written in the call or in a module-level variable the call names and nothing
else changes. The file is parsed, never run: any other ``install_requires`` (a function's result,
a list built from a table, one appended to) is not supported, and the file is refused with one
line. ``extras_require`` is not read: an extra is installed only when asked for.
"""

from __future__ import annotations

import ast
from pathlib import Path

from attn_doctor.errors import InputError
from attn_doctor.facts.sources.common import Declared, applies, exact_version, requirement

_NOT_LITERAL = "install_requires is not a literal list; not supported"


def recognises(path: Path, text: str) -> bool:
    return path.name == "setup.py"


def read(path: Path, text: str, markers: dict[str, str]) -> Declared:
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
    for element in node.elts:
        if not isinstance(element, ast.Constant) or not isinstance(element.value, str):
            raise InputError(str(path), _NOT_LITERAL)
        origin = f"{path}:{element.lineno}"
        req = requirement(element.value, origin)
        if applies(str(req.marker) if req.marker else None, markers, origin):
            declared.add(req.name, exact_version(req), origin, specifier=str(req.specifier))
    return declared


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
