"""Where a log's error and warning lines come from: the message catalogue's entries that print them.

A maintainer answers a report by searching its message in the source; this does it for every
release at once. While the log is read, the lines that look like an error or a warning are kept
(the last MAX_LINES distinct ones: memory does not grow with the log); afterwards each is matched
against the whole catalogue in one RE2 set pass. No rule is needed: a message no rule covers is
still reported with its package, function, releases and guard.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from packaging.version import Version

from attn_doctor.explain.reader import Block
from attn_doctor.explain.symptoms import lines_containing
from attn_doctor.releases.messages import Catalogue, Message

MAX_LINES = 256
TAIL_LINES = 32
_ERRORS = (b"Error", b"Exception", b"error:", b"ERROR", b"Assertion", b"FAILED")
# a traceback's echo of the source ("raise ImportError(") and its frame lines: not errors themselves
_SOURCE_ECHO = ("raise ", 'File "', "^")
# what an error or warning line holds: exception names, compiler and logger levels, asserts
_MARKS = (b"Error", b"Exception", b"Warning", b"error:", b"warning:", b"Assertion", b"WARNING", b"ERROR")


@dataclass(frozen=True)
class Origin:
    line: int  # 1-based line number in the log
    text: str
    messages: tuple[Message, ...]  # the entries that can print it, most specific first


class ErrorLines:
    """The distinct error-shaped lines of a log, the last MAX_LINES of them, with line numbers."""

    def __init__(self) -> None:
        self._lines: OrderedDict[bytes, int] = OrderedDict()
        self._tail: list[tuple[int, bytes]] = []  # the log's last TAIL_LINES lines, whatever they say

    def feed(self, block: Block) -> None:
        self._keep_tail(block)
        spans = sorted({span for mark in _MARKS for span in lines_containing(block.text, mark)})
        line, counted_to = block.first_line, 0
        for start, end in spans:
            line += block.text.count(b"\n", counted_to, start)
            counted_to = start
            text = block.text[start:end]
            self._lines.pop(text, None)
            self._lines[text] = line
            if len(self._lines) > MAX_LINES:
                self._lines.popitem(last=False)

    def _keep_tail(self, block: Block) -> None:
        lines = block.text.rstrip(b"\n").split(b"\n")[-TAIL_LINES:] if block.text else []
        last = block.first_line + block.text.count(b"\n") - 1
        numbered = [(last - len(lines) + 1 + index, text) for index, text in enumerate(lines)]
        self._tail = [*self._tail, *numbered][-TAIL_LINES:]

    def tail(self) -> list[tuple[int, str]]:
        """The log's last lines that are not error or warning lines (an INFO line of vLLM's that
        says why it failed): read for an origin only where no error line has one."""
        return [
            (line, text.decode("utf-8", "replace").strip())
            for line, text in self._tail
            if text.strip() and text not in self._lines
        ]

    def last_error(self) -> int | None:
        """The line of the log's last error (not a warning): what the run died of, as a rule."""
        errors = [line for text, line in self._lines.items() if any(mark in text for mark in _ERRORS)]
        return max(errors, default=None)

    def errors(self) -> list[tuple[int, str]]:
        """The error lines (not warnings), in log order."""
        return [
            (line, text)
            for line, text in self.lines()
            if any(m.decode() in text for m in _ERRORS) and not text.startswith(_SOURCE_ECHO)
        ]

    def lines(self) -> Iterator[tuple[int, str]]:
        for text, line in sorted(self._lines.items(), key=lambda item: item[1]):
            yield line, text.decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class ImpliedReleases:
    """What a message says about its package's release: only releases that carry it print it."""

    package: str
    runs: tuple[tuple[str, str], ...]  # the releases that carry every such line's message
    line: int  # the (last) log line that says so
    newest_read: str = ""  # the catalogue's newest release of the package: a run that ends there goes on

    def text(self) -> str:
        runs = ", ".join(first if first == last else f"{first}–{last}" for first, last in self.runs)
        later = " or later" if self.open_ended else ""
        return f"{self.package} {runs}{later} (from the message, line {self.line})"

    @property
    def open_ended(self) -> bool:
        """A message the newest release read still prints is likely in releases after it too."""
        return bool(self.runs) and self.runs[-1][1] == self.newest_read

    def releases(self, known: Iterable[str]) -> tuple[str, ...]:
        """Of ``known`` releases (and the runs' own ends), those the runs cover, in order."""
        versions = {_key(v): v for v in known if _is_release(v)}
        versions.update({_key(end): end for run in self.runs for end in run})
        inside = [
            key
            for key in versions
            if any(_key(first) <= key <= _key(last) for first, last in self.runs)
            or (self.open_ended and key > _key(self.runs[-1][1]))
        ]
        return tuple(versions[key] for key in sorted(inside))


# FA3 (hopper/) and FA4 (flash_attn/cute/) ship in flash-attention's tags but install as other
# distributions: their messages say nothing about the flash-attn release
OTHER_DISTRIBUTION = ("hopper/", "flash_attn/cute/")


def implied_releases(found: list[Origin], newest: dict[str, str] | None = None) -> list[ImpliedReleases]:
    """Per package, the releases whose code prints each of the log's lines traced to it: the
    union over the entries a line may come from, intersected over the lines (where they agree).
    ``newest``: each package's newest release the catalogue read."""
    by_package: dict[str, ImpliedReleases] = {}
    for origin in found:
        messages = [m for m in origin.messages if not m.file.startswith(OTHER_DISTRIBUTION)]
        for package in sorted({message.package for message in messages}):
            runs = union_runs(m.releases for m in messages if m.package == package)
            known = by_package.get(package)
            if known is not None:
                common = _intersection(known.runs, runs)
                runs = common or known.runs  # lines that disagree: keep what the first said
            newest_read = (newest or {}).get(package, "")
            by_package[package] = ImpliedReleases(package, runs, origin.line, newest_read)
    return sorted(by_package.values(), key=lambda implied: implied.package)


def union_runs(groups: Iterable[tuple[tuple[str, str], ...]]) -> tuple[tuple[str, str], ...]:
    """Runs of releases joined where they touch or overlap, in release order."""
    merged: list[tuple[str, str]] = []
    for first, last in sorted((run for group in groups for run in group), key=lambda r: _key(r[0])):
        if merged and _key(first) <= _key(merged[-1][1]):
            merged[-1] = (merged[-1][0], max(merged[-1][1], last, key=_key))
        else:
            merged.append((first, last))
    return tuple(merged)


def _intersection(
    a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    out = []
    for first_a, last_a in a:
        for first_b, last_b in b:
            first, last = max(first_a, first_b, key=_key), min(last_a, last_b, key=_key)
            if _key(first) <= _key(last):
                out.append((first, last))
    return tuple(out)


def _key(version: str) -> Version:
    return Version(version)


def _is_release(version: str) -> bool:
    try:
        return not Version(version).is_prerelease
    except ValueError:
        return False


def origins(lines: Iterable[tuple[int, str]], catalogue: Catalogue) -> list[Origin]:
    found = []
    for line, text in lines:
        messages = catalogue.origins(text)
        if messages:
            found.append(Origin(line, text, tuple(messages)))
    return found
