"""The API-change tables (snapshot/api-changes.json, written by tools/api_changes.py from the
released code of every release): which release of a package added, removed or renamed a name,
module or parameter. They turn an observed API error (facts/missing_names.py) into the release
behind it: ``LlamaFlashAttention2`` is missing because transformers 4.48.0 removed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from attn_doctor.facts.missing_names import MEMBER, MODULE, NAME, REQUIRED, MissingName

# the top-level import name of each package the tables cover
TOP_MODULES = {
    "transformers": "transformers",
    "flash_attn": "flash-attn",
    "triton": "triton",
    "xformers": "xformers",
    "fla": "flash-linear-attention",
}
# a bare method name in a TypeError (Python < 3.10 omits the class) could be any class's
_AMBIGUOUS_CALLABLES = {"__init__", "forward", "__call__", "backward", "update", "apply"}
# parameter events, as events of "the caller's call fits": for REQUIRED the observed state is
# "required", so a parameter that became required (or was added) is what the old caller lacks
_REQUIRED_EVENTS = {
    "added": "added",
    "removed": "removed",
    "became_required": "added",
    "became_optional": "removed",
}


@dataclass(frozen=True)
class Timeline:
    """One property of a package's API across its releases: present from an "added" event, absent
    from a "removed" one (a name importable, a keyword accepted, a parameter required)."""

    package: str
    subject: str  # in words: "LlamaFlashAttention2 in transformers.models.llama.modeling_llama"
    events: tuple[tuple[str, str], ...]  # ("added" | "removed", version), oldest first
    compared: tuple[str, ...]  # the releases the tables read, oldest first
    renamed_to: str | None = None
    conditional: tuple[tuple[str, str], ...] = ()  # runs of releases where it exists only on some paths

    def present_at(self, version: str) -> bool | None:
        """Whether the property holds in ``version``; None before the releases compared."""
        at = _parsed(version)
        if at is None or at < Version(self.compared[0]):
            return None
        state = self.events[0][0] == "removed" if self.events else True
        for event, release in self.events:
            if Version(release) <= at:
                state = event == "added"
        return state

    def conditional_at(self, version: str) -> bool:
        at = _parsed(version)
        return at is not None and any(
            Version(first) <= at <= Version(last) for first, last in self.conditional
        )

    def cause(self, version: str | None, present: bool) -> tuple[str, str] | None:
        """The event that makes the property ``present`` (or not) in ``version``: the last such event
        at or before it, else the next opposite event after it; with no version, the latest event
        that sets that state."""
        wanted = "added" if present else "removed"
        at = _parsed(version) if version else None
        if at is None:
            setting = [event for event in self.events if event[0] == wanted]
            return setting[-1] if setting else None
        before = [event for event in self.events if event[0] == wanted and Version(event[1]) <= at]
        if before:
            return before[-1]
        after = [event for event in self.events if event[0] != wanted and Version(event[1]) > at]
        return after[0] if after else None

    def last_before(self, release: str) -> str | None:
        """The newest compared release older than ``release``."""
        older = [v for v in self.compared if Version(v) < Version(release)]
        return older[-1] if older else None


class ApiChanges:
    """The tables of one snapshot (ReleaseFacts.api_changes)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.packages: dict[str, Any] = data.get("packages", {})

    def timelines(self, seen: MissingName) -> list[Timeline]:
        """The properties an observation is about, in the packages the tables cover."""
        if seen.kind in (NAME, MODULE):
            package = TOP_MODULES.get(seen.owner.split(".")[0])
            return [] if package is None else self._module_level(package, seen)
        if seen.kind == MEMBER:
            suffix = f".{seen.owner}.{seen.name}"
            return [
                self._name(package, qualified)
                for package, table in self.packages.items()
                for qualified in _ending(table["names"], suffix)
            ]
        if seen.owner.split(".")[-1] in _AMBIGUOUS_CALLABLES and "." not in seen.owner:
            return []
        callable_suffix = "." + ".".join(seen.owner.split(".")[-2:])
        return [
            self._parameter(package, qualified, seen)
            for package, table in self.packages.items()
            for qualified in _ending(table["parameters"], callable_suffix)
            if seen.name in table["parameters"][qualified]
        ]

    def named(self, name: str) -> list[Timeline]:
        """Every module-level ``name`` the tables hold, in any module of any package covered
        (an import error that does not say from where: "cannot import name 'X'")."""
        suffix = "." + name
        return [
            self._name(package, qualified)
            for package, table in self.packages.items()
            for qualified in _ending(table["names"], suffix)
        ]

    def _module_level(self, package: str, seen: MissingName) -> list[Timeline]:
        table = self.packages[package]
        if seen.kind == NAME:
            qualified = f"{seen.owner}.{seen.name}"
            if qualified in table["names"]:
                return [self._name(package, qualified)]
            if qualified not in table["modules"]:  # a submodule read as an attribute
                return []
            seen = MissingName(MODULE, qualified, "", seen.origin)
        entry = table["modules"].get(seen.owner)
        if entry is None:
            return []
        return [Timeline(package, f"module {seen.owner}", _events(entry), self._compared(package))]

    def _name(self, package: str, qualified: str) -> Timeline:
        table = self.packages[package]
        entry = table["names"][qualified]
        owner, _, name = qualified.rpartition(".")
        return Timeline(
            package,
            f"{name} in {owner}",
            _events(entry),
            self._compared(package),
            renamed_to=entry.get("renamed_to"),
            conditional=tuple((first, last) for first, last in table["conditional"].get(qualified, ())),
        )

    def _parameter(self, package: str, qualified: str, seen: MissingName) -> Timeline:
        entry = self.packages[package]["parameters"][qualified][seen.name]
        if seen.kind == REQUIRED:
            history = entry.get("history") or _single_events(
                entry, ("added", "removed", "became_required", "became_optional")
            )
            events = tuple(
                (_REQUIRED_EVENTS[event], version) for event, version in history if event in _REQUIRED_EVENTS
            )
            subject = f"required parameter {seen.name} of {qualified}()"
        else:
            events = _events(entry)
            subject = f"parameter {seen.name} of {qualified}()"
        return Timeline(package, subject, _ordered(events), self._compared(package))

    def _compared(self, package: str) -> tuple[str, ...]:
        return tuple(self.packages[package]["releases_compared"])


def _events(entry: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Added/removed events of a table entry, oldest first (``history`` when it came and went)."""
    history = entry.get("history") or _single_events(entry, ("added", "removed"))
    return _ordered(tuple((event, version) for event, version in history if event in ("added", "removed")))


def _single_events(entry: dict[str, Any], kinds: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(kind, entry[kind]) for kind in kinds if kind in entry]


def _ordered(events: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(events, key=lambda event: Version(event[1])))


def _ending(entries: dict[str, Any], suffix: str) -> list[str]:
    return [qualified for qualified in entries if qualified.endswith(suffix)]


def _parsed(version: str) -> Version | None:
    try:
        return Version(version)
    except ValueError:  # InvalidVersion, or a number past the int-string limit
        return None
