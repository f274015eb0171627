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
FIELD_PATTERN = ".{0,200}"  # a formatted value in a pattern (tools/messages/build.py writes them)


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
        self.messages = [_message(entry) for entry in data.get("messages", [])]
        self._set: Any = None
        self._ids: dict[str, list[Message]] | None = None

    def by_id(self, message_id: str) -> list[Message]:
        if self._ids is None:
            self._ids = {}
            for message in self.messages:
                self._ids.setdefault(message.id, []).append(message)
        return self._ids.get(message_id, [])

    def origins(self, line: str) -> list[Message]:
        """The entries whose pattern matches ``line``, most specific (longest literal) first."""
        if not self.messages:
            return []
        matched = self._compiled().Match(line) or []
        return sorted((self.messages[i] for i in matched), key=lambda m: (-len(m.literal), m.id))

    def _compiled(self) -> Any:
        if self._set is None:
            import re2

            options = re2.Options()
            options.max_mem = 256 << 20  # the DFA of a few thousand patterns
            self._set = re2.Set.SearchSet(options)
            for message in self.messages:
                self._set.Add(message.pattern)
            self._set.Compile()
        return self._set


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
