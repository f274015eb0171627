"""requirements.txt, constraints files and ``pip freeze`` output, with their ``-r``/``-c`` includes.

A line that does not pin one exact version (``torch>=2.4``, a VCS URL) declares the package with an
unknown version: the rules that need it become "unknown", never "not affected". pip options that
say where to install from are skipped; any other line the reader does not understand is reported.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import parse_wheel_filename

from attn_doctor.errors import InputError
from attn_doctor.facts.sources.common import (
    PLAIN_VERSION,
    Declared,
    applies,
    exact_version,
    requirement,
    shown,
    url_shown,
    wheel_file,
)
from attn_doctor.inputs import read_text

MAX_INCLUDE_DEPTH = 10
_INCLUDE = re.compile(r"^(?:-r|-c|--requirement|--constraint)(?:\s*=\s*|\s+|(?=[^-\s]))(?P<file>.+)$")
# pip options that say where or how to install, not what: nothing to read for the target
_INSTALL_OPTIONS = (
    "-i",
    "--index-url",
    "--extra-index-url",
    "--no-index",
    "-f",
    "--find-links",
    "--trusted-host",
    "--pre",
    "--prefer-binary",
    "--only-binary",
    "--no-binary",
    "--require-hashes",
    "--hash",
    "--use-feature",
    "--config-settings",
    "--global-option",
)
_OPTION = re.compile(r"\s--")
_EGG = re.compile(r"#egg=([A-Za-z0-9._-]+)")
_URL = re.compile(r"^(?:https?|file|git\+[a-z]+|hg\+[a-z]+|svn\+[a-z]+|bzr\+[a-z]+)://", re.I)
_COMMENT = re.compile(r"(^|\s)#.*$")
# NAME==VERSION, as `pip freeze` writes nearly every line: a requirement packaging would read the
# same way, read without its PEP 508 parser (about 20 times slower: 500,000 pins took 30 s)
_PLAIN_PIN = re.compile(
    rf"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*(?P<version>{PLAIN_VERSION})\s*"
)


def recognises(path: Path, text: str) -> bool:
    return True  # the format of last resort


def read(path: Path, text: str, markers: dict[str, str], extras: frozenset[str] = frozenset()) -> Declared:
    declared = Declared()
    read_lines(path, logical_lines(text), markers, declared)
    return declared


def read_lines(
    path: Path,
    lines: list[tuple[int, str]],
    markers: dict[str, str],
    out: Declared,
    depth: int = 0,
    seen: frozenset[Path] = frozenset(),
) -> None:
    """Requirement lines, numbered as in ``path`` (a requirements file, or conda's ``pip:`` list)."""
    seen = seen | {path.resolve()}
    where = str(path)
    for number, line in lines:
        origin = f"{where}:{number}"
        if pin := _PLAIN_PIN.fullmatch(line):
            out.add(pin["name"], pin["version"], origin, plain=True)
        elif include := _INCLUDE.match(line):
            _include(path, include["file"].strip().strip("'\""), origin, markers, depth, seen, out)
        elif line.startswith(("-e", "--editable")):
            if name := _EGG.search(line):
                out.add(name[1], None, origin)
        elif line.startswith("-"):
            if line.split("=", 1)[0].split()[0] not in _INSTALL_OPTIONS:
                out.problems.append(f"{origin}: {shown(line)}: not a line this reader understands (skipped)")
        elif _URL.match(line):
            _url_line(line, origin, markers, out)
        else:
            options = _OPTION.search(line)  # drop --hash=... options (a search linear in the line)
            req = requirement(line[: options.start()] if options else line, origin)
            if applies(str(req.marker) if req.marker else None, markers, origin):
                if req.url:  # name @ URL: the URL is where the version comes from
                    from_url = f"{origin} ({url_shown(req.url)})"
                    out.add(req.name, _version_from_url(req.url), from_url, wheel=wheel_file(req.url))
                else:
                    out.add(req.name, exact_version(req), origin)


def _url_line(line: str, origin: str, markers: dict[str, str], out: Declared) -> None:
    """A bare URL, as pip takes it: a wheel's name and version from its file name (PEP 427),
    ``#egg=NAME`` names a VCS or archive URL's package; another URL is reported, not read. A
    marker after ``; `` is read as on any requirement."""
    url, _, marker = line.partition("; ")
    url = _OPTION.split(url, 1)[0].strip()  # --hash=... after it
    if not applies(marker.strip() or None, markers, origin):
        return
    where = f"{origin} ({url_shown(url)})"
    filename = unquote(urlsplit(url).path).rsplit("/", 1)[-1]
    if filename.endswith(".whl"):
        try:
            name, version, _, _ = parse_wheel_filename(filename)
        except ValueError:  # InvalidWheelFilename, InvalidVersion
            raise InputError(
                origin, f"{shown(filename)}: not a wheel's file name (NAME-VERSION-TAGS.whl)"
            ) from None
        out.add(filename.split("-", 1)[0], str(version), where, wheel=filename)
    elif egg := _EGG.search(url):
        out.add(egg[1], None, where)
    else:
        out.problems.append(
            f"{origin}: {shown(url)}: a URL that names no package (a VCS or archive), not read"
        )


def _include(
    path: Path,
    target: str,
    origin: str,
    markers: dict[str, str],
    depth: int,
    seen: frozenset[Path],
    out: Declared,
) -> None:
    if "://" in target:
        raise InputError(origin, f"{target}: URLs are not supported: download the file first")
    included = path.parent / target
    source = f"{origin} ({target})"
    text = read_text(included, source)
    if included.resolve() in seen:
        raise InputError(source, "requirements include themselves (-r/-c loop)")
    if depth >= MAX_INCLUDE_DEPTH:
        raise InputError(source, f"requirements included more than {MAX_INCLUDE_DEPTH} files deep")
    read_lines(included, logical_lines(text), markers, out, depth + 1, seen)


def _version_from_url(url: str) -> str | None:
    """``pip freeze`` writes ``name @ file:///.../name-1.2-py3-none-any.whl``: the wheel names it."""
    filename = url.rsplit("/", 1)[-1].split("#", 1)[0]
    if not filename.endswith(".whl"):
        return None
    try:
        return str(parse_wheel_filename(filename)[1])
    except ValueError:  # InvalidWheelFilename, InvalidVersion
        return None


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with comments removed and backslash continuations joined, numbered from 1."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = (_COMMENT.sub("", raw) if "#" in raw else raw).strip()
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        joined = (pending + stripped).strip()
        pending = ""
        if joined:
            lines.append((start, joined))
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines
