"""Text that fits the terminal: every printed line is wrapped to its width.

Why here and not in rich: the plain report (pipes, NO_COLOR, CI logs) must fit too, and rich's own
soft wrap breaks words (``affect|ed``) and loses the hanging indent. The rules:

- the width is ``COLUMNS`` when set (as shells and CI set it), else the terminal's; text written
  to a pipe or file with no ``COLUMNS`` is not wrapped, so ``grep`` sees whole lines;
- lines break at spaces only; a continuation is indented four past its line's own indent (or at
  ``hang`` when the caller aligns it under a column);
- a line that must wrap puts each URL on a line of its own, whole, so it can be clicked and
  copied; a single word wider than the terminal (a URL, a path) is the only line left wider;
- a shell command wraps with `` \\`` line ends, so it still pastes as one command.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

MIN_WIDTH = 40  # narrower than this, wrapping only makes text harder to read
_URL_PREFIXES = ("http://", "https://")
_WORD = re.compile(r"(\s*)(\S+)")


def terminal_width(stream: TextIO | None = None) -> int | None:
    """Columns to fit, or None where nobody said (a pipe or file without ``COLUMNS``)."""
    columns = os.environ.get("COLUMNS", "")
    # ASCII digits, a few of them: "²" is a digit to str.isdigit and int() refuses it
    if columns.isascii() and columns.isdigit() and len(columns) <= 5 and int(columns) > 0:
        return max(int(columns), MIN_WIDTH)
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return max(os.get_terminal_size(stream.fileno()).columns, MIN_WIDTH)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def fit(text: str, width: int | None, hang: int | None = None, shell: bool = False) -> list[str]:
    """One line of ``text`` as the lines that show it within ``width`` columns."""
    text = text.rstrip()
    if width is None or len(text) <= width:
        return [text]
    indent = len(text) - len(text.lstrip(" "))
    if hang is None:
        hang = indent + 4
    hang = min(hang, max(width - MIN_WIDTH // 2, indent))
    # each word keeps the spaces before it while it stays on its line: columns stay aligned
    words = [(match.group(1), match.group(2)) for match in _WORD.finditer(text[indent:])]
    if shell:
        return _shell_lines([word for _, word in words], " " * indent, " " * hang, width)
    lines: list[str] = []
    current = " " * indent
    fresh = True  # nothing but indentation on ``current`` yet
    for space, word in words:
        url = word.startswith(_URL_PREFIXES)
        if not fresh and (url or len(current) + len(space) + len(word) > width):
            lines.append(current)
            current, fresh = " " * hang, True
        current += word if fresh else space + word
        fresh = False
        if url:
            lines.append(current)
            current, fresh = " " * hang, True
    if not fresh:
        lines.append(current)
    return lines


def _shell_lines(words: list[str], first: str, rest: str, width: int) -> list[str]:
    lines: list[str] = []
    current = first
    fresh = True
    for word in words:
        if not fresh and len(current) + 1 + len(word) + 2 > width:
            lines.append(current + " \\")
            current, fresh = rest, True
        current += word if fresh else " " + word
        fresh = False
    lines.append(current)
    return lines


def fit_text(text: str, width: int | None) -> str:
    """Every line of ``text`` fitted; the final newline kept as it was."""
    if width is None:
        return text
    ending = "\n" if text.endswith("\n") else ""
    body = text[: -len(ending)] if ending else text
    return "\n".join(part for line in body.split("\n") for part in fit(line, width)) + ending


def write(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` fitted to the width of ``stream`` (stdout by default)."""
    stream = stream or sys.stdout
    stream.write(fit_text(text, terminal_width(stream)))
