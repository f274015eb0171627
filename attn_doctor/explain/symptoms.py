"""The rules' symptom patterns, compiled once per run, each behind its literal prefilter.

A symptom is tested on a line only when the line contains the literal that every match of it
contains (engine/patterns.py); finding those lines is a substring search over a whole block,
which runs in C and touches each byte a bounded number of times per literal.
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
