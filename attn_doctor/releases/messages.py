"""The message catalogue: what each release of the stack can raise, warn or log, and where.

A generated snapshot (snapshot/messages.zip, written by ``python -m tools.messages.build``
from the released files themselves). ``origins`` tells, for a line of a log, which entries can
have printed it: all patterns run at once as one RE2 set, so a line costs time linear in its
length whatever the catalogue's size. ``check`` never loads it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_doctor.releases.facts import SNAPSHOT

CATALOGUE = SNAPSHOT / "messages.zip"
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


# Python's own exception texts: a library message whose only fixed words are these ("{} has no
# attribute '{}'", triton's aggregate __setattr__) is not evidence of where a line comes from
PYTHON_WORDINGS = (
    "' object has no attribute '",
    "got an unexpected keyword argument '",
    "missing 1 required positional argument: '",
    "positional arguments but ",
    "object is not subscriptable",
    "object is not callable",
    "cannot import name '",
    "No module named '",
)


def says_where(literal: str) -> bool:
    """Whether a message's fixed words are its own, not only a Python exception's."""
    words = literal.strip(" '\"():.,")
    return not any(words in wording for wording in PYTHON_WORDINGS)


class Catalogue:
    """The catalogue's messages grouped by pattern (copies of one message in many files share one).

    Only the patterns are read up front; a group's entries are read when a line matches it, the
    ids when a rule names one (see ``layout``): explain on a short log reads a small part.
    """

    def __init__(self, member: Callable[[str], bytes]) -> None:
        self._member = member  # the bytes of one part of the layout, by name
        header = json.loads(member(HEADER) or b"{}")
        self.generated: str = header.get("generated", "")
        self.packages: dict[str, Any] = header.get("packages", {})
        self.source: str = header.get("source", "")
        self._patterns: list[list[str]] = json.loads(member(PATTERNS) or b"[]")  # [literal, pattern]
        self._chunks: dict[int, list[list[dict[str, Any]]]] = {}
        self._by_key: dict[str, list[int]] | None = None
        self._ids: dict[str, list[int]] | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Catalogue:
        """A catalogue held in memory: ``data`` as the generator builds it (tests, merging)."""
        parts = layout(data)
        return cls(lambda name: parts.get(name, b""))

    @property
    def messages(self) -> list[Message]:
        return [message for group in range(len(self._patterns)) for message in self._group(group)]

    def by_id(self, message_id: str) -> list[Message]:
        if self._ids is None:
            self._ids = json.loads(self._member(IDS) or b"{}")
        return [
            m for group in self._ids.get(message_id, []) for m in self._group(group) if m.id == message_id
        ]

    def named(self, reference: str) -> list[Message]:
        """The messages a rule names: ``DIST:module.function`` is every message of that function;
        ``...#words`` only those whose template holds ``words`` (a function that raises several
        messages, e.g. one per missing package, each reworded across releases)."""
        message_id, _, words = reference.partition("#")
        return [m for m in self.by_id(message_id) if words in m.template]

    def origins(self, line: str) -> list[Message]:
        """The entries whose pattern matches ``line``, most specific (longest literal) first.

        Every KEY-character window of the line is looked up among the first KEY characters of
        each entry's literal (a literal has at least 16): the few candidates meet their literal
        test and then their RE2 pattern. Time is linear in the line, whatever the catalogue's size.
        """
        index = self._index()
        candidates = {
            group
            for start in range(len(line) - KEY + 1)
            for group in index.get(line[start : start + KEY], ())
        }
        matched = [
            message
            for group in candidates
            if self._patterns[group][0] in line
            and says_where(self._patterns[group][0])
            and _regex(self._patterns[group][1]).search(line)
            for message in self._group(group)
        ]
        return sorted(matched, key=lambda m: (-len(m.literal), m.id))

    def _index(self) -> dict[str, list[int]]:
        if self._by_key is None:
            self._by_key = {}
            for group, (literal, _) in enumerate(self._patterns):
                self._by_key.setdefault(literal[:KEY], []).append(group)
        return self._by_key

    def _group(self, group: int) -> list[Message]:
        chunk = group // GROUPS_PER_CHUNK
        if chunk not in self._chunks:
            self._chunks[chunk] = json.loads(self._member(f"{CHUNK_FOLDER}/{chunk:04d}.json"))
        literal, pattern = self._patterns[group]
        return [_message(entry, literal, pattern) for entry in self._chunks[chunk][group % GROUPS_PER_CHUNK]]


HEADER, PATTERNS, IDS, CHUNK_FOLDER = "header.json", "patterns.json", "ids.json", "groups"
GROUPS_PER_CHUNK = 128


def layout(data: dict[str, Any]) -> dict[str, bytes]:
    """The parts of the catalogue file, by name: ``header.json`` (generated, source, packages),
    ``patterns.json`` ([literal, pattern] per group of entries with one pattern), ``ids.json`` (id
    to its groups) and ``groups/NNNN.json`` (GROUPS_PER_CHUNK groups' entries, without the
    literal and pattern their group holds). Sorted and compact: the same data, the same bytes."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in sorted(data.get("messages", []), key=lambda e: (e["id"], e["template"], e["file"])):
        key = (entry["literal"], entry["pattern"])
        groups.setdefault(key, []).append({k: v for k, v in entry.items() if k not in ("literal", "pattern")})
    keys = sorted(groups)
    ids: dict[str, list[int]] = {}
    for number, key in enumerate(keys):
        for entry in groups[key]:
            if number not in ids.setdefault(entry["id"], []):
                ids[entry["id"]].append(number)
    header = {k: v for k, v in data.items() if k != "messages"}
    parts = {HEADER: _json(header), PATTERNS: _json([list(key) for key in keys]), IDS: _json(ids)}
    for chunk in range(0, len(keys), GROUPS_PER_CHUNK):
        members = [groups[key] for key in keys[chunk : chunk + GROUPS_PER_CHUNK]]
        parts[f"{CHUNK_FOLDER}/{chunk // GROUPS_PER_CHUNK:04d}.json"] = _json(members)
    return parts


