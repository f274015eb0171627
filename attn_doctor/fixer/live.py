"""What `fix` is doing while it searches: one stderr line on a terminal, redrawn in place and
erased when the plan is ready (stdout, the report, is the same with or without it).

The line says the combinations tried so far, the seconds spent and the best plan so far. The
search only records its counts (cheap, once per combination); rich's refresh thread draws them.
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import Any

from attn_doctor.fixer.search import Outcome
from attn_doctor.words import counted

REFRESHES_PER_SECOND = 10


class SearchProgress:
    def __init__(self, live: bool | None = None) -> None:
        if live is None:
            live = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self._stage = "reading the target and the rules"
        self._started = time.monotonic()
        self._targets = self._searchable = 0
        self._evaluated = 0
        self._best: Outcome | None = None
        self._live: Any = None
        if live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                console=Console(stderr=True, highlight=False),
                get_renderable=self._render,
                refresh_per_second=REFRESHES_PER_SECOND,
                transient=True,  # gone when done
                redirect_stdout=False,  # the report is not ours to move
                redirect_stderr=False,
            )

    def __enter__(self) -> SearchProgress:
        self._started = time.monotonic()
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()

    def searching(self, packages: list[str], targets: int, searchable: int) -> None:
        """The search starts over these packages: ``targets`` findings fail, ``searchable`` of
        them a version change can clear."""
        self._stage = "searching" if packages else "nothing to search"
        self._targets, self._searchable = targets, searchable

    def tried(self, evaluated: int, best: Outcome) -> None:
        """The search's report: combinations matched so far, and the best plan among them."""
        self._evaluated, self._best = evaluated, best

    def checking(self) -> None:
        self._stage = "checking the plan again"

    def line(self) -> str:
        """What the terminal shows now, most telling first (a narrow terminal cuts the end)."""
        seconds = f"{time.monotonic() - self._started:.1f} s"
        if self._best is None:
            return f"fix: {self._stage} ({seconds})"
        best = self._best
        plan = " ".join(f"{c.package}=={c.version}" for c in best.changes) or "no change"
        left = self._targets - self._searchable + len(best.failing)
        stage = "" if self._stage == "searching" else f"{self._stage}; "
        return (
            f"fix: {stage}{counted(self._evaluated, 'combination')} tried ({seconds}); "
            f"best so far: {plan}, {left} of {self._targets} left"
        )

    def _render(self) -> Any:
        from rich.text import Text

        return Text(self.line(), no_wrap=True, overflow="ellipsis")


QUIET = SearchProgress(live=False)
