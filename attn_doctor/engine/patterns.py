"""Symptom patterns: the safe subset of Python regular expressions, and the literal each requires.

`attn-doctor explain` runs every symptom over logs of any size and origin, so a symptom must be
cheap on any line (docs/rules.md, "Symptoms"):

- it matches within one line, and names a literal of at least MIN_LITERAL characters that every
  match contains, so a substring search (linear, in C) picks the few lines worth a regex;
- it cannot backtrack badly: no backreferences, conditionals or look-around; a quantifier applies
  to one character (or ``?`` to a group with no quantifier inside); and the ways one match attempt
  can split a line multiply to at most MAX_WAYS, where an unbounded quantifier counts LINE_CAP ways.
  With lines cut to LINE_CAP characters, one search is at most LINE_CAP x MAX_WAYS steps.

`explain` runs the patterns with RE2 (google-re2), whose time is linear in the line whatever the
pattern; the subset keeps them RE2 patterns and bounds Python's ``re``, the fallback where RE2 has
no wheel (benchmarks/explain_throughput.py measures both on hostile lines).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    from re import _parser as sre_parse
else:  # pragma: no cover
    import sre_parse

LINE_CAP = 4096  # explain cuts every line to this many bytes
MIN_LITERAL = 4
MAX_WAYS = 4 * LINE_CAP  # one unbounded quantifier and two optional characters, or a 4-way choice
MAX_PATTERN_CHARS = 1000

_ONE_CHARACTER = {sre_parse.LITERAL, sre_parse.NOT_LITERAL, sre_parse.ANY, sre_parse.IN, sre_parse.CATEGORY}
_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, getattr(sre_parse, "POSSESSIVE_REPEAT", None)}
_ATOMIC = getattr(sre_parse, "ATOMIC_GROUP", None)
_FORBIDDEN = {
    sre_parse.GROUPREF: "backreferences",
    sre_parse.GROUPREF_EXISTS: "conditional groups",
    sre_parse.ASSERT: "look-around assertions",
    sre_parse.ASSERT_NOT: "look-around assertions",
}

Item = tuple[Any, Any]  # (opcode, argument) of the parsed pattern
ANALYSER = f"{zlib.crc32(Path(__file__).read_bytes()):08x}"  # remembered shapes hold for this code only


class UnsafePattern(ValueError):
    """A pattern outside the safe subset; the message says which limit it breaks."""


@dataclass(frozen=True)
class Shape:
    literal: str  # the longest literal that every match contains
    runs: tuple[str, ...]  # every literal a match contains, in the order a match contains them
    plain: bool  # the pattern is exactly its literal: a substring test decides a match


_KNOWN: dict[str, Shape] = {}  # shapes found in this run or remembered from an earlier one
_NEW: set[str] = set()  # found in this run: what the cache lacks
MAX_REMEMBERED = 4096


def analyse(pattern: str) -> Shape:
    """The pattern's shape. Raises ``re.error`` (not a pattern) or UnsafePattern.

    Parsing a pattern is a third of loading the rules, so shapes are remembered: within a run
    (validating a rule and compiling its symptoms both ask) and, through the rules cache
    (engine/loader.py), between runs. Only patterns that passed are remembered.
    """
    shape = _KNOWN.get(pattern)
    if shape is None:
        shape = _KNOWN[pattern] = _analyse(pattern)
        _NEW.add(pattern)
    return shape


def remember(saved: Any) -> None:
    """Shapes an earlier run found (``remembered()``'s value); anything malformed is ignored."""
    if (
        not isinstance(saved, dict)
        or saved.get("analyser") != ANALYSER
        or not isinstance(saved.get("shapes"), dict)
    ):
        return
    for pattern, value in saved["shapes"].items():
        if (
            isinstance(value, list)
            and len(value) == 3
            and isinstance(value[0], str)
            and isinstance(value[1], list)
            and all(isinstance(run, str) for run in value[1])
            and isinstance(value[2], bool)
        ):
            _KNOWN.setdefault(pattern, Shape(literal=value[0], runs=tuple(value[1]), plain=value[2]))


def remembered() -> dict[str, Any] | None:
    """The shapes to keep for the next run, or None when this run found none the cache lacks."""
    if not _NEW:
        return None
    shapes = {p: [s.literal, list(s.runs), s.plain] for p, s in list(_KNOWN.items())[-MAX_REMEMBERED:]}
    _NEW.clear()
    return {"analyser": ANALYSER, "shapes": shapes}


def _analyse(pattern: str) -> Shape:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UnsafePattern(f"longer than {MAX_PATTERN_CHARS} characters")
    try:
        parsed = sre_parse.parse(pattern)
    except RecursionError:  # '(' * 500
        raise UnsafePattern("nested too deeply (RecursionError)") from None
    except OverflowError as exc:  # 'a{99999999999}': "the repetition number is too large"
        raise UnsafePattern(str(exc)) from None
    if parsed.state.flags & sre_parse.SRE_FLAG_IGNORECASE:
        raise UnsafePattern("case-insensitive matching ((?i)) is not supported: symptoms are verbatim text")
    ways = _ways(parsed.data)
    if ways > MAX_WAYS:
        raise UnsafePattern(
            f"may backtrack too much: its quantifiers and alternatives allow {ways} ways per match "
            f"attempt (at most {MAX_WAYS}: one unbounded quantifier such as .* and a few small ones)"
        )
    items = list(_flat(parsed.data))
    if any(op is sre_parse.LITERAL and chr(av) in "\r\n" for op, av in items):
        raise UnsafePattern("a symptom matches within one line: it cannot contain a line break")
    runs = tuple(run for run in _literal_runs(items) if run)
    literal = max(runs, key=len, default="")
    if len(literal) < MIN_LITERAL:
        raise UnsafePattern(
            f"needs a literal of at least {MIN_LITERAL} characters that every match contains "
            f"(longest: {literal!r}); write alternatives as separate symptoms"
        )
    return Shape(literal=literal, runs=runs, plain=all(op is sre_parse.LITERAL for op, _ in items))


def _ways(items: list[Item]) -> int:
    """How many ways one match attempt can split a line (an upper bound); raises on what is not allowed."""
    total = 1
    for op, av in items:
        if op in _FORBIDDEN:
            raise UnsafePattern(f"{_FORBIDDEN[op]} are not allowed")
        if op is sre_parse.SUBPATTERN:
            if av[1] & sre_parse.SRE_FLAG_IGNORECASE:
                raise UnsafePattern("case-insensitive matching ((?i:...)) is not supported")
            total *= _ways(av[3].data)
        elif op is _ATOMIC:
            total *= _ways(av.data)
        elif op is sre_parse.BRANCH:
            total *= sum(_ways(branch.data) for branch in av[1])
        elif op in _REPEATS:
            total *= _repeat_ways(*av)
    return total


def _repeat_ways(low: int, high: int, body: Any) -> int:
    if len(body.data) == 1 and body.data[0][0] in _ONE_CHARACTER:
        return LINE_CAP if high == sre_parse.MAXREPEAT else high - low + 1
    if high > 1 or any(op in _REPEATS for op, _ in _flat(body.data)):
        raise UnsafePattern(
            "nested or grouped quantifiers (such as (a+)+ or (ab)*) are not allowed: a quantifier "
            "applies to one character, or ? to a group with no quantifier inside"
        )
    return 2 * _ways(body.data)


def _flat(items: list[Item]) -> Iterator[Item]:
    """The items with groups opened: a group's content is as required as the group."""
    for op, av in items:
        if op is sre_parse.SUBPATTERN:
            yield from _flat(av[3].data)
        elif op is _ATOMIC:
            yield from _flat(av.data)
        else:
            yield op, av


def _literal_runs(items: list[Item]) -> list[str]:
    """Runs of literal characters; zero-width assertions (^, $, \\b) do not break a run."""
    runs, run = [], ""
    for op, av in items:
        if op is sre_parse.LITERAL:
            run += chr(av)
        elif op is not sre_parse.AT:
            runs.append(run)
            run = ""
    return [*runs, run]
