"""Merge what every release says into the catalogue: one entry per message, with its releases.

An entry is a message of one function (the same file, function, kind and template) and the runs
of releases that carry it. Its ``pattern`` is the template's first line with each field a bounded
wildcard, its ``literal`` the longest literal part (the prefilter explain uses); a template whose
literal is shorter than MIN_LITERAL says too little to name an origin and is left out.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from attn_doctor.releases.messages import CATALOGUE, FIELD_PATTERN, entries, read, write
from tools.messages import cpp_source
from tools.messages.interface import MessageSource
from tools.messages.python_source import FIELD, LOG_METHODS, RawMessage, extract

MIN_LITERAL = 16

OUT = CATALOGUE


def pattern_of(template: str) -> tuple[str, str] | None:
    """(RE2 pattern, longest literal) for the first line of ``template`` that has enough text;
    fields at either end are dropped (a line holds more than the message), as is outer space."""
    for line in template.splitlines():
        parts = line.split(FIELD)
        while parts and not parts[0].strip():
            parts.pop(0)
        while parts and not parts[-1].strip():
            parts.pop()
        literal = max((part.strip() for part in parts), key=len, default="")
        if len(literal) >= MIN_LITERAL:
            parts[0], parts[-1] = parts[0].lstrip(), parts[-1].rstrip()
            return FIELD_PATTERN.join(re.escape(part) for part in parts), literal
    return None


def _compiles(pattern: str) -> bool:
    """Whether RE2 takes the pattern (explain matches every pattern as one RE2 set)."""
    try:
        import re2
    except ImportError:
        return True
    try:
        re2.compile(pattern)
    except re2.error:
        return False
    return True


def runs(present: Sequence[bool], versions: Sequence[str]) -> list[list[str]]:
    """The consecutive runs of ``versions`` where ``present`` holds, as [first, last] pairs."""
    out: list[list[str]] = []
    start: str | None = None
    for index, (here, version) in enumerate(zip(present, versions)):
        if here and start is None:
            start = version
        if start is not None and (not here or index == len(versions) - 1):
            out.append([start, version if here else versions[index - 1]])
            start = None
    return out


def merge(
    distribution: str, per_release: Iterable[tuple[str, list[RawMessage]]]
) -> tuple[list[str], list[dict[str, Any]]]:
    """(releases read, entries) from each release's messages, releases oldest first."""
    versions: list[str] = []
    seen: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for version, found in per_release:
        versions.append(version)
        for message in found:
            key = (message.file, message.function, message.kind, message.template)
            entry = seen.setdefault(key, {"message": message, "versions": set()})
            entry["versions"].add(version)
            entry["message"] = message  # the newest release's guard
    entries = []
    for (file, function, kind, template), entry in seen.items():
        shaped = pattern_of(template)
        if shaped is None or not _compiles(shaped[0]):
            continue
        module = file.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        entries.append(
            {
                "id": f"{distribution}:{module}.{function}" if function else f"{distribution}:{module}",
                "package": distribution,
                "file": file,
                "function": function,
                "kind": kind,
                "template": template,
                "pattern": shaped[0],
                "literal": shaped[1],
                "releases": runs([v in entry["versions"] for v in versions], versions),
                "guard": entry["message"].guard,
            }
        )
    entries.sort(key=lambda e: (e["id"], e["template"]))
    return versions, entries


def extract_file(text: str, path: str, log_methods: frozenset[str] = LOG_METHODS) -> list[RawMessage]:
    """A file's messages: C++/CUDA sources (by suffix) read by cpp_source, any other as Python
    (logger calls of ``log_methods``)."""
    if path.endswith(cpp_source.SUFFIXES):
        return cpp_source.extract(text, path)
    return extract(text, path, log_methods)


def release_messages(source: MessageSource, cache: Path, version: str) -> list[RawMessage]:
    """One release's messages: the source's own ``messages(cache, version)`` where it has one
    (torch's C++ keeps only what the release's binary holds), else every file's."""
    own = getattr(source, "messages", None)
    if callable(own):
        return list(own(cache, version))
    return [m for path, text in source.files(cache, version) for m in _parsed(text, path)]


_PARSED: dict[tuple[str, str], list[RawMessage]] = {}


def _parsed(text: str, path: str) -> list[RawMessage]:
    """extract_file, once per distinct file: most files are the same in the next release."""
    key = (path, hashlib.sha1(text.encode("utf-8", "replace")).hexdigest())
    if key not in _PARSED:
        _PARSED[key] = extract_file(text, path)
    return _PARSED[key]


def build(sources: Sequence[MessageSource], cache: Path) -> dict[str, Any]:
    packages: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    for source in sources:
        per_release = (
            (version, release_messages(source, cache, version)) for version in source.releases(cache)
        )
        versions, entries = merge(source.distribution, per_release)
        info = {"releases_read": versions, "entries": len(entries), "unread": source.unread(cache)}
        if source.distribution in packages:  # a second source of one distribution (torch's C++)
            known = packages[source.distribution]
            info = {
                "releases_read": sorted(set(known["releases_read"]) | set(versions), key=Version),
                "entries": known["entries"] + len(entries),
                "unread": known["unread"] + info["unread"],
            }
        packages[source.distribution] = info
        messages += entries
    return {
        "generated": datetime.date.today().isoformat(),
        "source": "python -m tools.messages.build (the released files of each package; see tools/messages/)",
        "packages": packages,
        "messages": messages,
    }


def merged(parts: Sequence[Path]) -> dict[str, Any]:
    """Catalogues built apart (one per group of sources: torch's wheels take long) as one; a later
    part's package replaces an earlier one's."""
    catalogue: dict[str, Any] = {"packages": {}, "messages": []}
    for part in parts:
        data = read(part)
        names = set(data.packages)
        catalogue["messages"] = [m for m in catalogue["messages"] if m["package"] not in names]
        catalogue["messages"] += entries(data)
        catalogue["packages"].update(data.packages)
        catalogue["generated"], catalogue["source"] = data.generated, data.source
    catalogue["messages"].sort(key=lambda e: (e["id"], e["template"]))
    return catalogue


def main(argv: list[str] | None = None) -> int:
    from tools.messages.sources import SOURCES

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, help="the release trees (python -m tools.messages.fetch)")
    parser.add_argument("--merge", type=Path, nargs="+", help="write these built catalogues as one instead")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--packages", nargs="*", help="only these distributions")
    args = parser.parse_args(argv)
    if args.merge:
        catalogue = merged(args.merge)
    elif args.cache is None:
        parser.error("--cache or --merge is needed")
    else:
        chosen = [s for s in SOURCES if not args.packages or s.distribution in args.packages]
        catalogue = build(chosen, args.cache)
    write(catalogue, args.out)
    for name, info in catalogue["packages"].items():
        releases, unread = len(info["releases_read"]), len(info["unread"])
        print(f"{name}: {releases} releases, {info['entries']} messages, {unread} unread")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
