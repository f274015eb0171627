"""Registry trees of several top folders, several distributions, any Linux wheel.

``ArchiveTrees`` is ``CachedTrees`` (same cache layout: CACHE/<dist>/<version>/..., a ``.done``
file, ``failed.txt``) for packages whose messages are not all under one import package:

- ``include`` globs are relative to the archive's root (a sdist's ``name-version/`` folder taken
  off): ``*`` stays within one folder, ``**`` crosses folders; ``exclude`` globs take files out;
- ``also``: more distributions whose files join a release from a version on (fla's split into
  flash-linear-attention + fla-core at 0.3.2); a release is kept when its own distribution is;
- wheels of any of ``platforms`` (manylinux_2_28 wheels as well as manylinux2014), for CPython
  3.11, else 3.10 or 3.12, else the sdist (its metadata step run without build isolation, with
  ``sdist_env`` set: flash-attn's setup.py imports torch);
- ``binaries``: archive members (compiled code) whose messages cannot be read as source; each
  release that has one says so in ``unread``.

Only the kept members of an archive are decompressed; the archive is deleted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from packaging.version import Version

from tools.messages.sources.cached_trees import DONE, CachedTrees

NOTES = "notes"  # CACHE/<dist>/notes/<version>.txt: what a release's archives did not give
_SDIST_ROOT = re.compile(r"^[A-Za-z0-9_.]+-\d[^/]*$")  # flash_attn-2.8.3 (also name-v.dist-info)


@dataclass(frozen=True)
class ArchiveTrees(CachedTrees):
    exclude: tuple[str, ...] = ()
    also: tuple[tuple[str, str], ...] = ()  # (distribution, first version it joins)
    platforms: tuple[str, ...] = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
    sdist_env: tuple[tuple[str, str], ...] = ()
    binaries: tuple[str, ...] = ()
    wheels: bool = True  # False: the registry has none (flash-attn), go to the sdist at once

    def keeps(self, member: str) -> str | None:
        """The path to keep for an archive member, relative to the archive's root."""
        parts = member.split("/")
        if len(parts) > 1 and _SDIST_ROOT.match(parts[0]):
            parts = parts[1:]
        relative = "/".join(parts)
        if not relative.endswith(self.suffixes):
            return None
        if any(glob(p).match(relative) for p in self.include) and not any(
            glob(p).match(relative) for p in self.exclude
        ):
            return relative
        return None

    def binary(self, member: str) -> bool:
        relative = member.split("/", 1)[1] if _SDIST_ROOT.match(member.split("/")[0]) else member
        return any(glob(p).match(relative) or glob(p).match(member) for p in self.binaries)

    def distributions(self, version: str) -> list[str]:
        """The distributions whose files make up ``version``."""
        return [self.distribution] + [d for d, first in self.also if Version(version) >= Version(first)]

    def unread(self, cache: Path) -> list[str]:
        notes = cache / self.distribution / NOTES
        out = super().unread(cache)
        for version in self.releases(cache):
            path = notes / f"{version}.txt"
            if path.exists():
                out += [line for line in path.read_text().splitlines() if line.strip()]
        return out

    def _fetch_one(self, version: str, dest: Path) -> bool:
        notes: list[str] = []
        provenance: list[str] = []
        for distribution in self.distributions(version):
            got = self._keep_archive(distribution, version, dest, notes)
            if got is None and distribution == self.distribution:
                return False
            if got is None:
                notes.append(f"{self.distribution} {version}: {distribution}=={version} could not be read")
            else:
                provenance.append(f"{distribution}=={version} {got}")
        provenance += self.supplement(version, dest, notes)
        dest.mkdir(parents=True, exist_ok=True)
        note_file = dest.parent / NOTES / f"{version}.txt"
        note_file.parent.mkdir(parents=True, exist_ok=True)
        note_file.write_text("".join(f"{line}\n" for line in notes))
        (dest / DONE).write_text("".join(f"{line}\n" for line in provenance))
        return True

    def supplement(self, version: str, dest: Path, notes: list[str]) -> list[str]:
        """Files a release's archives lack, from elsewhere (a subclass's; none here)."""
        return []

    def _keep_archive(self, distribution: str, version: str, dest: Path, notes: list[str]) -> str | None:
        """Download one archive and keep its files; the archive's name, or None."""
        with tempfile.TemporaryDirectory() as tmp:
            archive = self._download(distribution, version, Path(tmp))
            if archive is None:
                return None
            binaries = []
            for member, read in members(archive):
                if self.binary(member):
                    binaries.append(member)
                kept = self.keeps(member)
                if kept is not None:
                    (dest / kept).parent.mkdir(parents=True, exist_ok=True)
                    (dest / kept).write_bytes(read())
            for member in binaries:
                notes.append(f"{self.distribution} {version}: {member} is compiled code, not read")
            return archive.name

    def _download(self, distribution: str, version: str, tmp: Path) -> Path | None:
        base = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp)]
        platforms = [arg for platform in self.platforms for arg in ("--platform", platform)]
        attempts: list[tuple[list[str], dict[str, str] | None]] = [
            (["--only-binary=:all:", *platforms, "--python-version", python], None)
            for python in (("3.11", "3.10", "3.12") if self.wheels else ())
        ]
        sdist_env = {**os.environ, **dict(self.sdist_env)}
        attempts.append((["--no-binary=:all:", "--no-build-isolation"], sdist_env))
        for extra, env in attempts:
            done = subprocess.run([*base, f"{distribution}=={version}", *extra], capture_output=True, env=env)
            archives = list(tmp.iterdir())
            if done.returncode == 0 and archives:
                return archives[0]
        return None


@lru_cache(maxsize=256)
def glob(pattern: str) -> re.Pattern[str]:
    """A path glob as a regex: ``**`` any depth (``**/`` none too), ``*`` and ``?`` in one folder."""
    out = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out) + r"\Z")


def members(archive: Path) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(name, reader) of each file of a wheel/zip or a tarball; a member is only decompressed when
    its reader is called."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if not info.is_dir():
                    yield info.filename, partial(zipped.read, info)
    else:
        with tarfile.open(archive) as tarred:
            for member in tarred:
                if member.isfile():
                    yield member.name, partial(_read, tarred, member)


def _read(tarred: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tarred.extractfile(member)
    return handle.read() if handle is not None else b""
