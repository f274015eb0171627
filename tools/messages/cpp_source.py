"""The messages a C++/CUDA source file can throw or warn, read as text (never compiled).

For every ``TORCH_CHECK(cond, ...)`` (and its ``_VALUE``/``_TYPE``/``_INDEX``/``_NOT_IMPLEMENTED``
kinds), ``TORCH_INTERNAL_ASSERT``, ``AT_ERROR(...)``, ``TORCH_WARN(...)``/``TORCH_WARN_ONCE`` and
``throw name("...")`` the message is rebuilt as a template: the string-literal pieces joined (as
c10::str joins its arguments), every other argument a ``{}``. A check without a message gets the
text c10 writes for it (``Expected <cond> to be true, but got false. ...``).

The guard is the source of the condition that leads there: the enclosing ``if`` tests (negated on
the ``else`` side), then the check's own failed condition ``!(cond)``; a name of the condition
bound in the function (``bool is_sm8x = dprops->major >= 8;``) is shown with its definition. The
function is the innermost enclosing function definition (``Class::name`` where written so).

Function-like macros whose body holds a check (``#define CHECK_DEVICE(x) TORCH_CHECK(x.is_cuda(),
#x " must be on CUDA")``) are expanded where the same file uses them, ``#x`` stringified as the
preprocessor does; a macro the file defines but never uses gives its body's check with each
parameter a field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from tools.messages.python_source import FIELD, MAX_GUARD, RawMessage

SUFFIXES = (".cpp", ".cc", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".hxx", ".inl")

# macro -> (takes a condition first, kind)
CHECKS = {
    "TORCH_CHECK": True,
    "TORCH_CHECK_VALUE": True,
    "TORCH_CHECK_TYPE": True,
    "TORCH_CHECK_INDEX": True,
    "TORCH_CHECK_NOT_IMPLEMENTED": True,
    "TORCH_CHECK_LINALG": True,
    "TORCH_INTERNAL_ASSERT": True,
    "AT_ERROR": False,
    "TORCH_WARN": False,
    "TORCH_WARN_ONCE": False,
}
# what c10 writes for a failed check that has no message of its own
DEFAULT_CHECK = (
    "Expected {cond} to be true, but got false.  (Could this error message be improved?  "
    "If so, please report an enhancement request to PyTorch.)"
)
INTERNAL_ASSERT = "{cond} INTERNAL ASSERT FAILED at {field}:{field}, please report a bug to PyTorch. "
MAX_BINDING = 80  # a longer definition says less than the name
_BINDING = re.compile(r"\b(?:const\s+)?(?:bool|auto)\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);")
_CALL = re.compile(r"\b(" + "|".join(sorted(CHECKS, key=len, reverse=True)) + r")\s*\(")
_THROW = re.compile(r"\bthrow\s+((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)\s*\(")
_DEFINE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)\(([^)]*)\)(.*)", re.S)
_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|(?<!#)#\s*([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\b')
_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "else", "do", "try", "decltype"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'", "?": "?", "a": "\a"}


def extract(source: str, path: str) -> list[RawMessage]:
    """Every message of one C++/CUDA file."""
    code = _Code(source)
    found: list[RawMessage] = []
    used: set[str] = set()
    for name, macro in code.macros.items():
        for start, args in code.calls(name):
            used.add(name)
            expanded = _Code(macro.expand(args))
            context = code.context(start)
            for message in expanded.messages(path):
                guard = _all([context.guard, message.guard])[:MAX_GUARD]
                found.append(RawMessage(path, context.function, message.kind, message.template, guard))
    found.extend(code.messages(path))
    for name, macro in code.macros.items():
        if name not in used:  # defined here, used elsewhere: its parameters stay fields
            for message in _Code(macro.expand(None)).messages(path):
                found.append(RawMessage(path, name, message.kind, message.template, message.guard))
    return found


@dataclass(frozen=True)
class _Macro:
    params: tuple[str, ...]
    body: str

    def expand(self, args: list[str] | None) -> str:
        """The body with ``args`` in place of the parameters (None: each parameter a field)."""
        values: dict[str, str] = {}
        for index, param in enumerate(self.params):
            if param == "...":
                rest = args[index:] if args is not None else None
                values["__VA_ARGS__"] = ", ".join(rest) if rest is not None else ""
            else:
                values[param] = args[index] if args is not None and index < len(args) else ""

        def substitute(match: re.Match[str]) -> str:
            if match[1] is not None:  # #param: the argument's text as a literal
                if match[1] not in values:
                    return match[0]
                if args is None:
                    return "__FIELD__"
                text = " ".join(values[match[1]].split())
                return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
            if match[2] is not None and args is not None and match[2] in values:
                value = values[match[2]]  # code with checks of its own is read where it is written
                return "__ARG__" if _CALL.search(value) or _THROW.search(value) else value
            return match[0]  # a literal, or a parameter of a macro left unexpanded

        body = _TOKENS.sub(substitute, self.body)
        return re.sub(r"\s*##\s*", "", body)


@dataclass(frozen=True)
class _Context:
    function: str
    guard: str


class _Code:
    """One translation unit's text: comments blanked, string interiors masked, blocks found."""

    def __init__(self, source: str) -> None:
        self.clean, self.masked = _mask(source)
        self.macros: dict[str, _Macro] = {}
        self._directives()
        self.blocks = _blocks(self.clean, self.masked)
        self._bound: list[tuple[int, str, str]] | None = None  # (where, name, definition) of locals

    def _directives(self) -> None:
        """Read the function-like macros that hold a check; blank every directive."""
        clean, masked = list(self.clean), list(self.masked)
        for match in re.finditer(r"(?m)^[ \t]*#(?:\\\r?\n|[^\n])*", self.masked):
            text = re.sub(r"\\\r?\n", " ", self.clean[match.start() : match.end()]).strip()
            define = _DEFINE.match(text)
            if define and (_CALL.search(define[3]) or _THROW.search(define[3])):
                params = tuple(p.strip() for p in define[2].split(",") if p.strip())
                self.macros[define[1]] = _Macro(params, define[3])
            for index in range(match.start(), match.end()):
                if clean[index] != "\n":
                    clean[index] = masked[index] = " "
        for match in re.finditer(r"\\(?=\r?\n)", self.masked):  # a line continued outside a directive
            clean[match.start()] = masked[match.start()] = " "
        self.clean, self.masked = "".join(clean), "".join(masked)

    def calls(self, name: str) -> Iterator[tuple[int, list[str]]]:
        """(position, arguments) of each call of ``name``."""
        for match in re.finditer(r"\b" + re.escape(name) + r"\s*\(", self.masked):
            spans = _arguments(self.masked, match.end())
            if spans is not None:
                yield match.start(), [self.clean[a:b].strip() for a, b in spans]

    def messages(self, path: str) -> Iterator[RawMessage]:
        for match in _CALL.finditer(self.masked):
            spans = _arguments(self.masked, match.end())
            if not spans:
                continue
            macro = match[1]
            args = [(self.clean[a:b].strip(), self.masked[a:b].strip()) for a, b in spans]
            template, own = _check_message(macro, args)
            if template is None:
                continue
            context = self.context(match.start())
            guards = [context.guard] if context.guard else []
            if own:
                guards.append(own + self._bindings(own, match.start()))
            yield RawMessage(path, context.function, macro, template, _all(guards)[:MAX_GUARD])
        for match in _THROW.finditer(self.masked):
            spans = _arguments(self.masked, match.end())
            if not spans:
                continue
            a, b = spans[0]
            template = _template(self.clean[a:b].strip(), self.masked[a:b].strip())
            if template is None or not template.replace(FIELD, "").strip():
                continue
            context = self.context(match.start())
            yield RawMessage(path, context.function, match[1], template, context.guard[:MAX_GUARD])

    def context(self, position: int) -> _Context:
        """The function around ``position`` and the ``if`` tests that lead to it."""
        function = ""
        guards: list[str] = []
        for block in self.blocks:
            if not block.start < position < block.end:
                continue
            if block.function:
                function = block.function
                guards = []  # a function (a method of a class) starts afresh
            elif block.guard:
                guards.append(block.guard)
        begin = _statement_start(self.masked, position)
        unbraced = _if_test(self.masked[begin:position], self.clean[begin:position])
        if unbraced:
            guards.append(unbraced)
        return _Context(function, _all(guards))

    def _bindings(self, condition: str, position: int) -> str:
        """`` [name = definition; ...]`` for the names of ``condition`` bound as locals before it."""
        function = max(
            (b for b in self.blocks if b.function and b.start < position < b.end),
            key=lambda b: b.start,
            default=None,
        )
        if function is None:
            return ""
        if self._bound is None:
            self._bound = [(m.start(), m[1], " ".join(m[2].split())) for m in _BINDING.finditer(self.clean)]
        bound = []
        for name in dict.fromkeys(re.findall(r"(?<![\w.>:])([A-Za-z_]\w*)\b(?!\s*[(:])", condition)):
            definitions = [d for at, n, d in self._bound if n == name and function.start < at < position]
            if definitions and len(definitions[-1]) <= MAX_BINDING:
                bound.append(f"{name} = {definitions[-1]}")
        return f" [{'; '.join(bound)}]" if bound else ""


