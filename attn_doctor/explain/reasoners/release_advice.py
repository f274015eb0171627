"""What the releases say about a message: in which release it stops or starts being raised, which
releases carry the stated version, and the window a version message states ("Requires flash-attn
version >=2.1.1,<=2.8.3 but got 2.0.4"). Every release named here is one the catalogue read."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from attn_doctor.explain.origins import union_runs
from attn_doctor.releases.messages import Message

Runs = tuple[tuple[str, str], ...]
_SPEC = re.compile(
    r"(?:(?P<name>[A-Za-z][A-Za-z0-9_.-]{0,40})[`'\"]?\s*(?:version\s*)?)?"
    r"(?P<op>>=|<=|==|!=|~=|>|<)\s*v?(?P<version>[0-9]+(?:\.[0-9]+)+)"
)
_GOT = re.compile(
    r"\b(?:but (?:got|found|is|have)|got|found|installed|you have|current version is|"
    r"version (?:is|was)|the version)\s*[:=]?\s*(?:version\s*)?[`'\"]?v?([0-9]+(?:\.[0-9]+)+[0-9A-Za-z.+]*)",
    re.IGNORECASE,
)


# a message that passes another error on: "... because of the following error (...):\n{}"
_WRAPPER = re.compile(
    r"(?:following (?:error|exception)|its traceback|caused by|original (?:error|exception))"
    r"[^{}]{0,80}:?\s*\{\}\s*$",
    re.IGNORECASE,
)
# the words of a change to the API: what calling code written for an earlier release meets
_REMOVAL = re.compile(
    r"deprecat|removed|no longer|renamed|has been (?:moved|replaced)|instead|not allowed anymore|"
    r"unexpected|unknown (?:argument|option|key)|moved to",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Advice:
    fix: str
    facts: tuple[str, ...]


def version_key(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def covers(runs: Runs, version: str) -> bool:
    key = version_key(version)
    return key is not None and any(
        (first_key := version_key(first)) is not None
        and (last_key := version_key(last)) is not None
        and first_key <= key <= last_key
        for first, last in runs
    )


def run_text(runs: Runs) -> str:
    return ", ".join(first if first == last else f"{first}–{last}" for first, last in runs)


class Related:
    """The catalogue's other entries a message's advice may need, read only when it does (the
    function's entries are a read of the catalogue's id index): ``function``, every entry of the
    raising function; ``wordings``, the same check in other words (its guard, or most words alike)
    and the same words elsewhere in the package (``same_words``)."""

    def __init__(self, message: Message, same_words: list[Message], by_id: Callable[[str], list[Message]]):
        self.message, self.same_words, self._by_id = message, same_words, by_id

    @functools.cached_property
    def function(self) -> list[Message]:
        return self._by_id(self.message.id)

    @functools.cached_property
    def wordings(self) -> list[Message]:
        same_check = [m for m in self.function if m.guard == self.message.guard or _reworded(m, self.message)]
        return [*same_check, *self.same_words]

    def runs(self) -> Runs:
        return tuple(run for wording in self.wordings for run in wording.releases) or self.message.releases

    def function_runs(self) -> Runs:
        return tuple(run for m in self.function for run in m.releases)


REWORDED = 0.6  # of the template's characters in common (difflib's ratio)


def _reworded(other: Message, message: Message) -> bool:
    """The same raise in other words: one exception class, most words alike."""
    if other.kind != message.kind:
        return False
    return difflib.SequenceMatcher(None, other.template, message.template).ratio() >= REWORDED


def advise(
    message: Message,
    kind: str,
    line: str,
    related: Related,
    releases_read: Iterable[str],
    stated: tuple[str, str] | None,
) -> Advice:
    """The fix and facts for ``message`` raised on ``line``: a release where a related entry raises
    it has not dropped it; a check is added in a release only where its function existed before.
    ``stated``: (version, origin) of the raising package."""
    package = message.package
    read = sorted((v for v in releases_read if (k := version_key(v)) and not k.is_prerelease), key=Version)
    runs = message.releases
    facts = []
    if stated is not None:
        version, origin = stated
        if covers(runs, version):
            facts.append(
                f"{package} {version} ({origin}) is one of the releases that raise it ({run_text(runs)})"
            )
        elif version_key(version) is not None and runs:
            facts.append(
                f"{package} {version} ({origin}) does not raise it in these words (only {run_text(runs)} do)"
            )
    window = _window(line, related)
    if window is not None:
        return Advice(window.fix, (*facts, *window.facts))
    if _WRAPPER.search(message.template):
        inner = "the error it wraps (its last field: the lines after it in the log) is the cause"
        return Advice(f"{package} only passes another error on: {inner}", tuple(facts))
    gone = _first_after(read, runs)
    appears = _first_before(read, runs)
    if gone and covers(related.runs(), gone):
        gone = None  # another entry (other words, or the same words elsewhere) raises it there
    if appears and (covers(related.runs(), appears) or not covers(related.function_runs(), appears)):
        # an earlier release raises it in other words or elsewhere, or the function is new in the
        # release: the check did not start there, the code did
        appears = None
    if kind == "usage":
        fix = "a user error: the call does not meet this check; change the arguments as the message says"
        if gone:
            fix += f" (or upgrade {package} to {gone} or later: it no longer raises it)"
        return Advice(fix, tuple(facts))
    if gone:
        last = runs[-1][1]
        fix = (
            f"gone from {package} {gone} (no release read after {last} prints it): upgrade {package} "
            f"to {gone} or later"
        )
        return Advice(fix, tuple(facts))
    if appears:
        start = runs[0][0]
        if _REMOVAL.search(message.template):  # a change of the API: the calling code is older
            fix = (
                f"appears in {package} {start}: pin {package}<{start}, or update the calling code "
                f"to what {start} expects"
            )
        else:  # a check added to existing code: earlier releases did not make it, they did not do more
            fix = f"a check {package} makes since {start} ({appears} did not): meet it, as the message says"
        return Advice(fix, tuple(facts))
    if kind == "install":
        subject = "install what the message names"
    elif message.guard:
        subject = "change what the condition tests"
    else:
        subject = "the log's lines around it say what it met"
    condition = " under this condition" if message.guard else ""
    every = run_text(union_runs([related.runs()]))
    return Advice(f"{package} {every} raise it{condition}: {subject}", tuple(facts))


def _first_after(read: list[str], runs: Runs) -> str | None:
    """The first release read after the message's last one, where it is no longer raised."""
    if not runs:
        return None
    end = version_key(runs[-1][1])
    later = [v for v in read if end is not None and Version(v) > end and not covers(runs, v)]
    return later[0] if later else None


