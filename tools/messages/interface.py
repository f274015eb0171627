"""What a message source is: one upstream's releases, and the files of each to read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol


class MessageSource(Protocol):
    """One upstream (a distribution, or a repository's tags). The build asks it for its releases
    and for each release's files; it never imports them."""

    @property
    def distribution(self) -> str:
        """The name the catalogue's entries carry: "transformers", "torch", "flash-attn"."""
        ...

    def fetch(self, cache: Path) -> None:
        """Bring every release into ``cache`` (the network step; ``build`` reads only the cache)."""
        ...

    def releases(self, cache: Path) -> list[str]:
        """The versions this source can read from ``cache``, oldest first."""
        ...

    def files(self, cache: Path, version: str) -> Iterator[tuple[str, str]]:
        """(path in the distribution, text) of each file of ``version`` whose messages count."""
        ...

    def unread(self, cache: Path) -> list[str]:
        """What this source could not read, one sentence each (a release with no file, a binary)."""
        ...