@dataclass(frozen=True)
class _Block:
    start: int
    end: int
    function: str  # the name, where the block is a function's body
    guard: str  # the test that leads into it, where it is an if/else body


def _check_message(macro: str, args: list[tuple[str, str]]) -> tuple[str | None, str]:
    """(template, the failed condition as a guard) of a check macro's arguments."""
    if not CHECKS[macro]:
        return _join(args), ""
    if not args:
        return None, ""
    condition = " ".join(args[0][0].split())
    own = "" if condition in ("false", "0") else _negate(condition)
    text = _join(args[1:]) if len(args) > 1 else None
    if macro == "TORCH_INTERNAL_ASSERT":
        head = INTERNAL_ASSERT.format(cond=condition, field=FIELD)
        return head + (text or ""), own
    if text is None:
        if condition in ("false", "0"):
            return None, ""
        return DEFAULT_CHECK.format(cond=condition), own
    return text, own


def _join(args: list[tuple[str, str]]) -> str | None:
    """The message c10::str builds of ``args``: literal pieces kept, the rest fields."""
    pieces = [_template(clean, masked) for clean, masked in args]
    text = "".join(piece if piece is not None else FIELD for piece in pieces)
    return text if text.replace(FIELD, "").strip() else None


def _template(clean: str, masked: str) -> str | None:
    """The text of one argument: adjacent literals joined; ``"a" + x`` pieces; else None."""
    parts = _split(masked, "+")
    if len(parts) > 1 and any(_literals(clean[a:b].strip()) is not None for a, b in parts):
        return "".join(
            text if (text := _literals(clean[a:b].strip())) is not None else FIELD for a, b in parts
        )
    return _literals(clean)


_LITERAL = re.compile(
    r'\s*(?:(?:u8|u|U|L)?R"([^()\\\s]{0,16})\((.*?)\)\1"|(?:u8|u|U|L)?"((?:[^"\\\n]|\\.)*)"|(__FIELD__))\s*',
    re.S,
)


def _literals(text: str) -> str | None:
    """The joined value of ``text`` when it is only adjacent string literals (and stringified
    parameters of a macro kept as fields), else None."""
    position, out = 0, []
    while position < len(text):
        match = _LITERAL.match(text, position)
        if match is None or match.end() == position:
            return None
        if match[4] is not None:
            out.append(FIELD)
        else:
            out.append(match[2] if match[2] is not None else _unescape(match[3]))
        position = match.end()
    return "".join(out) if out else None


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[0]), body)


def _mask(source: str) -> tuple[str, str]:
    """(source with comments blanked, the same with string and char interiors masked too);
    both keep every offset and newline."""
    clean, masked = list(source), list(source)
    index, size = 0, len(source)
    while index < size:
        char = source[index]
        if source.startswith("//", index):
            end = source.find("\n", index)
            end = size if end < 0 else end
            _blank(clean, masked, index, end)
            index = end
        elif source.startswith("/*", index):
            end = source.find("*/", index + 2)
            end = size if end < 0 else end + 2
            _blank(clean, masked, index, end)
            index = end
        elif char == '"' or (char == "'" and not (index and (source[index - 1].isalnum()))):
            raw = re.match(r'R"([^()\\\s]{0,16})\(', source[index - 1 : index + 20]) if index else None
            if char == '"' and raw:
                end = source.find(")" + raw[1] + '"', index)
                end = size if end < 0 else end + len(raw[1]) + 2
            else:
                end = index + 1
                while end < size and source[end] not in (char, "\n"):
                    end += 2 if source[end] == "\\" else 1
                end = min(end + 1, size)
            for inner in range(index + 1, end - 1):
                if masked[inner] != "\n":
                    masked[inner] = "x"
            index = end
        else:
            index += 1
    return "".join(clean), "".join(masked)


def _blank(clean: list[str], masked: list[str], start: int, end: int) -> None:
    for index in range(start, end):
        if clean[index] != "\n":
            clean[index] = masked[index] = " "