def _first_before(read: list[str], runs: Runs) -> str | None:
    """The last release read before the message's first one, which did not raise it."""
    if not runs:
        return None
    start = version_key(runs[0][0])
    earlier = [v for v in read if start is not None and Version(v) < start and not covers(runs, v)]
    return earlier[-1] if earlier else None


def _window(line: str, related: Related) -> Advice | None:
    """A version window the line states and the version it got: which side of it that is, and the
    releases of the raising package whose own window (in its words) accepts it."""
    specs = list(_SPEC.finditer(line))
    got = _GOT.search(line)
    if not specs or got is None:
        return None
    name = next((spec["name"] for spec in specs if spec["name"] and not spec["name"].isdigit()), "")
    try:
        window = SpecifierSet(",".join(spec["op"] + spec["version"] for spec in specs))
    except InvalidSpecifier:
        return None
    version = got[1]
    if version_key(version) is None or window.contains(version, prereleases=True):
        return None
    required = f"{name}{window}" if name else str(window)
    facts = [f"{name or 'the version'} {version} is outside {window} (the message's own window)"]
    fix = f"install {required} (pip install '{required}')"
    accepting = [
        wording
        for wording in related.wordings
        if (spec := _template_window(wording.template)) is not None
        and spec.contains(version, prereleases=True)
    ]
    if accepting:
        runs = tuple(run for wording in accepting for run in wording.releases)
        fix += f", or {accepting[0].package} {run_text(runs)}, whose window accepts {version}"
    return Advice(fix, tuple(facts))


def _template_window(template: str) -> SpecifierSet | None:
    specs = list(_SPEC.finditer(template))
    if not specs:
        return None
    try:
        return SpecifierSet(",".join(spec["op"] + spec["version"] for spec in specs))
    except InvalidSpecifier:
        return None
