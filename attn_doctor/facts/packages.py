"""Installed distributions, read from their metadata folders without importing them.

``importlib.metadata.distributions()`` parses every METADATA file on the path; we only list
the site directories and read the headers of the few dist-info folders of this stack.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from packaging.version import Version

from attn_doctor.errors import InputError
from attn_doctor.facts.model import NUMERIC_VERSION, ROCM_VERSION, Package, TorchBuild
from attn_doctor.facts.names import WATCHED, installed_name, rule_name
from attn_doctor.inputs import require_regular_file

_METADATA_SUFFIXES = (".dist-info", ".egg-info")
# one line each: no part of the pattern crosses a line break, so a hostile file costs linear time
_TORCH_VERSION_LINE = re.compile(
    r"^(?P<key>cuda|hip)[ \t]*(?::[^=\n]*)?=[ \t]*(?:(?P<q>['\"])(?P<value>[^'\"\n]*)(?P=q)|None)", re.M
)
_METADATA_CAP = 1024 * 1024  # the headers come first; a description can follow for megabytes


def find_installed(paths: Iterable[str]) -> tuple[dict[str, Package], TorchBuild | None, list[str]]:
    """Packages of this stack on ``paths``, torch's build, and one line per broken distribution.

    The first folder on the path wins, as it does for ``import``.
    """
    wanted = {rule_name(name) for name in WATCHED}
    packages: dict[str, Package] = {}
    problems: list[str] = []
    torch_build: TorchBuild | None = None
    for folder in _metadata_folders(paths):
        distribution_stem = folder.name.split("-", 1)[0]
        name = rule_name(distribution_stem)
        if name not in wanted or name in packages:
            continue
        try:
            headers = _read_headers(folder)
        except (OSError, UnicodeDecodeError, InputError) as exc:
            problems.append(f"{folder}: unreadable metadata ({exc})")
            continue
        version = headers.get("version")
        if not version:
            problems.append(f"{folder}: broken metadata (no Version field)")
            continue
        try:
            Version(version)
        except ValueError:  # InvalidVersion, or a number past the int-string limit
            problems.append(f"{folder}: unparsable version {version[:60]!r}")
        name = installed_name(distribution_stem, version)
        if name in packages:
            continue
        packages[name] = Package(
            name=name,
            version=version,
            distribution=headers.get("name") or distribution_stem,
            origin=str(folder),
        )
        if name == "torch":
            try:
                torch_build = _torch_build(folder.parent / "torch" / "version.py")
            except (InputError, OSError) as exc:  # a FIFO or device where torch/version.py should be
                problems.append(f"{folder.parent / 'torch' / 'version.py'}: unreadable ({exc})")
    return packages, torch_build, problems


def _read_headers(folder: Path) -> dict[str, str]:
    """Name and Version from METADATA (PKG-INFO for eggs): the header block, up to a blank line.

    Reading them directly skips importlib.metadata's email parser, a measurable part of `check`.
    """
    path = folder / ("METADATA" if folder.name.endswith(".dist-info") else "PKG-INFO")
    headers: dict[str, str] = {}
    for line in _head(path).decode("utf-8").splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key.lower() in ("name", "version") and key.lower() not in headers:
            headers[key.lower()] = value.strip()
    return headers


def _head(path: Path) -> bytes:
    """The first _METADATA_CAP bytes of a regular file (a FIFO or device is an InputError)."""
    require_regular_file(path)
    with open(path, "rb") as handle:
        return handle.read(_METADATA_CAP)


def _metadata_folders(paths: Iterable[str]) -> Iterable[Path]:
    for entry in paths:
        try:
            with os.scandir(entry or ".") as it:
                names = sorted(e.name for e in it if e.name.endswith(_METADATA_SUFFIXES))
        except OSError:
            continue
        for name in names:
            yield Path(entry or ".", name)


def _torch_build(version_file: Path) -> TorchBuild | None:
    """torch/version.py is plain text: read ``cuda`` and ``hip`` from it instead of importing."""
    if not version_file.exists():
        return None
    text = _head(version_file).decode("utf-8", errors="replace")
    values = {m["key"]: m["value"] for m in _TORCH_VERSION_LINE.finditer(text)}
    if "cuda" not in values and "hip" not in values:
        return None
    for key, shape in (("cuda", NUMERIC_VERSION), ("hip", ROCM_VERSION)):
        value = values.get(key)
        if value is not None and not shape.fullmatch(value):  # its parts are read as numbers later
            raise InputError(key, f"{value[:40]!r} is not a version")
    return TorchBuild(cuda=values.get("cuda"), hip=values.get("hip"))