def _arguments(masked: str, start: int) -> list[tuple[int, int]] | None:
    """The (start, end) of each argument of a call whose ``(`` ends just before ``start``; the
    closing ``)`` is at the last end (an empty call: [(start, start)])."""
    depth, spans, begin = 0, [], start
    for index in range(start, len(masked)):
        char = masked[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                if char != ")":
                    return None
                spans.append((begin, index))
                return spans
            depth -= 1
        elif char == "," and depth == 0:
            spans.append((begin, index))
            begin = index + 1
    return None


def _split(masked: str, separator: str) -> list[tuple[int, int]]:
    depth, spans, begin = 0, [], 0
    for index, char in enumerate(masked):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == separator and depth == 0:
            spans.append((begin, index))
            begin = index + 1
    spans.append((begin, len(masked)))
    return spans


def _blocks(clean: str, masked: str) -> list[_Block]:
    """The ``{...}`` blocks of code (not brace initializers), outermost first, each with what
    leads into it."""
    blocks: list[_Block] = []
    stack: list[tuple[int, int, bool]] = []  # (position, where its head starts, is a block)
    parens = 0
    last_test: dict[int, str] = {}  # depth -> the test of the block that closed last there
    for index, char in enumerate(masked):
        if char in "([":
            parens += 1
        elif char in ")]":
            parens -= 1
        elif char == "{":
            before = index - 1
            while before >= 0 and masked[before].isspace():
                before -= 1
            is_block = parens <= 0 or (before >= 0 and masked[before] in ")]")
            stack.append((index, _statement_start(masked, index), is_block))
        elif char == "}" and stack:
            start, head_start, is_block = stack.pop()
            if not is_block:
                continue
            depth = len(stack)
            head = masked[head_start:start]
            function = _function_name(" ".join(head.split()))
            test = _if_test(head, clean[head_start:start])
            guard = test
            if head.split()[:1] == ["else"]:
                previous = last_test.get(depth, "")
                guard = _all([_negate(previous) if previous else "", test])
            last_test[depth] = test
            blocks.append(_Block(start, index, function, guard))
    return sorted(blocks, key=lambda block: block.start)


def _all(tests: list[str]) -> str:
    """``a && b``, each test with a top-level ``||`` in parentheses."""
    tests = [test for test in tests if test]
    if len(tests) < 2:
        return "".join(tests)
    return " && ".join(f"({test})" if _top_level_or(test) else test for test in tests)


def _top_level_or(test: str) -> bool:
    depth = 0
    for index, char in enumerate(test):
        depth += (char == "(") - (char == ")")
        if depth == 0 and test.startswith("||", index):
            return True
    return False


def _negate(test: str) -> str:
    """``!(test)``, or ``name`` for a test that is ``!name``."""
    simple = re.fullmatch(r"!\s*([\w.]+(?:\(\))?)", test)
    return simple[1] if simple else f"!({test})"


def _statement_start(masked: str, position: int) -> int:
    """Where the statement that ``position`` is in starts (after the last ``;``, ``{`` or ``}``)."""
    return max(masked.rfind(c, 0, position) for c in ";{}") + 1


def _if_test(masked: str, clean: str) -> str:
    """The test of the ``if (test)`` / ``else if (test)`` that ``masked`` (a statement's head, up
    to a block or a call) ends with; "" for any other head. ``clean``: the same span unmasked."""
    match = re.search(r"(?:^|\s)(?:else\s+)?if\s*(?:constexpr\s*)?\(", masked)
    if match is None:
        return ""
    spans = _arguments(masked, match.end())
    if not spans or masked[spans[-1][1] + 1 :].strip():  # something follows the test
        return ""
    return " ".join(clean[match.end() : spans[-1][1]].split())


def _function_name(head: str) -> str:
    """The name a function definition's head declares ("" for a control statement or lambda)."""
    match = re.match(r"(?:template\s*<[^{};]*?>\s*)?[^=(]*?((?:[A-Za-z_~]\w*::)*[A-Za-z_~]\w*)\s*\(", head)
    if match is None or match[1] in _KEYWORDS or head.split()[0] in _KEYWORDS:
        return ""
    spans = _arguments(head, match.end())
    if spans is None:
        return ""
    rest = head[spans[-1][1] + 1 :].strip()
    if rest and not re.fullmatch(r"(?:(?:const|noexcept|override|final|mutable)\s*)*(?:->.*|:.*)?", rest):
        return ""
    return match[1]
