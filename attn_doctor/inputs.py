"""The user's input files: opened only when they are regular files, read up to a size cap, and
parsed with every way the parser can fail turned into one line naming the file.

A FIFO, a device or a socket can block forever or never end (``mkfifo f; attn-doctor check -r
f``), so nothing is opened before ``os.stat`` says it is a regular file. Parsers fail in more ways
than their own error class: JSON and TOML nesting thousands deep raise RecursionError, a number of
more than 4,300 digits raises ValueError (Python's int-string limit); each is an InputError here.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attn_doctor.errors import InputError

MAX_INPUT_BYTES = 16 * 1024 * 1024
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def require_regular_file(path: Path, source: str | None = None) -> os.stat_result:
    """The file's stat; an InputError naming ``source`` (default: the path) unless it is a regular file."""
    name = source or str(path) or "''"
    if not str(path):
        raise InputError(name, "an empty path")
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise InputError(name, "no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(name, getattr(exc, "strerror", None) or "cannot read") from None
    if stat.S_ISDIR(status.st_mode):
        raise InputError(name, "is a directory, not a file")
    if not stat.S_ISREG(status.st_mode):
        kind = next((word for test, word in _KINDS if test(status.st_mode)), "not a file")
        raise InputError(name, f"is {kind}, not a regular file")
    return status


def read_bytes(path: Path, source: str | None = None, cap: int = MAX_INPUT_BYTES) -> bytes:
    """At most ``cap`` bytes of a regular file; larger is an InputError."""
    name = source or str(path)
    require_regular_file(path, name)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(cap + 1)
    except OSError as exc:
        raise InputError(name, exc.strerror or "cannot read") from None
    if len(raw) > cap:
        raise InputError(name, f"larger than {_size(cap)}")
    return raw


def read_text(path: Path, source: str | None = None, cap: int = MAX_INPUT_BYTES) -> str:
    """A text input file; binary (NUL bytes) is an InputError, other bad bytes become U+FFFD."""
    raw = read_bytes(path, source, cap)
    if b"\0" in raw:
        raise InputError(source or str(path), "binary file (contains NUL bytes)")
    return raw.decode("utf-8", errors="replace")


def read_json(path: Path, source: str | None = None) -> Any:
    """A user's JSON file; anything that is not JSON is an InputError naming the file."""
    return parse_json(read_text(path, source), source or str(path))


def parse_json(text: str, source: str) -> Any:
    return _parsed(json.loads, text, source, "JSON", (json.JSONDecodeError, "not JSON"))


def parse_toml(text: str, source: str) -> dict[str, Any]:
    from attn_doctor._compat import tomllib  # a pure-Python parser: `check` reads the rules from its cache

    data: dict[str, Any] = _parsed(
        tomllib.loads, text, source, "TOML", (tomllib.TOMLDecodeError, "not valid TOML")
    )
    return data


def _parsed(
    loads: Callable[[str], Any],
    text: str,
    source: str,
    kind: str,
    syntax: tuple[type[ValueError], str],
) -> Any:
    """``loads(text)``, every way it fails one InputError: its syntax error (``syntax``: the error
    class and how to say it), nesting past the recursion limit, a number past the int-string limit."""
    try:
        return loads(text)
    except syntax[0] as exc:
        raise InputError(source, f"{syntax[1]}: {_first_line(exc)}") from None
    except RecursionError:
        raise InputError(source, f"not {kind} this tool reads: nested too deeply") from None
    except ValueError as exc:
        raise InputError(source, f"not {kind} this tool reads: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _size(cap: int) -> str:
    return f"{cap // (1024 * 1024)} MiB" if cap >= 1024 * 1024 else f"{cap // 1024} KiB"
