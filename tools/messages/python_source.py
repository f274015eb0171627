"""The messages a Python source file can raise, warn or log, read with ``ast`` (never imported).

For every ``raise E(msg)``, ``warnings.warn(msg)``, ``logger.warning/error/...(msg)`` and
``assert test, msg`` the message is rebuilt as a template: literal text kept, each formatted field
(f-string, ``%``, ``.format``, a variable) a ``{}``. The guard is the source of the condition that
leads there: the enclosing ``if`` tests (negated on the ``else`` side), or the assert's test.
An exception class's own text counts too (kind: the class): ``self.message = ...`` (and ``+=``) or
``super().__init__(...)`` in its ``__init__``, what its ``__str__`` returns.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

FIELD = "{}"
LOG_METHODS = frozenset(
    {"warning", "warn", "error", "critical", "exception", "fatal", "warning_once", "error_once"}
)
WITH_INFO = LOG_METHODS | {"info", "info_once"}  # engines say why they chose a backend at INFO
_PERCENT = re.compile(r"%(\([^)]*\))?[-#0 +]*\d*(\.\d+)?[sdifrxXeEgGc%]")
_FORMAT_FIELD = re.compile(r"\{[^{}]*\}")
MAX_GUARD = 240
_EXCEPTION_NAME = re.compile(r"(Error|Exception|Warning)$")
_MESSAGE_ATTRIBUTES = {"message", "msg"}


@dataclass(frozen=True)
class RawMessage:
    """One message as one release's code writes it."""

    file: str  # the path inside the distribution, "transformers/modeling_utils.py"
    function: str  # "PreTrainedModel._check_and_enable_flash_attn_2"; "" at module level
    kind: str  # the exception class, "warning" (warnings.warn), "log.warning", "assert"
    template: str  # the text, each formatted field a {}
    guard: str  # the condition that leads to it, as source; "" when none


