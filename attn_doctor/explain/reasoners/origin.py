"""Every origin becomes a cause: the catalogue's entry that raised the log's error line, chosen by
the traceback (the entry of the innermost frame's file and function) and the stated versions, read
as a maintainer reads it: who raised it, under which condition, what the log says of that
condition, and what the releases say to do."""

from __future__ import annotations

import re

from attn_doctor.explain.origins import OTHER_DISTRIBUTION, Origin
from attn_doctor.explain.reasoners import guards, release_advice
from attn_doctor.explain.reasoners.interface import Evidence, Reasoned
from attn_doctor.facts.log_frames import Frame, innermost_in_a_package
from attn_doctor.facts.names import rule_name
from attn_doctor.releases.messages import Message

MAX_CAUSES = 3  # the last error lines; a long log's earlier errors are mostly the same failure
MAX_FIELDS, VALUES_LINE_CAP = 3, 1024  # the fields read back from a line: bounded time on any line
_LOGGED_ERRORS = ("log.error", "log.exception", "log.critical", "log.fatal")


class OriginReasoner:
    name = "origin"

    def reason(self, evidence: Evidence) -> list[Reasoned]:
        open_lines = [o for o in evidence.origins if o.line not in evidence.explained]
        # no error line traced: the last traced line (a warning or an INFO line that says why)
        errors = [o for o in open_lines if _raises(o)] or open_lines[-1:]
        # the run died of the last error: it first, then the ones above it
        errors.sort(key=lambda origin: (origin.line != evidence.last_error, -origin.line))
        return [_cause(origin, evidence) for origin in errors[:MAX_CAUSES]]


def _raises(origin: Origin) -> bool:
    """An error line, not a warning or an info line that merely came before the failure."""
    return any(_is_error(message) for message in origin.messages)


def _is_error(message: Message) -> bool:
    warns = "warn" in message.kind.lower() or message.kind.startswith("log.")  # TORCH_WARN, FutureWarning
    return message.kind in _LOGGED_ERRORS or not warns


def ordered(origin: Origin, evidence: Evidence) -> list[Message]:
    """The entries that can print the line, the one the traceback and the versions point at first:
    its file and function in the frames, its package the innermost frame's, a release that carries
    the stated version, then the longest literal (the catalogue's own order)."""
    frames = evidence.frames
    innermost = innermost_in_a_package(frames)
    packages = {frame.package for frame in frames if frame.package}

    def key(message: Message) -> tuple[int, ...]:
        in_file = [frame for frame in frames if frame.is_file(message.file)]
        function = message.function.rsplit(".", 1)[-1]
        stated = _stated(message.package, evidence)
        return (
            not any(frame.function == function for frame in in_file),
            # FA3 (hopper/) and FA4 (flash_attn/cute/) are other installs: only where frames show them
            message.file.startswith(OTHER_DISTRIBUTION) and not packages & {"flash-attn-3", "flash-attn-4"},
            function not in origin.text,  # C++ checks print their function: "mha_fwd: ..."
            not in_file,
            innermost is None or innermost.package != rule_name(message.package),
            rule_name(message.package) not in packages,
            stated is not None and not release_advice.covers(message.releases, stated[0]),
            not _is_error(message),
        )

    return sorted(origin.messages, key=key)  # stable: the catalogue's order breaks ties


def _stated(package: str, evidence: Evidence) -> tuple[str, str] | None:
    """The raising package's version the log or the target states, with its origin."""
    known = evidence.environment.packages.get(rule_name(package))
    if known is None or known.version is None:
        return None
    return known.version, known.origin


def _cause(origin: Origin, evidence: Evidence) -> Reasoned:
    candidates = ordered(origin, evidence)
    message = candidates[0]
    kind = guards.kind_of(message)
    releases_read = evidence.catalogue.packages.get(message.package, {}).get("releases_read") or []
    same_words = [m for m in origin.messages if m.package == message.package]
    related = release_advice.Related(message, same_words, evidence.catalogue.by_id)
    stated = _stated(message.package, evidence)
    advice = release_advice.advise(message, kind, origin.text, related, releases_read, stated)
    facts = [*_values(message, origin.text), *_caller(message, evidence.frames), *advice.facts]
    why = _frame_evidence(message, evidence.frames)
    if len(candidates) > 1:
        why.append(f"{len(candidates) - 1} other places print these words; this one {_chosen_because(why)}")
    condition = guards.plain(message.guard)
    return Reasoned(
        id=f"origin:{message.id}",
        kind=kind,
        title=f"{message.package} raises {_raised(message)}: {_words(origin.text)}",
        raised_by=message.where(),
        condition=f"raised when {condition}" if condition else "",
        facts=tuple(facts),
        fix=advice.fix,
        line=origin.line,
        text=origin.text,
        reasoner=OriginReasoner.name,
        evidence=tuple(why),
    )


def _raised(message: Message) -> str:
    kind = message.kind.removeprefix("log.")
    where = message.function or message.file
    return f"{kind} in {where}"


def _words(text: str) -> str:
    """The library's words on the line, without where Python printed them."""
    for mark in ("Error: ", "Exception: ", "error: ", "Warning: "):
        if mark in text:
            return text.split(mark, 1)[1].strip()[:200]
    return text.strip()[:200]


def _values(message: Message, line: str) -> list[str]:
    """The values the line put into the message's fields: the condition's operands, as the log
    states them ("Qwen2ForCausalLM" in "{} does not support Flash Attention 2.0 yet")."""
    parts = re.split(r"\{[^{}]{0,40}\}", message.template.split("\n", 1)[0])
    if not 2 <= len(parts) <= MAX_FIELDS + 1:  # each field is a lazy group: few, on a bounded line
        return []
    pattern = "(.{1,120}?)".join(re.escape(part) for part in parts)
    found = re.search(pattern, line[:VALUES_LINE_CAP])
    if found is None:
        return []
    values = [value.strip() for value in found.groups() if value.strip()]
    return [f"the line's values: {', '.join(values)}"] if values else []


def _caller(message: Message, frames: list[Frame]) -> list[str]:
    """Who made the call that failed the check: the frame just outside the raising package's
    innermost run of frames (another library passes the arguments as often as the user does)."""
    raising = rule_name(message.package)
    inside = False
    for frame in reversed(frames):
        if frame.package == raising:
            inside = True
        elif inside:
            who = frame.package or "your code"
            where = f"{frame.module_path or frame.path}, in {frame.function}"
            return [f"called from {who} ({where}, log line {frame.line})"]
    return []


def _frame_evidence(message: Message, frames: list[Frame]) -> list[str]:
    for frame in reversed(frames):
        if frame.is_file(message.file):
            where = f"{frame.module_path}, in {frame.function}"
            return [f"the traceback runs through it: log line {frame.line}, {where}"]
    innermost = innermost_in_a_package(frames)
    if innermost is not None and innermost.package == rule_name(message.package):
        where = f"{innermost.module_path}, log line {innermost.line}"
        return [f"the innermost frame in a package is {innermost.package} ({where})"]
    return []


def _chosen_because(why: list[str]) -> str:
    return "is on the traceback" if why else "has the longest fixed words"
