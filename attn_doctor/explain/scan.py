"""Run the symptoms over a log's blocks: which patterns match, on how many lines, first and last.

Per block: the lines containing each distinct literal (symptoms.LiteralIndex); on those lines
only, the patterns that need a regex run it, remembering recent lines so that a line
repeated thousands of times (a per-thread CUDA assert) is matched once. Only the count and the
first and last matching line of each pattern are kept, so memory does not grow with the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from attn_doctor.explain.reader import Block
from attn_doctor.explain.symptoms import LiteralIndex, Symptom

_REMEMBERED_LINES = 1024  # per regex symptom: at most 4 MiB of lines


@dataclass(frozen=True)
class Occurrence:
    line: int  # 1-based line number
    text: bytes  # the line, at most LINE_CAP bytes


@dataclass
class Hits:
    """The lines one pattern matched."""

    count: int = 0
    first: Occurrence | None = None
    last: Occurrence | None = None

    def add(self, occurrence: Occurrence) -> None:
        self.count += 1
        self.first = self.first or occurrence
        self.last = occurrence


@dataclass
class _Matcher:
    """A symptom's verdict on recent lines: a regex runs once per distinct line."""

    symptom: Symptom
    seen: dict[bytes, bool] = field(default_factory=dict)

    def matches(self, line: bytes) -> bool:
        """For a line that contains the symptom's literal."""
        if self.symptom.regex is None:
            return True
        verdict = self.seen.get(line)
        if verdict is None:
            if len(self.seen) >= _REMEMBERED_LINES:
                self.seen.clear()
            verdict = self.seen[line] = self.symptom.matches(line)
        return verdict


def scan(blocks: Iterable[Block], symptoms: list[Symptom]) -> dict[str, Hits]:
    """Hits per pattern, for the patterns that matched at least one line."""
    by_literal: dict[bytes, list[_Matcher]] = {}
    for symptom in symptoms:
        by_literal.setdefault(symptom.literal, []).append(_Matcher(symptom))
    index = LiteralIndex(list(by_literal))
    hits: dict[str, Hits] = {}
    for block in blocks:
        found = [
            (start, end, matcher.symptom.pattern)
            for start, end, literal in index.lines(block.text)
            for matcher in by_literal[literal]
            if matcher.matches(block.text[start:end])
        ]
        found.sort()
        line, counted_to = block.first_line, 0
        for start, end, pattern in found:
            line += block.text.count(b"\n", counted_to, start)
            counted_to = start
            hits.setdefault(pattern, Hits()).add(Occurrence(line, block.text[start:end]))
    return hits