def extract(source: str, path: str, log_methods: frozenset[str] = LOG_METHODS) -> list[RawMessage]:
    """Every message of one file (logger calls of ``log_methods``); a file that does not parse
    gives none."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    visitor = _Visitor(path, log_methods)
    visitor.visit(tree)
    return visitor.found


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, log_methods: frozenset[str]) -> None:
        self.path = path
        self.log_methods = log_methods
        self.scope: list[str] = []
        self.guards: list[str] = []
        self.strings: dict[str, ast.expr] = {}  # the function's names bound to text: preface = "..."
        self.found: list[RawMessage] = []
        self.exceptions: list[bool] = []  # per scope: whether it is an exception class

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.exceptions.append(isinstance(node, ast.ClassDef) and _exception_class(node))
        saved, self.guards = self.guards, []
        saved_strings, self.strings = self.strings, dict(self.strings)
        self.generic_visit(node)
        self.guards, self.strings = saved, saved_strings
        self.exceptions.pop()
        self.scope.pop()

    def _owner(self, method: str) -> str | None:
        """The exception class whose ``method`` this is directly in, if it is."""
        if len(self.scope) >= 2 and self.scope[-1] == method and self.exceptions[-2]:
            return self.scope[-2]
        return None

    def visit_Assign(self, node: ast.Assign) -> None:  # noqa: N802
        target = node.targets[0] if len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and template_of(node.value, {}) not in (None, FIELD):
            self.strings[target.id] = node.value
        owner = self._owner("__init__")
        if owner and target is not None and _self_message(target):
            self._add(owner, node.value, self._guard())
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:  # noqa: N802
        """``self.message += "..."`` after ``self.message = ...``: the text goes on."""
        owner, last = self._owner("__init__"), self.found[-1] if self.found else None
        if (
            owner
            and _self_message(node.target)
            and isinstance(node.op, ast.Add)
            and last is not None
            and (last.kind, last.function) == (owner, ".".join(self.scope))
        ):
            more = template_of(node.value, self.strings)
            self.found[-1] = replace(last, template=last.template + (more or FIELD))
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:  # noqa: N802
        owner = self._owner("__str__")
        if owner and node.value is not None:
            self._add(owner, node.value, self._guard())
        self.generic_visit(node)

    visit_FunctionDef = _function  # noqa: N815 (ast.NodeVisitor's naming)
    visit_AsyncFunctionDef = _function  # noqa: N815
    visit_ClassDef = _function  # noqa: N815

    def visit_If(self, node: ast.If) -> None:  # noqa: N802
        test = _source(node.test)
        self.guards.append(test)
        for child in node.body:
            self.visit(child)
        self.guards[-1] = f"not ({test})"
        for child in node.orelse:
            self.visit(child)
        self.guards.pop()

    def visit_Raise(self, node: ast.Raise) -> None:  # noqa: N802
        if isinstance(node.exc, ast.Call) and node.exc.args:
            kind = _callee(node.exc.func).rsplit(".", 1)[-1]
            self._add(kind, node.exc.args[0], self._guard())
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:  # noqa: N802
        if node.msg is not None:
            self._add("assert", node.msg, f"not ({_source(node.test)})")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802
        callee = _callee(node.func)
        if node.args and callee in ("warnings.warn", "warn"):
            self._add("warning", node.args[0], self._guard())
        elif node.args and callee.rsplit(".", 1)[-1] in self.log_methods and _logger_like(callee):
            self._add(f"log.{callee.rsplit('.', 1)[-1].removesuffix('_once')}", logged(node), self._guard())
        elif node.args and (owner := self._owner("__init__")) and _super_init(node.func):
            self._add(owner, node.args[0], self._guard())
        self.generic_visit(node)

    def _guard(self) -> str:
        """The enclosing conditions, each bracketed where ``and`` would bind tighter than it."""
        if len(self.guards) == 1:
            return self.guards[0][:MAX_GUARD]
        parts = [f"({g})" if " or " in g or " if " in g else g for g in self.guards]
        return " and ".join(parts)[:MAX_GUARD]

    def _add(self, kind: str, message: ast.expr, guard: str) -> None:
        template = template_of(message, self.strings)
        if template is None or not template.replace(FIELD, "").strip():
            return
        function = ".".join(self.scope)
        self.found.append(RawMessage(self.path, function, kind, template, guard[:MAX_GUARD]))


def template_of(node: ast.expr, strings: dict[str, ast.expr] | None = None, depth: int = 0) -> str | None:
    """The message of an expression with each formatted field as {}; None when no text is known.
    ``strings``: names bound to text in the enclosing function (a message built in steps)."""
    strings = strings or {}
    if depth > 8:
        return FIELD

    def inner(child: ast.expr) -> str | None:
        return template_of(child, strings, depth + 1)

    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value
            if isinstance(part, ast.Constant) and isinstance(part.value, str)
            else _field(part, inner)
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = inner(node.left), inner(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else FIELD) + (right if right is not None else FIELD)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = inner(node.left)
        return None if left is None else _PERCENT.sub(lambda m: "%" if m[0] == "%%" else FIELD, left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        base = inner(node.func.value)
        return None if base is None else _FORMAT_FIELD.sub(FIELD, base)
    if isinstance(node, ast.Name) and node.id in strings:
        return inner(strings[node.id])
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        return FIELD
    return None


def _field(part: ast.expr, inner: Any) -> str:
    """An f-string's ``{value}``: the text of a name bound to text, else a field."""
    if isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.format_spec is None:
        text = inner(part.value)
        return text if text is not None else FIELD
    return FIELD


def logged(call: ast.Call) -> ast.expr:
    """A logging call's message: ``logger.warning("... %s", x)`` formats its %-fields with the
    arguments that follow (read as ``"... %s" % (x,)``); a lone argument is the text as written."""
    if len(call.args) < 2:
        return call.args[0]
    return ast.BinOp(left=call.args[0], op=ast.Mod(), right=ast.Tuple(elts=call.args[1:], ctx=ast.Load()))


def _exception_class(node: ast.ClassDef) -> bool:
    """Whether a class looks like an exception (its name or a base's ends in Error/Exception/Warning)."""
    names = [node.name, *(_callee(base).rsplit(".", 1)[-1] for base in node.bases)]
    return any(_EXCEPTION_NAME.search(name) for name in names)


def _self_message(target: ast.expr) -> bool:
    """``self.message`` / ``self.msg``."""
    return (
        isinstance(target, ast.Attribute)
        and target.attr in _MESSAGE_ATTRIBUTES
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    )


def _super_init(func: ast.expr) -> bool:
    """``super().__init__``."""
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and _callee(func.value.func) == "super"
    )


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_callee(func.value)}.{func.attr}"
    return ""


def _logger_like(callee: str) -> bool:
    owner = callee.rsplit(".", 1)[0].lower()
    return "log" in owner or owner in ("warnings",)


def _source(node: ast.expr) -> str:
    try:
        return " ".join(ast.unparse(node).split())
    except (ValueError, RecursionError):
        return ""


def messages(files: Iterator[tuple[str, str]]) -> Iterator[RawMessage]:
    """The messages of every (path, source) pair."""
    for path, source in files:
        yield from extract(source, path)
