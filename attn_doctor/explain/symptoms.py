"""The rules' symptom patterns, compiled once per run, each behind its literal prefilter.

A symptom is tested on a line only when the line contains the literal that every match of it
contains (engine/patterns.py). LiteralIndex finds those lines for all literals at once: one RE2
set (a DFA) over each window of a block, then over each line of a window that holds any literal.
A substring search per literal (lines_containing, the fallback) costs bytes times literals, and
CPython's search steps one byte at a time through text made of the literals' own characters (4 KiB
of spaces cost every literal with a space in it 4,096 steps): 3 MB/s with 270 literals.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from attn_doctor.engine.patterns import analyse
from attn_doctor.engine.schema import Rule
from attn_doctor.releases.messages import FIELD_PATTERN, Catalogue, Message

_UNESCAPE = re.compile(r"\\(.)")  # re.escape's backslashes, off a catalogue pattern's literal parts


@dataclass(frozen=True)
class Symptom:
    pattern: str
    literal: bytes  # UTF-8 of the longest literal every match contains: the prefilter
    runs: tuple[bytes, ...]  # every literal a match contains, in order
    regex: Any  # a compiled RE2 (or re) pattern; None: the pattern is its literal, a substring test decides
    rules: tuple[str, ...]  # the rules that name it: the fewer, the more telling a match

    def matches(self, line: bytes) -> bool:
        """Whether the pattern matches ``line``, a line that contains the literal.

        The regex runs only on a line that holds all the pattern's literals in order: a line
        that repeats one literal and never completes the match (the case where backtracking
        costs most) is turned away by substring searches.
        """
        if self.regex is None:
            return True
        return _in_order(line, self.runs) and self.regex.search(line.decode("utf-8", "replace")) is not None


def compile_symptoms(rules: list[Rule], catalogue: Catalogue | None = None) -> list[Symptom]:
    """One Symptom per distinct pattern. The rules are validated: every pattern is in the safe subset.
    A rule's ``messages`` add the catalogue's pattern of each release's wording of them."""
    naming: dict[str, list[str]] = {}
    for rule in rules:
        for pattern in rule.symptoms:
            naming.setdefault(pattern, []).append(rule.id)
    worded: dict[str, tuple[Message, list[str]]] = {}
    for rule in rules:
        for message_id in rule.messages:
            for message in catalogue.named(message_id) if catalogue else []:
                worded.setdefault(message.pattern, (message, []))[1].append(rule.id)
    symptoms = [
        _worded(message, tuple(ids)) for message, ids in worded.values() if message.pattern not in naming
    ]
    for pattern, (_, ids) in worded.items():
        if pattern in naming:  # a rule quotes a message another names by id: one symptom, both rules
            naming[pattern] += [rule_id for rule_id in ids if rule_id not in naming[pattern]]
    for pattern, rule_ids in naming.items():
        shape = analyse(pattern)
        symptoms.append(
            Symptom(
                pattern=pattern,
                literal=shape.literal.encode("utf-8"),
                runs=tuple(run.encode("utf-8") for run in shape.runs),
                regex=None if shape.plain else _compiled(pattern),
                rules=tuple(rule_ids),
            )
        )
    return symptoms


def _worded(message: Message, rule_ids: tuple[str, ...]) -> Symptom:
    """A catalogue message as a symptom: its literal parts (in order) are the prefilter."""
    runs = tuple(
        _UNESCAPE.sub(r"\1", part).encode("utf-8") for part in message.pattern.split(FIELD_PATTERN) if part
    )
    return Symptom(
        pattern=message.pattern,
        literal=message.literal.encode("utf-8"),
        runs=runs,
        regex=_compiled(message.pattern),
        rules=rule_ids,
    )


def patterns_of(symptoms: list[Symptom]) -> dict[str, tuple[str, ...]]:
    """Each rule's patterns: its own symptoms and its messages' wordings."""
    found: dict[str, list[str]] = {}
    for symptom in symptoms:
        for rule_id in symptom.rules:
            found.setdefault(rule_id, []).append(symptom.pattern)
    return {rule_id: tuple(patterns) for rule_id, patterns in found.items()}


def _compiled(pattern: str) -> Any:
    """RE2 where it is installed (linear time on any line); Python's re, bounded by the safe subset
    the pattern was validated against, where RE2 has no wheel or refuses the pattern."""
    try:
        import re2  # google-re2: imported by explain only, never by check

        return re2.compile(pattern)
    except Exception:  # noqa: BLE001 - no RE2 here (ImportError), or a pattern it refuses (re2.error)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(pattern)


WINDOW_BYTES = 16 << 10  # the set runs on a window, and on each line only of a window it matched


class LiteralIndex:
    """The lines of a block holding each of ``literals``, in time linear in the block whatever the
    number of literals or the text (RE2's set; the substring searches where RE2 is missing or its
    DFA runs out of memory, which its budget, sized to the literals, is there to prevent)."""

    def __init__(self, literals: list[bytes]) -> None:
        self.literals = literals
        self._set: Any = None
        try:
            import re2

            options = re2.Options()
            options.encoding = re2.Options.Encoding.LATIN1  # bytes as they are, valid UTF-8 or not
            # the shipped literals' DFA thrashes below ~12 MB (about 800 bytes a literal byte): room to spare
            options.max_mem = max(64 << 20, 4096 * sum(map(len, literals)))
            options.log_errors = False
            matcher = re2.Set.SearchSet(options)
            matcher.Add(b"")  # index 0 matches any text: an answer without it is a failed search
            for literal in literals:
                matcher.Add(re2.escape(literal))
            matcher.Compile()
            self._set = matcher
        except Exception:  # noqa: BLE001 - no RE2 here (ImportError), or a set it refuses (re2.error)
            self._set = None

    def lines(self, text: bytes) -> Iterator[tuple[int, int, bytes]]:
        """(start, end, literal) for each literal in each line of ``text`` (whole ``\\n``-ended lines)."""
        position = 0
        while position < len(text):
            cut = text.find(b"\n", position + WINDOW_BYTES) + 1 or len(text)
            yield from self._window(text[position:cut], position)
            position = cut

    def _window(self, window: bytes, offset: int) -> Iterator[tuple[int, int, bytes]]:
        found = None if self._set is None else self._set.Match(window)
        if found is None:  # no RE2, or its DFA gave up: a substring search per literal
            for literal in self.literals:
                for start, end in lines_containing(window, literal):
                    yield offset + start, offset + end, literal
            return
        if len(found) == 1:  # the empty pattern alone: no literal in this window
            return
        start = offset
        for line in window.split(b"\n")[:-1]:
            end = start + len(line)
            for literal in self._in_line(line):
                yield start, end, literal
            start = end + 1

    def _in_line(self, line: bytes) -> list[bytes]:
        found = self._set.Match(line)
        if found is None:  # the DFA gave up on this line: a substring test per literal
            return [literal for literal in self.literals if literal in line]
        return [self.literals[index - 1] for index in found if index]


def lines_containing(text: bytes, literal: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line of ``text`` (whole lines, ``\\n``-terminated) containing ``literal``.

    After a hit the search resumes at the end of that line, so each byte is scanned at most twice
    (backwards to the line start, forwards past it) however often the literal repeats.
    """
    position = text.find(literal)
    while position >= 0:
        start = text.rfind(b"\n", 0, position) + 1
        end = text.index(b"\n", position)
        yield start, end
        position = text.find(literal, end)


def _in_order(line: bytes, runs: tuple[bytes, ...]) -> bool:
    position = 0
    for run in runs:
        found = line.find(run, position)
        if found < 0:
            return False
        position = found + len(run)
    return True
