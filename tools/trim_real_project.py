"""Trim a real project's copy under tests/projects/<name>/tree to what the tests read (issue 37).

The project scan reads each Python file for a few signals (attn_doctor/facts/project_scan.py); a
copy keeps, of each ``*.py`` file, only the lines its signals match (each match whole, so a call
that spans lines stays one call), under a first line saying so. What one file shows together is
unchanged, which is what the rules' evidence is tied to. Configs (YAML, JSON, notebooks) and the
dependency files are kept whole, as `check` reads them whole; a uv.lock loses the download
entries of packages served by the package index (``sdist``, ``wheels`` and the index ``source``
lines: hashes and file URLs no reader of ours needs), and keeps every URL-sourced package whole.

    python tools/trim_real_project.py tests/projects/open-instruct
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

from attn_doctor.facts.project_scan import SIGNALS

# a line of a package served by the index: its sdist, or its index source
_INDEX_ENTRY = re.compile(r'^(?:sdist = \{ url = "https://files\.|source = \{ registry = "https://pypi\.)')
_INDEX_WHEEL = re.compile(r'^\s*\{ url = "https://files\.')


def trimmed_code(text: str, origin: str) -> str:
    """The lines of ``text`` that the scan's signals match, after a line naming ``origin``."""
    data = text.encode()
    keep: set[int] = set()
    for signal in SIGNALS:
        searched = data.lower() if signal.folded else data
        if signal.literal not in searched:
            continue
        match = signal.search(data)
        if match is not None:
            first = data.count(b"\n", 0, match.start())
            last = data.count(b"\n", 0, max(match.end() - 1, match.start()))
            keep.update(range(first, last + 1))
    lines = text.splitlines()
    kept = [lines[number] for number in sorted(keep) if number < len(lines)]
    return "\n".join([f"# {origin}: only the lines the project scan reads", *kept]) + "\n"


def trimmed_lock(text: str) -> str:
    """A uv.lock without the package index's download entries (a wheels list of them goes whole)."""
    out: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line == "wheels = [":
            end = lines.index("]", index)
            entries = lines[index + 1 : end]
            if entries and all(_INDEX_WHEEL.match(entry) for entry in entries):
                index = end + 1
                continue
        if not _INDEX_ENTRY.match(line):
            out.append(line)
        index += 1
    return "\n".join(out) + "\n"


def main(folder: Path) -> None:
    project = tomllib.loads((folder / "project.toml").read_text())
    tree = folder / "tree"
    for path in sorted(tree.rglob("*")):
        relative = path.relative_to(tree).as_posix()
        if path.suffix == ".py" and path.name != "setup.py":
            origin = f"trimmed from {project['repo']} {relative} at {project['commit'][:12]}"
            path.write_text(trimmed_code(path.read_text(encoding="utf-8", errors="replace"), origin))
        elif path.name == "uv.lock":
            path.write_text(trimmed_lock(path.read_text()))


if __name__ == "__main__":
    for name in sys.argv[1:]:
        main(Path(name))
