"""The message catalogue: what each release of the stack can raise, warn or log, and where.

A generated snapshot (snapshot/messages.json.gz, written by ``python -m tools.messages.build``
from the released files themselves). ``origins`` tells, for a line of a log, which entries can
have printed it: all patterns run at once as one RE2 set, so a line costs time linear in its
length whatever the catalogue's size. ``check`` never loads it.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_doctor.releases.facts import SNAPSHOT

CATALOGUE = SNAPSHOT / "messages.json.gz"
KEY = 8  # characters of a literal that index it
# a formatted value in a pattern (tools/messages/build.py writes them): any text of the line, which
# the reader caps at 4 KiB; RE2 keeps the match linear (a counted .{0,N} would multiply the program)
FIELD_PATTERN = ".*"


@dataclass(frozen=True)
class Message:
    id: str  # "transformers:modeling_utils.PreTrainedModel._check_and_enable_flash_attn_2"
    package: str  # the distribution
    file: str
    function: str
    kind: str  # the exception class, "warning", "log.warning", "assert", "TORCH_CHECK"
    template: str
    pattern: str
    literal: str
    releases: tuple[tuple[str, str], ...]  # runs of releases that carry it, [first, last]
    guard: str  # the condition that leads to it, as source

    def where(self) -> str:
        """'transformers (modeling_utils.py, PreTrainedModel._check_and_enable_flash_attn_2)'."""
        place = self.file.split("/", 1)[-1]
        return f"{self.package} ({place}{', ' + self.function if self.function else ''})"

    def release_text(self) -> str:
        return ", ".join(first if first == last else f"{first}–{last}" for first, last in self.releases)


class Catalogue:
    def __init__(self, data: dict[str, Any]) -> None:
        self.generated: str = data.get("generated", "")
        self.packages: dict[str, Any] = data.get("packages", {})
        self._entries: list[dict[str, Any]] = data.get("messages", [])  # made Messages when asked
        self._by_key: dict[str, list[dict[str, Any]]] | None = None
        self._ids: dict[str, list[dict[str, Any]]] | None = None

    @property
    def messages(self) -> list[Message]:
        return [_message(entry) for entry in self._entries]

    def by_id(self, message_id: str) -> list[Message]:
        if self._ids is None:
            self._ids = {}
            for entry in self._entries:
                self._ids.setdefault(entry["id"], []).append(entry)
        return [_message(entry) for entry in self._ids.get(message_id, [])]

    def origins(self, line: str) -> list[Message]:
        """The entries whose pattern matches ``line``, most specific (longest literal) first.

        Every KEY-character window of the line is looked up among the first KEY characters of
        each entry's literal (a literal has at least 16): the few candidates meet their literal
        test and then their RE2 pattern. Time is linear in the line, whatever the catalogue's size.
        """
        index = self._index()
        candidates = {
            id(entry): entry
            for start in range(len(line) - KEY + 1)
            for entry in index.get(line[start : start + KEY], ())
        }
        matched = [
            _message(e)
            for e in candidates.values()
            if e["literal"] in line and _regex(e["pattern"]).search(line)
        ]
        return sorted(matched, key=lambda m: (-len(m.literal), m.id))

    def _index(self) -> dict[str, list[dict[str, Any]]]:
        if self._by_key is None:
            self._by_key = {}
            for entry in self._entries:
                self._by_key.setdefault(entry["literal"][:KEY], []).append(entry)
        return self._by_key


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    import re2  # explain's dependency; check never loads the catalogue

    try:
        return re2.compile(pattern)
    except re2.error:
        return re2.compile(re2.escape(pattern))  # never matches a real line: the pattern is its own text


def _message(entry: dict[str, Any]) -> Message:
    return Message(
        id=entry["id"],
        package=entry["package"],
        file=entry["file"],
        function=entry["function"],
        kind=entry["kind"],
        template=entry["template"],
        pattern=entry["pattern"],
        literal=entry["literal"],
        releases=tuple((first, last) for first, last in entry["releases"]),
        guard=entry.get("guard", ""),
    )


@functools.lru_cache(maxsize=1)
def catalogue(path: Path | None = None) -> Catalogue:
    """The shipped catalogue, or the file ATTN_DOCTOR_MESSAGE_CATALOGUE names ("" for none: the
    benchmarks compare explain with and without it); empty where there is no file."""
    if path is None:
        chosen = os.environ.get("ATTN_DOCTOR_MESSAGE_CATALOGUE")
        path = CATALOGUE if chosen is None else Path(chosen)
    if not path.is_file():
        return Catalogue({})
    with gzip.open(path, "rb") as handle:
        return Catalogue(json.loads(handle.read()))
