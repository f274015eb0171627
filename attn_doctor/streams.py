"""Standard output and error that never end a run with a crash.

- A console that cannot encode the report's marks (``PYTHONIOENCODING=cp1252``, a Windows
  console, a redirect with an ASCII locale) gets ASCII ones: ✓ is ``+``, ✗ is ``x``, … is ``...``;
  anything else it cannot encode is written as a backslash escape.
- Text that is not valid Unicode (a lone surrogate read from a hostile env file) is escaped.
- A closed pipe (``attn-doctor rules list | head -1``) ends the run quietly with the status a
  shell reports for SIGPIPE (141), as ``cat`` and ``grep`` do.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE
_ASCII_MARKS = str.maketrans({"✓": "+", "✗": "x", "…": "...", "×": "x", "─": "-", "│": "|", "•": "*"})


class _AsciiMarks(io.TextIOBase):
    """A text stream that writes the marks it cannot encode as their ASCII forms."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def write(self, text: str) -> int:
        self._wrapped.write(text.translate(_ASCII_MARKS))
        return len(text)

    def flush(self) -> None:
        self._wrapped.flush()

    def isatty(self) -> bool:
        return bool(self._wrapped.isatty())

    def fileno(self) -> int:
        return int(self._wrapped.fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(self._wrapped.encoding)


def guard() -> None:
    """Make sys.stdout and sys.stderr safe to print any report to (call once, before printing)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
        if not _encodes(stream, "✓✗…"):
            setattr(sys, name, _AsciiMarks(stream))


def quiet_broken_pipe() -> None:
    """After a closed pipe: send what is still buffered nowhere, and exit as SIGPIPE would."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    os._exit(EXIT_BROKEN_PIPE)  # no interpreter shutdown: its flush would raise again


def _encodes(stream: Any, text: str) -> bool:
    try:
        text.encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
