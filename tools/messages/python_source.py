"""The messages a Python source file can raise, warn or log, read with ``ast`` (never imported).

For every ``raise E(msg)``, ``warnings.warn(msg)``, ``logger.warning/error/...(msg)`` and
``assert test, msg`` the message is rebuilt as a template: literal text kept, each formatted field
(f-string, ``%``, ``.format``, a variable) a ``{}``. The guard is the source of the condition that
leads there: the enclosing ``if`` tests (negated on the ``else`` side), or the assert's test.
An exception class's own text counts too (kind: the class): ``self.message = ...`` (and ``+=``) or
``super().__init__(...)`` in its ``__init__``, what its ``__str__`` returns.

A name bound to text (``preface = "..."``, then ``f"{preface} ..."``) is folded into the template
only where that text is the name's one value: the binding last read comes before the use on every
path (it encloses the use; no loop around the use binds the name again) or it is the name's only
binding so far. A name rebound to anything else (``VERSION = "0.0.0"`` then
``VERSION = flash_attn.__version__``; a ``for`` target, ``with ... as``, ``except ... as``, an
import, ``del``), or rebound to text in a branch of an ``if``/``try``/loop the use is not in, is a
field. A function sees a name of an enclosing scope only if that scope binds it once, and the
function never.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
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
MAX_CHOICES = 8  # the texts kept of a name bound to several in branches; more: a field
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


@dataclass(frozen=True)
class _Binding:
    """The last binding of a name read so far in a scope."""

    text: str | None  # its template when bound to text; None: anything else
    blocks: tuple[int, ...]  # the blocks (branches, loop bodies) it is in, outermost first
    again: bool  # whether the scope bound the name before this (a rebinding)
    extends: _Binding | None = None  # ``name += ...``: the binding whose text it goes on from
    others: tuple[str, ...] = ()  # where branches bound it to different texts: the other texts


class _Reaching(Mapping[str, str]):
    """The names whose text reaches the statement being read: template_of's ``strings``."""

    def __init__(self, visitor: _Visitor) -> None:
        self.visitor = visitor

    def __getitem__(self, name: str) -> str:
        text = self.visitor.text_of(name)
        if text is None:
            raise KeyError(name)
        return text

    def __iter__(self) -> Iterator[str]:
        return (name for name in list(self.visitor.bindings) if self.visitor.text_of(name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, log_methods: frozenset[str]) -> None:
        self.path = path
        self.log_methods = log_methods
        self.scope: list[str] = []
        self.guards: list[str] = []
        self.bindings: dict[str, _Binding] = {}  # the scope's names, each its last binding read
        self.counts: list[Counter[str]] = []  # per scope: how often its code binds each name
        self.blocks: list[int] = []  # the blocks around the statement read, outermost first
        # a loop's blocks: the names the loop binds, and those it binds other than by ``+=``
        self.loops: dict[int, tuple[frozenset[str], frozenset[str]]] = {}
        self.found: list[RawMessage] = []
        self.exceptions: list[bool] = []  # per scope: whether it is an exception class
        self.numbers = itertools.count()  # block numbers
        self.choice: dict[str, str] = {}  # the text taken, for now, of a name bound to several
        self.strings = _Reaching(self)

    def visit_Module(self, node: ast.Module) -> None:  # noqa: N802
        self.counts.append(_bound_names(node))
        self.generic_visit(node)
        self.counts.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self._bind(node.name, None)
        local = _bound_names(node)
        outer = self.counts[-1] if self.counts else Counter()
        # what the body sees of the enclosing scope is its value when the body runs: only a name
        # that scope binds once (to text) is known, and only where the body never binds it
        seen = {
            name: _Binding(text, (), False)
            for name in self.bindings
            if (text := self.text_of(name)) is not None and outer[name] <= 1 and name not in local
        }
        self.scope.append(node.name)
        self.exceptions.append(isinstance(node, ast.ClassDef) and _exception_class(node))
        saved = self.guards, self.bindings, self.blocks, self.counts
        self.guards, self.bindings, self.blocks, self.counts = [], seen, [], [*self.counts, local]
        if not isinstance(node, ast.ClassDef):
            for arg in _arguments(node.args):
                self._bind(arg, None)
        self.generic_visit(node)
        self.guards, self.bindings, self.blocks, self.counts = saved
        self.exceptions.pop()
        self.scope.pop()

    def _bind(
        self, name: str, text: str | None, extends: _Binding | None = None, others: Sequence[str] = ()
    ) -> None:
        self.bindings[name] = _Binding(
            text, tuple(self.blocks), name in self.bindings, extends, tuple(others)
        )

    def _texts(self, name: str) -> tuple[str, ...]:
        """Every text ``name`` may hold here (none: not text, or not known)."""
        binding, text = self.bindings.get(name), self.text_of(name)
        if binding is None or text is None:
            return ()
        return (text, *binding.others) if text == binding.text else (text,)

    def _templates(self, node: ast.expr) -> list[str]:
        """The templates of ``node``: one per text of each name bound to several (at most
        MAX_CHOICES), else one; none when it is no text."""
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        several = sorted(name for name in names if len(self._texts(name)) > 1)
        out: list[str] = []
        for chosen in itertools.islice(itertools.product(*(self._texts(n) for n in several)), MAX_CHOICES):
            self.choice = dict(zip(several, chosen))
            template = template_of(node, self.strings)
            if template is not None and template not in out:
                out.append(template)
        self.choice = {}
        return out

    def text_of(self, name: str) -> str | None:
        """The text ``name`` holds here: its last binding read, if that is text and comes here
        alone; a text extended (``+=``) on some way here: the text before, then a field."""
        if name in self.choice:
            return self.choice[name]
        binding = self.bindings.get(name)
        return None if binding is None else self._text_of(name, binding, exact=True)

    def _text_of(self, name: str, binding: _Binding, exact: bool) -> str | None:
        if binding.text is not None and self._reaches(name, binding, exact):
            return binding.text
        if binding.extends is not None:  # every way here, the value starts with the text before
            before = self._text_of(name, binding.extends, exact=False)
            if before is not None:
                return before if before.endswith(FIELD) else before + FIELD
        return None

    def _reaches(self, name: str, binding: _Binding, exact: bool) -> bool:
        """Whether here ``name`` holds what ``binding`` bound it to (``exact``: nothing added)."""
        depth = len(binding.blocks)
        if tuple(self.blocks[:depth]) != binding.blocks:  # bound in a branch this is not in
            if binding.again:  # the earlier value comes here by the other way
                return False
            depth = 0
        # a loop around here (and not around the binding) that binds the name may rebind it first
        return not any(
            name in self.loops[block][0 if exact else 1]
            for block in self.blocks[depth:]
            if block in self.loops
        )

    def _block(
        self, body: Sequence[ast.AST], loop: tuple[frozenset[str], frozenset[str]] | None = None
    ) -> dict[str, tuple[str, ...]] | None:
        """Read ``body`` as a block of its own (a branch, a handler, a loop's body): the texts of
        the names it binds, as its end leaves them; None when its end is never passed."""
        block = next(self.numbers)
        if loop is not None:
            self.loops[block] = loop
        start = dict(self.bindings)
        self.blocks.append(block)
        for child in body:
            self.visit(child)
        bound = {name: self._texts(name) for name, b in self.bindings.items() if start.get(name) is not b}
        self.blocks.pop()
        if body and isinstance(body[-1], (ast.Raise, ast.Return, ast.Continue, ast.Break)):
            return None
        return bound

    def _join(self, entry: dict[str, _Binding], ends: list[dict[str, tuple[str, ...]] | None]) -> None:
        """After branches (an ``if``'s, a ``match``'s cases, ``ends`` with every way past them):
        a name the branches bound holds the text of one of those its ways through leave (several
        texts: a message each), or, where one way leaves it no text, none."""
        changed = {name for end in ends if end is not None for name in end}
        now = self.bindings
        self.bindings = entry
        before = {name: self._texts(name) for name in changed if name in entry}
        self.bindings = now
        for name in sorted(changed):
            ways = [
                end[name] if name in end else before[name]
                for end in ends
                if end is not None and (name in end or name in before)  # unbound before: NameError
            ]
            texts = list(dict.fromkeys(text for way in ways for text in way))
            if not ways or any(not way for way in ways) or len(texts) > MAX_CHOICES:
                self._bind(name, None)
            else:
                self._bind(name, texts[0], others=texts[1:])

    def _owner(self, method: str) -> str | None:
        """The exception class whose ``method`` this is directly in, if it is."""
        if len(self.scope) >= 2 and self.scope[-1] == method and self.exceptions[-2]:
            return self.scope[-2]
        return None

    def visit_Assign(self, node: ast.Assign) -> None:  # noqa: N802
        target = node.targets[0] if len(node.targets) == 1 else None
        texts = self._templates(node.value) if _text(node.value) else []
        owner = self._owner("__init__")
        if owner and target is not None and _self_message(target):
            self._add(owner, node.value, self._guard())
        self.generic_visit(node)  # its names are bound (to no text)
        for name in node.targets:
            if isinstance(name, ast.Name) and texts:
                self._bind(name.id, texts[0], others=texts[1:])

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:  # noqa: N802
        texts = self._templates(node.value) if node.value and _text(node.value) else []
        if node.value is not None:
            self.generic_visit(node)
        if isinstance(node.target, ast.Name) and texts:
            self._bind(node.target.id, texts[0], others=texts[1:])

    def visit_Name(self, node: ast.Name) -> None:  # noqa: N802
        """A name stored or deleted (a for target, ``with ... as``, ``:=``, unpacking, ``del``)."""
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._bind(node.id, None)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:  # noqa: N802
        if node.name:
            self._bind(node.name, None)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:  # noqa: N802
        for name in _imported(node):
            self._bind(name, None)

    visit_ImportFrom = visit_Import  # noqa: N815

    def visit_comprehension(self, node: ast.comprehension) -> None:
        """A comprehension's own names are its own (only ``:=`` binds the enclosing scope's)."""
        self.visit(node.iter)
        for test in node.ifs:
            self.visit(test)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:  # noqa: N802
        """``self.message += "..."`` after ``self.message = ...``: the text goes on. So does a
        name's text (``msg += f" {x}"``); any other augmented assignment leaves no text."""
        if isinstance(node.target, ast.Name):
            name, added = node.target.id, isinstance(node.op, ast.Add)
            joined = ast.BinOp(left=ast.Name(name, ast.Load()), op=ast.Add(), right=node.value)
            texts = self._templates(joined) if added and self.text_of(name) is not None else []
            extends = self.bindings.get(name) if added else None
            self._bind(name, texts[0] if texts else None, extends, texts[1:])
            self.visit(node.value)
            return
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
        for walrus in ast.walk(node.test):  # the test's own messages are not read, its := are
            if isinstance(walrus, ast.NamedExpr):
                self.visit(walrus.target)
        test = _source(node.test)
        self.guards.append(test)
        entry = dict(self.bindings)
        ends = [self._block(node.body)]
        self.guards[-1] = f"not ({test})"
        ends.append(self._block(node.orelse))
        self.guards.pop()
        self._join(entry, ends)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:  # noqa: N802
        self.visit(node.iter)
        bound = _loop_names(node)
        self._block([node.target, *node.body], bound)
        self._block(node.orelse, bound)

    visit_AsyncFor = visit_For  # noqa: N815

    def visit_While(self, node: ast.While) -> None:  # noqa: N802
        bound = _loop_names(node)
        self._block([node.test, *node.body], bound)
        self._block(node.orelse, bound)

    def visit_Try(self, node: ast.Try) -> None:  # noqa: N802
        self._block(node.body)
        for handler in node.handlers:
            self._block([handler])
        self._block(node.orelse)
        self._block(node.finalbody)

    visit_TryStar = visit_Try  # noqa: N815

    def visit_Match(self, node: ast.Match) -> None:  # noqa: N802
        self.visit(node.subject)
        entry = dict(self.bindings)
        ends = [self._block([case]) for case in node.cases]
        exhaustive = any(isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None for c in node.cases)
        self._join(entry, ends if exhaustive else [*ends, {}])  # no case taken: the names as before

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
        for template in self._templates(message):
            if template.replace(FIELD, "").strip():
                function = ".".join(self.scope)
                self.found.append(RawMessage(self.path, function, kind, template, guard[:MAX_GUARD]))


def template_of(node: ast.expr, strings: Mapping[str, str] | None = None, depth: int = 0) -> str | None:
    """The message of an expression with each formatted field as {}; None when no text is known.
    ``strings``: the templates of names bound to text here (a message built in steps)."""
    strings = strings if strings is not None else {}
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
        return strings[node.id]
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        return FIELD
    return None


def _field(part: ast.expr, inner: Any) -> str:
    """An f-string's ``{value}``: the text of a name bound to text, else a field."""
    if isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.format_spec is None:
        text = inner(part.value)
        return text if text is not None else FIELD
    return FIELD


def _text(node: ast.expr) -> bool:
    """Whether an expression is text by itself (a literal, an f-string, text formatted or added),
    not a name, attribute or call that may hold anything."""
    return template_of(node, {}) not in (None, FIELD)


def _arguments(args: ast.arguments) -> list[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return [arg.arg for arg in every if arg is not None]


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name != "*"]


def _loop_names(loop: ast.For | ast.AsyncFor | ast.While) -> tuple[frozenset[str], frozenset[str]]:
    """The names a loop binds, and those it binds other than by ``+=`` (which keeps a text's start)."""
    extended = {
        id(node.target)
        for node in ast.walk(loop)
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add)
    }
    return frozenset(_bound_names(loop)), frozenset(_bound_names(loop, skip=extended))


def _bound_names(scope: ast.AST, skip: set[int] | frozenset[int] = frozenset()) -> Counter[str]:
    """How often the code under ``scope`` binds each name (nested functions' own names included:
    fewer names look bound once, never more); ``skip``: the ids of name nodes not to count."""
    counts: Counter[str] = Counter()
    for node in ast.walk(scope):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            counts[node.id] += 1
        elif isinstance(node, ast.arg):
            counts[node.arg] += 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not scope:
            counts[node.name] += 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            counts.update(_imported(node))
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            counts[node.name] += 1
        elif isinstance(node, ast.MatchMapping) and node.rest:
            counts[node.rest] += 1
    return counts


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