def write(data: dict[str, Any], out: Path) -> None:
    """The catalogue as a zip of its ``layout``: fixed dates, so the same data gives the same bytes."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, content in layout(data).items():
            archive.writestr(
                zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), content, zipfile.ZIP_DEFLATED
            )


def entries(catalogue: Catalogue) -> list[dict[str, Any]]:
    """Every entry as the generator wrote it (merging catalogues built apart)."""
    return [
        dataclasses.asdict(message) | {"releases": [list(r) for r in message.releases]}
        for message in catalogue.messages
    ]


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    import re2  # explain's dependency; check never loads the catalogue

    try:
        return re2.compile(pattern)
    except re2.error:
        return re2.compile(re2.escape(pattern))  # never matches a real line: the pattern is its own text


def _message(entry: dict[str, Any], literal: str, pattern: str) -> Message:
    return Message(
        id=entry["id"],
        package=entry["package"],
        file=entry["file"],
        function=entry["function"],
        kind=entry["kind"],
        template=entry["template"],
        pattern=pattern,
        literal=literal,
        releases=tuple((first, last) for first, last in entry["releases"]),
        guard=entry.get("guard", ""),
    )


@functools.lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """The shipped catalogue, or the file ATTN_DOCTOR_MESSAGE_CATALOGUE names ("" for none: the
    benchmarks compare explain with and without it)."""
    chosen = os.environ.get("ATTN_DOCTOR_MESSAGE_CATALOGUE")
    return read(CATALOGUE if chosen is None else Path(chosen))


def read(path: Path) -> Catalogue:
    """The catalogue file at ``path`` (as ``write`` makes it); empty where there is no file."""
    if not path.is_file():
        return Catalogue(lambda name: b"")
    archive = zipfile.ZipFile(path)  # open for the process: the groups are read as lines match
    names = set(archive.namelist())
    return Catalogue(lambda name: archive.read(name) if name in names else b"")
