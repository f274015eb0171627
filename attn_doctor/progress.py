"""What is running, while it runs: a live line per child on a terminal, its result when it ends.

Everything goes to stderr, so stdout (the report, JSON, SARIF) is the same with or without it.
On a terminal, a spinner line per running case or probe with its elapsed time, and a line per
result as it finishes; with ``verbose``, the finished lines carry their wall time (also when
stderr is not a terminal) and the launcher says how children were started.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import Any


class Progress:
    def __init__(self, live: bool | None = None, verbose: bool = False) -> None:
        if live is None:
            live = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self.verbose = verbose
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._tasks: dict[str, Any] = {}
        self._display: Any = None
        if live:
            from rich.console import Console
            from rich.progress import Progress as RichProgress
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            console = Console(stderr=True, highlight=False)
            self._display = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )

    def __enter__(self) -> Progress:
        if self._display is not None:
            self._display.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._display is not None:
            self._display.stop()

    def started(self, label: str) -> None:
        with self._lock:
            self._started[label] = time.perf_counter()
            if self._display is not None:
                self._tasks[label] = self._display.add_task(label, total=None)

    def finished(self, label: str, outcome: str) -> float:
        """Say ``label`` ended with ``outcome``; returns its wall time."""
        with self._lock:
            seconds = time.perf_counter() - self._started.pop(label, time.perf_counter())
            task = self._tasks.pop(label, None)
            line = f"{label}: {outcome}" + (f" ({seconds:.2f} s)" if self.verbose else "")
            if self._display is not None:
                self._display.remove_task(task)
                self._display.console.print(line, markup=False)
            elif self.verbose:
                sys.stderr.write(line + "\n")
            return seconds

    def note(self, text: str) -> None:
        """A line for ``-v`` only: how the children were started, and similar."""
        if not self.verbose:
            return
        with self._lock:
            if self._display is not None:
                self._display.console.print(text, markup=False)
            else:
                sys.stderr.write(text + "\n")


QUIET = Progress(live=False)
