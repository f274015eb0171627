"""uv.lock (uv's universal lock): ``[[package]]`` tables; a package locked at several versions for
different platforms or Pythons carries ``resolution-markers``, and the target's marker picks one.
A package whose ``source`` is a wheel URL or path (``tool.uv.sources``: ``flash-attn = { url =
".../flash_attn-2.8.3+cu128torch2.10-cp312-cp312-linux_x86_64.whl" }``), or whose only artifact is
one wheel, is installed from that prebuilt wheel: the Package says which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attn_doctor.facts.sources.common import Declared, wheel_file
from attn_doctor.facts.sources.toml_lock import any_marker, read_entries


def recognises(path: Path, text: str) -> bool:
    return path.name == "uv.lock"


def read(path: Path, text: str, markers: dict[str, str]) -> Declared:
    return read_entries(
        path, text, markers, "package", lambda entry: any_marker(entry.get("resolution-markers")), _wheel
    )


def _wheel(entry: dict[str, Any]) -> str | None:
    """The wheel an entry installs: its source's URL or path when that is a wheel, else its one
    wheel when it has no sdist (a registry package with wheels for several platforms is not one)."""
    source = entry.get("source")
    if isinstance(source, dict):
        for key in ("url", "path"):
            if isinstance(source.get(key), str):
                return wheel_file(source[key])
    wheels = entry.get("wheels")
    if "sdist" not in entry and isinstance(wheels, list) and len(wheels) == 1 and isinstance(wheels[0], dict):
        url = wheels[0].get("url") or wheels[0].get("path") or wheels[0].get("filename")
        return wheel_file(url) if isinstance(url, str) else None
    return None
