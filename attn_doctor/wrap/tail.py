"""The last words of a command's output, kept in bounded memory while it streams past.

One tail of everything, and under torchrun one per rank: torchrun prefixes each worker's lines
(``[rank3]:``, ``[default3]:``), and with eight ranks printing, the rank that failed first may have
scrolled out of the shared tail by the time the job dies. Each buffer is trimmed when it reaches
twice its cap, so memory stays under (1 + max_ranks) x 2 x cap whatever the command prints.
"""

from __future__ import annotations

import re

TAIL_BYTES = 1024 * 1024
RANK_TAIL_BYTES = 256 * 1024
MAX_RANKS = 64
_RANK_LINE = re.compile(rb"^\[(?:rank|default)(\d{1,5})\]:", re.M)


class OutputTail:
    def __init__(self, cap: int = TAIL_BYTES, rank_cap: int = RANK_TAIL_BYTES, max_ranks: int = MAX_RANKS):
        self.cap, self.rank_cap, self.max_ranks = cap, rank_cap, max_ranks
        self.total = 0  # bytes seen
        self._all = bytearray()
        self._ranks: dict[int, bytearray] = {}
        self._partial = b""  # an unfinished line, while ranks are in play

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        _append(self._all, data, self.cap)
        # b"[" first: a memchr, where the pattern is a regex pass (a flood rarely holds either)
        if self._partial or self._ranks or (b"[" in data and _RANK_LINE.search(data)):
            self._route(data)

    def text(self) -> bytes:
        """Each rank's tail whose end has left the shared tail, then the shared tail."""
        shared = bytes(self._all[-self.cap :])
        ranks = [
            bytes(tail[-self.rank_cap :])
            for _, tail in sorted(self._ranks.items())
            if bytes(tail[-200:]) not in shared
        ]
        return b"".join(rank + b"\n" for rank in ranks) + shared

    def _route(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-self.rank_cap :]
        for line in lines:
            found = _RANK_LINE.match(line)
            if found is None:
                continue
            rank = int(found.group(1))
            if rank not in self._ranks and len(self._ranks) >= self.max_ranks:
                continue
            _append(self._ranks.setdefault(rank, bytearray()), line + b"\n", self.rank_cap)


def _append(buffer: bytearray, data: bytes, cap: int) -> None:
    buffer += data[-2 * cap :]
    if len(buffer) > 2 * cap:
        del buffer[:-cap]
