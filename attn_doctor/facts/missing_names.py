"""Names a log shows the stack lacking: the errors Python raises when code meets another release
of a library than it was written for.

    ImportError: cannot import name 'X' from 'M' (...)          -> name X of module M
    AttributeError: module 'M' has no attribute 'X'              -> name X of module M
    ModuleNotFoundError: No module named 'M.sub'                 -> module M.sub (a dotted one:
                                                                    the package itself imported)
    AttributeError: 'C' object has no attribute 'X'              -> member X of class C
    TypeError: F() got an unexpected keyword argument 'k'        -> parameter k of F
    TypeError: F() missing 1 required positional argument: 'k'  -> required parameter k of F

Each is an observation of the installed release, which the API-change tables
(releases/api_changes.py) turn into the release that made it so. A circular import ("partially
initialized module") says nothing about a release and is not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME, MODULE, MEMBER, PARAMETER, REQUIRED = "name", "module", "member", "parameter", "required"
# substrings a line must hold to be read at all (the log reader's prefilter)
LITERALS = (
    b"cannot import name '",
    b"has no attribute '",
    b"No module named '",
    b"unexpected keyword argument '",
    b"required positional argument",
    b"required keyword-only argument",
)

_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,100}"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT}){{0,20}}"
# a function as Python names it in a TypeError: f, Class.method, outer.<locals>.inner
_CALLABLE = rf"((?:{_IDENT}|<locals>)(?:\.(?:{_IDENT}|<locals>)){{0,20}})\(\)"
# (kind, the literal a line must hold, the pattern): the literal decides cheaply whether to search
_PATTERNS = (
    (NAME, "cannot import name '", re.compile(rf"cannot import name '({_IDENT})' from '({_DOTTED})'")),
    (
        NAME,
        "has no attribute '",
        re.compile(rf"(?<!initialized )module '({_DOTTED})' has no attribute '({_IDENT})'"),
    ),
    (MODULE, "No module named '", re.compile(rf"No module named '({_IDENT}(?:\.{_IDENT}){{1,20}})'")),
    (
        MEMBER,
        "has no attribute '",
        re.compile(rf"(?:'({_IDENT})' object|type object '({_IDENT})') has no attribute '({_IDENT})'"),
    ),
    (
        PARAMETER,
        "unexpected keyword argument '",
        re.compile(rf"{_CALLABLE} got an unexpected keyword argument '({_IDENT})'"),
    ),
    (
        REQUIRED,
        " required ",
        re.compile(
            rf"{_CALLABLE} missing [0-9]{{1,3}} required (?:positional|keyword-only) arguments?: '({_IDENT})'"
        ),
    ),
)


@dataclass(frozen=True)
class MissingName:
    """One observation: ``owner`` lacks ``name`` (or, for REQUIRED, requires it).

    kind NAME: owner is the module, name the attribute; MODULE: owner is the module, name "";
    MEMBER: owner is the class; PARAMETER and REQUIRED: owner is the function as the message
    spells it (``LlamaAttention.forward``), name the parameter.
    """

    kind: str
    owner: str
    name: str
    origin: str  # "from the log, line N"

    @property
    def package_module(self) -> str | None:
        """The module whose package the observation proves installed (it imported), if it names one."""
        return self.owner if self.kind in (NAME, MODULE) else None

    def describe(self) -> str:
        """The observation in words: ``LlamaFlashAttention2 missing from transformers.models.llama``."""
        return {
            NAME: f"{self.name} missing from {self.owner}",
            MODULE: f"module {self.owner} missing",
            MEMBER: f"{self.owner}.{self.name} missing",
            PARAMETER: f"{self.owner}() rejecting the keyword {self.name}",
            REQUIRED: f"{self.owner}() requiring {self.name}",
        }[self.kind]


def missing_in(line: str, origin: str) -> list[MissingName]:
    """The observations one log line states (each pattern is linear in the line: no nested repeats)."""
    found = []
    for kind, literal, pattern in _PATTERNS:
        if literal not in line:
            continue
        for match in pattern.finditer(line):
            groups = [group for group in match.groups() if group is not None]
            if kind == NAME and literal.startswith("cannot"):
                groups.reverse()  # ('X', 'M') -> module first
            owner, name = groups if len(groups) == 2 else (groups[0], "")
            found.append(MissingName(kind, owner, name, origin))
    return found
