"""A source whose releases come from the package registry, kept as trees of the files that count.

``fetch`` downloads each final release's wheel (a Linux x86_64 CPython 3.11 one for binary
packages; the sdist where there is no wheel) with ``pip download --no-deps``, keeps only the
files the ``include`` patterns name under CACHE/<dist>/<version>/<package>/, and deletes the
archive (torch and triton wheels are hundreds of MB). ``files`` then reads those trees.
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

_BINARY = ["--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--python-version", "3.11"]
DONE = ".done"  # written once a release's tree is complete


@dataclass(frozen=True)
class CachedTrees:
    distribution: str
    package: str  # the import package: "transformers", "flash_attn", "fla"
    include: tuple[str, ...]  # glob patterns of the files whose messages count, relative to the package
    floor: str = "0"  # the oldest release read
    suffixes: tuple[str, ...] = (".py",)  # the kinds of file kept (".cpp", ".h", ".cu" for C++ checks)

    def releases(self, cache: Path) -> list[str]:
        folder = cache / self.distribution
        found = [
            child.name
            for child in (folder.iterdir() if folder.is_dir() else [])
            if _final(child.name, self.floor) and (child / DONE).exists()
        ]
        return sorted(found, key=Version)

    def files(self, cache: Path, version: str) -> Iterator[tuple[str, str]]:
        root = cache / self.distribution / version
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.name != DONE:
                yield path.relative_to(root).as_posix(), path.read_text(encoding="utf-8", errors="replace")

    def unread(self, cache: Path) -> list[str]:
        folder = cache / self.distribution
        failed = (
            sorted((folder / "failed.txt").read_text().split()) if (folder / "failed.txt").exists() else []
        )
        return [f"{self.distribution} {version}: no wheel or sdist could be read" for version in failed]

    def keeps(self, member: str) -> str | None:
        """The path to keep for an archive member (``pkg/...``; an sdist's ``name-v/pkg/...``)."""
        parts = member.split("/")
        if self.package in parts[:2]:
            relative = "/".join(parts[parts.index(self.package) + 1 :])
            if relative.endswith(self.suffixes) and any(fnmatch.fnmatch(relative, p) for p in self.include):
                return f"{self.package}/{relative}"
        return None

    def fetch(
        self, cache: Path, versions: list[str] | None = None, log: Callable[[str], None] = print
    ) -> None:
        """Download and keep the files of each release (of ``versions``, default: every one the
        registry lists) not kept yet."""
        failed = []
        wanted = registry_versions(self.distribution) if versions is None else versions
        for version in sorted((v for v in wanted if _final(v, self.floor)), key=Version):
            dest = cache / self.distribution / version
            if (dest / DONE).exists():
                continue
            if self._fetch_one(version, dest):
                log(f"{self.distribution} {version}: kept")
            else:
                failed.append(version)
                log(f"{self.distribution} {version}: NOT FOUND")
        (cache / self.distribution).mkdir(parents=True, exist_ok=True)
        (cache / self.distribution / "failed.txt").write_text("\n".join(failed) + "\n")

    def _fetch_one(self, version: str, dest: Path) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            for extra in (_BINARY, ["--no-binary=:all:"]):
                command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp]
                done = subprocess.run(
                    [*command, f"{self.distribution}=={version}", *extra], capture_output=True
                )
                archives = list(Path(tmp).iterdir())
                if done.returncode == 0 and archives:
                    break
            else:
                return False
            for member, data in _members(archives[0]):
                kept = self.keeps(member)
                if kept is not None:
                    (dest / kept).parent.mkdir(parents=True, exist_ok=True)
                    (dest / kept).write_bytes(data)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / DONE).write_text(f"{self.distribution}=={version}\n")
        return True


def registry_versions(distribution: str) -> list[str]:
    """Every version the registry lists for ``distribution``."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", distribution], capture_output=True, text=True
    ).stdout
    for line in out.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def _final(version: str, floor: str) -> bool:
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return not parsed.is_prerelease and not parsed.is_devrelease and parsed >= Version(floor)


def _members(archive: Path) -> Iterator[tuple[str, bytes]]:
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if not info.is_dir():
                    yield info.filename, zipped.read(info)
    else:
        with tarfile.open(archive) as tarred:
            for member in tarred.getmembers():
                handle = tarred.extractfile(member) if member.isfile() else None
                if handle is not None:
                    yield member.name, handle.read()
