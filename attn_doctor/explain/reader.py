"""A log as a bounded stream of normalised lines, read in fixed-size chunks.

Memory stays at one chunk plus one line whatever the input: a 100 MB log is never held whole,
and a 50 MB "line" with no line break keeps only its first LINE_CAP bytes. Normalising:
``\\r\\n`` and a lone ``\\r`` end a line (as in Python's universal newlines, so a progress bar
redrawn with ``\\r`` counts a line per redraw); ANSI colour and terminal-title sequences are
removed; curly quotes (a paste through chat or Markdown) are straight again; a UTF-16 log
(PowerShell's ``>``) is read as UTF-16. Bytes that are not text stay bytes:
matching is on UTF-8 bytes, and only matched lines are decoded (with replacement characters).
"""

from __future__ import annotations

import codecs
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from attn_doctor.engine.patterns import LINE_CAP
from attn_doctor.errors import InputError
from attn_doctor.inputs import require_regular_file

CHUNK_BYTES = 1 << 20
MAX_LOG_BYTES = 4 << 30  # 4 GiB, about a minute of reading: a stream that never ends stops here
# CSI (colours, cursor moves), OSC (terminal titles, links) ended by BEL or ST, other 2-byte escapes.
# Each run is read once: (?=(X*))\1 takes all of X and never gives any back (an atomic group before
# Python 3.11), so an OSC that never ends costs one pass over its line, not a backtrack per byte.
_CURLY_QUOTES = tuple((quote.encode(), straight) for quote, straight in zip("‘’“”", (b"'", b"'", b'"', b'"')))
_ANSI = re.compile(
    rb"\x1b(?:\[(?=([0-?]*))\1(?=([ -/]*))\2[@-~]|\](?=([^\x07\x1b\n]*))\3(?:\x07|\x1b\\)|[@-Z\\-_])"
)
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_FILE_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,5}$")
SHOWN_ARGUMENT_CHARS = 60  # of error text given where a log file goes: the hint after it must show


@dataclass(frozen=True)
class Block:
    """Whole lines, each at most LINE_CAP bytes and ending in ``\\n``; ``first_line`` counts from 1."""

    text: bytes
    first_line: int


@contextmanager
def open_log(source: str) -> Iterator[BinaryIO]:
    """The log as a binary stream: a file, or stdin for ``-``. Raises InputError naming the file."""
    if source == "-":
        if sys.stdin.isatty():
            sys.stderr.write("attn-doctor: reading the log from the terminal; end it with Ctrl-D\n")
        yield sys.stdin.buffer
        return
    path = Path(source)
    if _reads_as_error_text(source) and not os.path.exists(source):  # (False for a name too long)
        shown = source if len(source) <= SHOWN_ARGUMENT_CHARS else f"{source[: SHOWN_ARGUMENT_CHARS - 3]}..."
        raise InputError(
            shown, "no such file; to explain this text, pipe it in: echo '...' | attn-doctor explain -"
        )
    require_regular_file(path, source)  # a FIFO or device would block or never end; stdin is "-"
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise InputError(source, exc.strerror or "cannot read") from None
    with stream:
        yield stream


def _reads_as_error_text(source: str) -> bool:
    """The argument reads as a message, not a path: a line break, a colon and a space (``explain
    "RuntimeError: CUDA error: ..."``), or spaces in its last path component with no file
    extension after them (``CUDA out of memory``; ``logs/my run.log`` is a path)."""
    name = source.rsplit("/", 1)[-1]
    spaced_words = any(char.isspace() for char in name) and not _FILE_EXTENSION.search(name)
    return "\n" in source or ": " in source or spaced_words


class LogReader:
    """Iterates over a log's Blocks; ``bytes_read`` and ``lines`` are the totals so far."""

    def __init__(
        self, stream: BinaryIO, name: str, chunk_bytes: int = CHUNK_BYTES, max_bytes: int = MAX_LOG_BYTES
    ) -> None:
        self.stream, self.name, self.chunk_bytes, self.max_bytes = stream, name, chunk_bytes, max_bytes
        self.bytes_read = 0
        self.lines = 0
        self.truncated = False  # stopped at max_bytes: the rest of the input was not read

    def __iter__(self) -> Iterator[Block]:
        pending = b""  # the start of a line whose end is not read yet, at most LINE_CAP bytes
        overflow = False  # that line was longer than LINE_CAP: drop the rest of it
        for chunk in self._normalised_chunks():
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:
                overflow = overflow or len(pending) + len(chunk) > LINE_CAP
                pending = (pending + chunk)[:LINE_CAP]
                continue
            first_end = chunk.index(b"\n")
            first = pending if overflow else (pending + chunk[:first_end])[:LINE_CAP]
            yield self._block(first + chunk[first_end:cut])
            tail = chunk[cut:]
            pending, overflow = tail[:LINE_CAP], len(tail) > LINE_CAP
        if pending or overflow:
            yield self._block(pending + b"\n")

    def _block(self, text: bytes) -> Block:
        """Cut lines to LINE_CAP, then remove escape sequences (which never span a line)."""
        lines = text.split(b"\n")
        if max(map(len, lines)) > LINE_CAP:
            text = b"\n".join(line[:LINE_CAP] for line in lines)
        if b"\x1b" in text:
            text = _ANSI.sub(b"", text)
        if b"\xe2\x80" in text:  # a paste through chat or Markdown curls the quotes Python printed
            for curly, straight in _CURLY_QUOTES:
                text = text.replace(curly, straight)
        block = Block(text, self.lines + 1)
        self.lines += text.count(b"\n")
        return block

    def _normalised_chunks(self) -> Iterator[bytes]:
        """Chunks as UTF-8-compatible bytes with every line ending turned into ``\\n``."""
        after_cr = False
        transcode: Callable[[bytes], bytes] | None = None
        for raw in self._raw_chunks():
            if transcode is None:
                transcode = _transcoder(raw)
            chunk = transcode(raw)
            if after_cr and chunk.startswith(b"\n"):
                chunk = chunk[1:]  # the \n of a \r\n split between two chunks
            after_cr = chunk.endswith(b"\r")
            if b"\r" in chunk:
                chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            yield chunk

    def _raw_chunks(self) -> Iterator[bytes]:
        while True:
            try:
                raw = self.stream.read(self.chunk_bytes)
            except OSError as exc:
                raise InputError(self.name, exc.strerror or "cannot read") from None
            if not raw:
                return
            self.bytes_read += len(raw)
            yield raw
            if self.bytes_read >= self.max_bytes:
                self.truncated = True
                return


def _transcoder(first_chunk: bytes) -> Callable[[bytes], bytes]:
    """UTF-16 (by its byte-order mark) to UTF-8; anything else is matched as it is."""
    if not first_chunk.startswith(_UTF16_BOMS):
        return lambda chunk: chunk
    decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
    return lambda chunk: decoder.decode(chunk).encode("utf-8")
