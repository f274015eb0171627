"""Refresh attn-doctor's release-facts snapshot (attn_doctor/releases/snapshot/).

A maintainer runs this with network access, from the repository root:

    python tools/refresh_release_facts.py --flash-attention-git PATH --triton-git TRITON_PATH

PATH and TRITON_PATH are bare (or ordinary) git clones of flash-attention and of triton
(triton-lang/triton) with their tags. The run takes a minute or two; review the diff of
attn_doctor/releases/snapshot/ and commit it. docs/release-facts.md describes every file and
field, where each fact is read from, and how to add a package.

What it reads:

1. The registry pip uses. The base URL comes from pip's configuration: PIP_INDEX_URL, then
   `pip config get global.index-url`, then pip's own default (pip._internal.models.index.PyPI);
   --index-url overrides all three. Every package in PACKAGES is read through the PEP 691 JSON
   simple API; for each final or post release one wheel for the default target (Linux x86_64,
   CPython 3.11 first) is chosen and its PEP 658 metadata (`<wheel url>.metadata`) is read for
   Requires-Dist and Requires-Python. A release whose metadata cannot be read is kept, with
   "requires_dist": null and the reason.
2. flash-attention's git history: for every `v2.*` tag, the build-wheels job's strategy.matrix in
   .github/workflows/publish.yml (expanded into the list of prebuilt wheels the release asked
   for) and the `-gencode arch=compute_XX,code=sm_XX` flags in setup.py.
3. triton's git history: for every final `vX.Y.Z` tag from v2 on, the CUDA toolchain version of
   the ptxas the release bundles (triton-ptxas.json): `ptxas` and `ptxas-blackwell` in
   cmake/nvidia-toolchain-version.json (3.2 on), the one version in
   cmake/nvidia-toolchain-version.txt (3.0, 3.1), or the ptxas download in python/setup.py
   (2.x: a literal `version=` or the cuda-nvcc-X.Y.Z file name in its URL). With it, the GPU
   architectures that ptxas can compile for, from CUDA_ARCHS: the archs each CUDA release added
   (NVIDIA's CUDA features archive, checked against `ptxas --help` of each CUDA release).

Only the standard library and `packaging` (a dependency of attn-doctor) are used: the workflow
matrix is read by a small purpose-built YAML-subset reader (block mappings and sequences, flow
lists of scalars, quoted and plain scalars, comments), not PyYAML.

Options: --out DIR (default: the package's snapshot folder), --index-url URL, --packages a,b
(refresh only those registry files; the others and meta.json's entries for them are kept; with it
--triton-git may be left out, and triton-ptxas.json is kept as it is),
--workers N (at most 8), --timeout SECONDS, --retries N. triton-ptxas.json and
flash-attn-wheels.json are rewritten by every run. --ngc-images alone rewrites only
ngc-pytorch-images.json from tools/ngc_pytorch_images.json, offline (no clones, no index), and
exits 1 when a fact or a tag was left out.

Tests (tests/test_release_facts_generator.py) run the same code offline: the fetch layer is any
callable mapping (url, headers) to bytes, and the git layer any object with tags() and read()
(and commit(), for triton).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import email.parser
import email.policy
import hashlib
import io
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "attn_doctor" / "releases" / "snapshot"
SCHEMA = "attn-doctor/release-facts"
SCHEMA_VERSION = 1
GENERATOR = "python tools/refresh_release_facts.py --flash-attention-git PATH --triton-git TRITON_PATH"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
USER_AGENT = "attn-doctor-release-facts/1 (python urllib)"
MAX_WORKERS = 8
PUBLISH_WORKFLOW = ".github/workflows/publish.yml"
TRITON_PTXAS_FILE = "triton-ptxas.json"
TRITON_PROBLEM = "triton: "  # the prefix of the problems generate() reports for the triton clone

# The packages whose Requires-Dist matter to the attention stack, for the packages that depend on
# half the ecosystem (only these names are kept for them).
STACK_NAMES = frozenset({"torch", "triton", "flash-attn", "accelerate", "transformers"})


@dataclass(frozen=True)
class PackageSpec:
    """One registry package. metadata=False: the index alone (versions, dates, yanked)."""

    name: str
    metadata: bool = True
    keep_requires: frozenset[str] | None = None  # None: keep every Requires-Dist


PACKAGES: tuple[PackageSpec, ...] = (
    PackageSpec("torch"),
    PackageSpec("triton"),
    PackageSpec("pytorch-triton"),
    PackageSpec("transformers", keep_requires=STACK_NAMES),
    PackageSpec("xformers"),
    PackageSpec("flash-linear-attention"),
    PackageSpec("fla-core"),
    PackageSpec("flash-attn", metadata=False),  # an sdist only: wheels come from GitHub releases
    PackageSpec("nvidia-cudnn-cu12"),
    PackageSpec("nvidia-cudnn-cu13"),
    PackageSpec("accelerate", keep_requires=STACK_NAMES),
    PackageSpec("peft", keep_requires=STACK_NAMES),
    # engines and trainers that pin the stack for their users (vllm 0.8.5.post1: torch==2.6.0)
    PackageSpec("vllm", keep_requires=STACK_NAMES | {"xformers"}),
    PackageSpec("trl", keep_requires=STACK_NAMES),
)


# --------------------------------------------------------------------------------------------
# Fetch layer


class FetchError(Exception):
    """A URL could not be read. status: the HTTP status when there was one."""

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.status = status


Fetch = Callable[[str, Mapping[str, str]], bytes]


class UrlFetcher:
    """urllib with a timeout and retries (backoff 1 s, 2 s, ...); 404 and 410 are not retried.

    A request with a Range header must be answered with 206 (or a 200 no longer than the range):
    a server that ignores Range is never read to the end (a torch wheel is close to 1 GB).
    """

    def __init__(self, timeout: float = 30.0, retries: int = 3) -> None:
        self.timeout = timeout
        self.retries = retries
        self.requests = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def __call__(self, url: str, headers: Mapping[str, str]) -> bytes:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **headers})
        wanted = _range_length(headers.get("Range"))
        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    if wanted is not None and response.status != 206:
                        length = response.headers.get("Content-Length")
                        if response.status != 200 or length is None or int(length) > wanted:
                            raise FetchError(url, "the server ignored the Range header")
                    data: bytes = response.read() if wanted is None else response.read(wanted)
                    with self._lock:
                        self.requests += 1
                        self.bytes += len(data)
                    return data
            except urllib.error.HTTPError as error:
                if error.code in (404, 410):
                    raise FetchError(url, f"HTTP {error.code}", error.code) from None
                last = f"HTTP {error.code}"
                if error.code < 500 and error.code != 429:
                    raise FetchError(url, last, error.code) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
                last = str(getattr(error, "reason", error)) or type(error).__name__
        raise FetchError(url, f"{last} (after {self.retries + 1} attempts)")


def _range_length(header: str | None) -> int | None:
    if header is None:
        return None
    match = re.fullmatch(r"bytes=(\d+)-(\d+)", header)
    if not match:
        raise ValueError(f"unsupported Range {header!r}")
    return int(match.group(2)) - int(match.group(1)) + 1


class RangeReader(io.RawIOBase):
    """A read-only file over HTTP range requests, enough for zipfile (reads in 64 KiB blocks)."""

    BLOCK = 1 << 16

    def __init__(self, fetch: Fetch, url: str, size: int) -> None:
        super().__init__()
        self.fetch = fetch
        self.url = url
        self.size = size
        self.position = 0
        self.fetched = 0
        self._cache: tuple[int, bytes] = (0, b"")

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, min(self.size, base + offset))
        return self.position

    def read(self, size: int | None = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        if end <= self.position:
            return b""
        start, block = self._cache
        if not (start <= self.position and end <= start + len(block)):
            start = self.position
            stop = min(self.size, max(end, start + self.BLOCK))
            block = self.fetch(self.url, {"Range": f"bytes={start}-{stop - 1}"})
            if len(block) != stop - start:
                raise FetchError(self.url, f"short range read ({len(block)} of {stop - start} bytes)")
            self.fetched += len(block)
            self._cache = (start, block)
        data = block[self.position - start : end - start]
        self.position = end
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def metadata_from_wheel(fetch: Fetch, url: str, size: int) -> bytes:
    """The wheel's .dist-info/METADATA (what PEP 658 serves) through range requests."""
    reader = RangeReader(fetch, url, size)
    try:
        with zipfile.ZipFile(reader) as wheel:
            names = [n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            if len(names) != 1:
                raise FetchError(url, f"{len(names)} .dist-info/METADATA files in the wheel")
            return wheel.read(names[0])
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        raise FetchError(url, f"not a readable zip over range requests ({error})") from None


def pip_index_url() -> str:
    """The index pip would use: PIP_INDEX_URL, pip's global.index-url, then pip's default."""
    env = os.environ.get("PIP_INDEX_URL", "").strip()
    if env:
        return env.split()[0]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        configured = done.stdout.strip()
        if done.returncode == 0 and configured:
            return configured.strip("'\"")
    except (OSError, subprocess.SubprocessError):
        pass
    from pip._internal.models.index import PyPI

    default: str = PyPI.simple_url
    return default


# --------------------------------------------------------------------------------------------
# Registry


@dataclass
class IndexFile:
    filename: str
    url: str
    version: Version
    kind: str  # "wheel" or "sdist"
    requires_python: str | None
    uploaded: str | None  # YYYY-MM-DD
    yanked: bool
    yanked_reason: str | None
    core_metadata: Any  # the index's core-metadata value; None when the index did not say
    size: int | None = None
    wheel_tags: frozenset[tuple[str, str, str]] = frozenset()


@dataclass
class MetadataResult:
    requires_dist: list[str] | None
    requires_python: str | None
    error: str | None
    via: str | None = None  # "pep658" (<wheel>.metadata) or "wheel" (range requests into the wheel)


@dataclass
class PackageReport:
    name: str
    releases: int = 0
    skipped_versions: int = 0  # pre-, dev- and local versions
    unparsed_files: list[str] = field(default_factory=list)
    metadata_errors: dict[str, str] = field(default_factory=dict)


def project_url(index_url: str, name: str) -> str:
    return index_url.rstrip("/") + "/" + canonicalize_name(name) + "/"


def fetch_project(fetch: Fetch, index_url: str, name: str) -> tuple[str, dict[str, Any]]:
    url = project_url(index_url, name)
    data = fetch(url, {"Accept": SIMPLE_JSON})
    try:
        page = json.loads(data)
    except ValueError:
        raise FetchError(
            url, "the index did not answer with PEP 691 JSON (is it a JSON simple API?)"
        ) from None
    if not isinstance(page, dict) or not isinstance(page.get("files"), list):
        raise FetchError(url, "no 'files' list in the index's answer")
    api = str(page.get("meta", {}).get("api-version", "1.0"))
    if api.split(".")[0] != "1":
        raise FetchError(url, f"unsupported simple API version {api}")
    return url, page


def _date(value: Any) -> str | None:
    if not isinstance(value, str) or len(value) < 10:
        return None
    try:
        return datetime.date.fromisoformat(value[:10]).isoformat()
    except ValueError:
        return None


def parse_index_file(entry: Mapping[str, Any], page_url: str, project: str) -> IndexFile | None:
    """One file of the simple API; None for a file that is neither a wheel nor an sdist."""
    filename = str(entry.get("filename", ""))
    tags: frozenset[tuple[str, str, str]] = frozenset()
    try:
        if filename.endswith(".whl"):
            name, version, _build, wheel_tags = parse_wheel_filename(filename)
            kind = "wheel"
            tags = frozenset((t.interpreter, t.abi, t.platform) for t in wheel_tags)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
            kind = "sdist"
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    if name != canonicalize_name(project):
        return None
    yanked = entry.get("yanked", False)
    core = entry.get("core-metadata", entry.get("data-dist-info-metadata"))
    url, _fragment = urllib.parse.urldefrag(urllib.parse.urljoin(page_url, str(entry.get("url", ""))))
    return IndexFile(
        filename=filename,
        url=url,
        version=version,
        kind=kind,
        requires_python=entry.get("requires-python") or None,
        uploaded=_date(entry.get("upload-time")),
        yanked=bool(yanked),
        yanked_reason=(" ".join(yanked.split()) or None) if isinstance(yanked, str) else None,
        core_metadata=core,
        size=entry["size"] if isinstance(entry.get("size"), int) else None,
        wheel_tags=tags,
    )


def kept_version(version: Version) -> bool:
    """Final and post releases only: no pre-releases, no dev releases, no local versions."""
    return not version.is_prerelease and not version.is_devrelease and version.local is None


PREFERRED_PYTHONS = ("cp311", "cp312", "cp310")


def wheel_rank(file: IndexFile) -> tuple[int, int] | None:
    """Lower is better; None: not a wheel for the default target (Linux x86_64 or pure Python).

    Linux x86_64 manylinux for cp311, cp312, cp310, then any other manylinux x86_64 (the CPython
    nearest 3.11 first, newer before older), then plain linux_x86_64, then py3-none-any.
    """
    if file.kind != "wheel":
        return None
    platforms = {platform for _i, _a, platform in file.wheel_tags}
    interpreters = {interpreter for interpreter, _a, _p in file.wheel_tags}
    manylinux = any(p.startswith("manylinux") and p.endswith("_x86_64") for p in platforms)
    if manylinux:
        for rank, python in enumerate(PREFERRED_PYTHONS):
            if python in interpreters:
                return (rank, 0)
        minors = [int(m.group(1)) for i in interpreters if (m := re.fullmatch(r"cp3(\d+)", i))]
        distance = min((abs(minor - 11) * 2 + (minor < 11) for minor in minors), default=99)
        return (len(PREFERRED_PYTHONS), distance)
    if "linux_x86_64" in platforms:
        return (len(PREFERRED_PYTHONS) + 1, 0)
    if any(p == "any" and a == "none" and i.startswith("py3") for i, a, p in file.wheel_tags):
        return (len(PREFERRED_PYTHONS) + 2, 0)
    return None


def pick_wheel(files: Sequence[IndexFile]) -> IndexFile | None:
    """The one wheel whose metadata stands for the release (non-yanked files first)."""
    live = [f for f in files if not f.yanked] or list(files)
    ranked = [(rank, f.filename, f) for f in live if (rank := wheel_rank(f)) is not None]
    if not ranked:
        return None
    return min(ranked, key=lambda item: (item[0], item[1]))[2]


def normalize_requirement(raw: str) -> str:
    text = " ".join(raw.split())
    try:
        return str(Requirement(text))
    except InvalidRequirement:
        return text


def requirement_name(text: str) -> str:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        match = re.match(r"[A-Za-z0-9._-]+", text)
        return canonicalize_name(match.group(0)) if match else ""


def parse_metadata(data: bytes) -> tuple[str, str, list[str], str | None]:
    """(Name, Version, Requires-Dist, Requires-Python) of a core metadata file."""
    message = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(data, headersonly=True)
    raw = [normalize_requirement(str(value)) for value in message.get_all("Requires-Dist") or []]
    requires = list(dict.fromkeys(raw))  # repeated lines (some releases have them) once, in order
    python = message.get("Requires-Python")
    return (
        str(message.get("Name", "")),
        str(message.get("Version", "")),
        requires,
        " ".join(str(python).split()) if python else None,
    )


def fetch_metadata(fetch: Fetch, spec: PackageSpec, wheel: IndexFile) -> MetadataResult:
    """Requires-Dist and Requires-Python of one wheel: its PEP 658 file, else the wheel's own
    .dist-info/METADATA read through range requests (the same bytes, by PEP 658's definition)
    when the index has no PEP 658 file for it (says so, or answers 404)."""
    core = wheel.core_metadata
    via = "pep658"
    data: bytes | None = None
    missing = "the index offers no PEP 658 metadata"
    if core is not False:
        try:
            data = fetch(wheel.url + ".metadata", {})
        except FetchError as error:
            if error.status not in (404, 410):
                return MetadataResult(None, None, f"metadata of {wheel.filename}: {error.reason}")
            missing = f"PEP 658 metadata: {error.reason}"
        else:
            expected = core.get("sha256") if isinstance(core, Mapping) else None
            if isinstance(expected, str) and hashlib.sha256(data).hexdigest() != expected.lower():
                return MetadataResult(None, None, f"metadata of {wheel.filename}: sha256 mismatch")
    if data is None:
        if wheel.size is None:
            return MetadataResult(None, None, f"{wheel.filename}: {missing}; no size to read the wheel")
        via = "wheel"
        try:
            data = metadata_from_wheel(fetch, wheel.url, wheel.size)
        except FetchError as error:
            return MetadataResult(None, None, f"{wheel.filename}: {missing}; wheel: {error.reason}")
    try:
        name, version, requires, python = parse_metadata(data)
    except Exception as error:  # a malformed file is a reason, not a crash
        return MetadataResult(None, None, f"metadata of {wheel.filename}: unreadable ({error})")
    if canonicalize_name(name) != canonicalize_name(spec.name):
        return MetadataResult(None, None, f"metadata of {wheel.filename} names {name!r}")
    try:
        if Version(version) != wheel.version:
            return MetadataResult(None, None, f"metadata of {wheel.filename} says version {version!r}")
    except InvalidVersion:
        return MetadataResult(None, None, f"metadata of {wheel.filename}: invalid version {version!r}")
    if spec.keep_requires is not None:
        requires = [r for r in requires if requirement_name(r) in spec.keep_requires]
    return MetadataResult(requires, python, None, via)


def release_entry(
    spec: PackageSpec, files: Sequence[IndexFile], wheel: IndexFile | None, meta: MetadataResult | None
) -> dict[str, Any]:
    dates = sorted(f.uploaded for f in files if f.uploaded)
    yanked = all(f.yanked for f in files)
    entry: dict[str, Any] = {"uploaded": dates[0] if dates else None, "yanked": yanked}
    if yanked:
        reasons = sorted({f.yanked_reason for f in files if f.yanked_reason})
        if reasons:
            entry["yanked_reason"] = reasons[0]
    by_name = sorted(files, key=lambda f: f.filename)
    index_python = next((f.requires_python for f in by_name if f.requires_python), None)
    if not spec.metadata:
        entry["requires_python"] = index_python
        entry["files"] = sorted({f.kind for f in files})
        return entry
    if wheel is None:
        entry["requires_python"] = index_python
        entry["metadata_from"] = None
        entry["metadata_via"] = None
        entry["requires_dist"] = None
        entry["metadata_error"] = "no wheel for Linux x86_64 or pure Python; the release has: " + ", ".join(
            sorted({_describe(f) for f in files})
        )
        return entry
    assert meta is not None
    entry["metadata_from"] = wheel.filename
    entry["requires_python"] = meta.requires_python if meta.error is None else wheel.requires_python
    entry["requires_dist"] = meta.requires_dist
    entry["metadata_via"] = meta.via
    if meta.error is not None:
        entry["metadata_error"] = meta.error
    return entry


def _describe(file: IndexFile) -> str:
    if file.kind == "sdist":
        return "sdist"
    return "wheel for " + ".".join(sorted({platform for _i, _a, platform in file.wheel_tags}))


@dataclass
class ProjectPlan:
    spec: PackageSpec
    releases: dict[Version, list[IndexFile]]
    report: PackageReport


def plan_project(spec: PackageSpec, page_url: str, page: Mapping[str, Any]) -> ProjectPlan:
    report = PackageReport(spec.name)
    releases: dict[Version, list[IndexFile]] = {}
    skipped: set[Version] = set()
    for raw in page["files"]:
        if not isinstance(raw, Mapping):
            continue
        parsed = parse_index_file(raw, page_url, spec.name)
        if parsed is None:
            report.unparsed_files.append(str(raw.get("filename")))
            continue
        if not kept_version(parsed.version):
            skipped.add(parsed.version)
            continue
        releases.setdefault(parsed.version, []).append(parsed)
    report.skipped_versions = len(skipped)
    report.releases = len(releases)
    return ProjectPlan(spec, dict(sorted(releases.items())), report)


def collect_registry(
    specs: Sequence[PackageSpec], fetch: Fetch, index_url: str, workers: int = MAX_WORKERS
) -> tuple[dict[str, dict[str, Any]], list[PackageReport]]:
    """{name: registry file content} for every spec; raises FetchError when an index page fails."""
    workers = max(1, min(workers, MAX_WORKERS))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        pages = list(pool.map(lambda spec: fetch_project(fetch, index_url, spec.name), specs))
        plans = [plan_project(spec, url, page) for spec, (url, page) in zip(specs, pages)]
        jobs: dict[tuple[str, Version], concurrent.futures.Future[MetadataResult]] = {}
        chosen: dict[tuple[str, Version], IndexFile | None] = {}
        for plan in plans:
            for version, files in plan.releases.items():
                wheel = pick_wheel(files) if plan.spec.metadata else None
                chosen[(plan.spec.name, version)] = wheel
                if wheel is not None:
                    jobs[(plan.spec.name, version)] = pool.submit(fetch_metadata, fetch, plan.spec, wheel)
        results = {key: future.result() for key, future in jobs.items()}
    out: dict[str, dict[str, Any]] = {}
    for plan in plans:
        releases: dict[str, Any] = {}
        for version, files in plan.releases.items():
            key = (plan.spec.name, version)
            entry = release_entry(plan.spec, files, chosen[key], results.get(key))
            if "metadata_error" in entry:
                plan.report.metadata_errors[str(version)] = entry["metadata_error"]
            releases[str(version)] = entry
        out[plan.spec.name] = {
            "name": plan.spec.name,
            "metadata": "wheel" if plan.spec.metadata else "none",
            "requires_dist_kept": sorted(plan.spec.keep_requires) if plan.spec.keep_requires else None,
            "releases": releases,
        }
    return out, [plan.report for plan in plans]


# --------------------------------------------------------------------------------------------
# A YAML subset, enough for a GitHub Actions strategy.matrix block


class YamlSubsetError(ValueError):
    pass


_PLAIN_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


def strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a # inside quotes, or not after a space, stays)."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip()
    return line.rstrip()


def scalar(text: str) -> str:
    """A scalar as GitHub Actions sees it: quoted text verbatim; plain numbers as YAML reads them."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        return inner.replace("''", "'") if text[0] == "'" else inner
    if _PLAIN_NUMBER.fullmatch(text):  # python-version: 3.10 is the number 3.1 in YAML
        number = float(text)
        return str(int(number)) if number.is_integer() and "e" not in text.lower() else repr(number)
    return text


def split_flow(text: str) -> list[str]:
    """`[a, 'b', "c"]` -> the items (scalars only; no nested collections)."""
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        raise YamlSubsetError(f"not a flow list: {text!r}")
    inner = inner[1:-1]
    items: list[str] = []
    current = ""
    quote = ""
    for char in inner:
        if quote:
            current += char
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            current += char
        elif char == ",":
            items.append(current)
            current = ""
        elif char in "[]{}":
            raise YamlSubsetError(f"nested collection in {text!r}")
        else:
            current += char
    if current.strip():
        items.append(current)
    return [scalar(item) for item in items if item.strip()]


def _lines(text: str) -> list[tuple[int, str]]:
    out = []
    for raw in text.splitlines():
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlSubsetError("tab indentation")
        line = strip_comment(raw)
        if line.strip():
            out.append((len(line) - len(line.lstrip(" ")), line.strip()))
    return out


def _key_value(content: str) -> tuple[str, str] | None:
    match = re.match(r"""^('[^']*'|"[^"]*"|[^'"\s:][^:]*?)\s*:(?:\s+(.*))?$""", content)
    if not match:
        return None
    return scalar(match.group(1)), (match.group(2) or "").strip()


YamlValue = Any  # str | list[YamlValue] | dict[str, YamlValue]


def _value(rest: str, lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[YamlValue, int]:
    """The value after `key:`; rest is what followed the colon on the key's line."""
    if rest:
        if rest.startswith("["):
            text = rest
            while text.count("[") > text.count("]"):  # a flow list over several lines
                if pos >= len(lines):
                    raise YamlSubsetError("unclosed flow list")
                text += " " + lines[pos][1]
                pos += 1
            return split_flow(text), pos
        if rest[0] in "{|>&*!":
            raise YamlSubsetError(f"unsupported YAML: {rest!r}")
        return scalar(rest), pos
    if pos < len(lines) and lines[pos][0] > indent:
        return _block(lines, pos, lines[pos][0])
    if pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("- "):
        return _block(lines, pos, indent)  # a sequence may sit at its key's indentation
    return "", pos


def _block(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[YamlValue, int]:
    if lines[pos][1].startswith("-"):
        items: list[YamlValue] = []
        while pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("-"):
            content = lines[pos][1][1:].lstrip()
            pos += 1
            if not content:
                value, pos = _block(lines, pos, lines[pos][0]) if pos < len(lines) else ("", pos)
                items.append(value)
                continue
            pair = _key_value(content) if not content.startswith(("[", "'", '"')) else None
            if pair is None:
                items.append(split_flow(content) if content.startswith("[") else scalar(content))
                continue
            # a mapping item: its first key sits after "- ", the others at that column
            column = indent + (len(lines[pos - 1][1]) - len(content))
            key, rest = pair
            mapping: dict[str, YamlValue] = {}
            mapping[key], pos = _value(rest, lines, pos, column)
            if pos < len(lines) and lines[pos][0] == column and not lines[pos][1].startswith("-"):
                more, pos = _mapping(lines, pos, column)
                mapping.update(more)
            items.append(mapping)
        return items, pos
    return _mapping(lines, pos, indent)


def _mapping(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[dict[str, YamlValue], int]:
    mapping: dict[str, YamlValue] = {}
    while pos < len(lines) and lines[pos][0] == indent and not lines[pos][1].startswith("- "):
        pair = _key_value(lines[pos][1])
        if pair is None:
            raise YamlSubsetError(f"expected `key: value`, got {lines[pos][1]!r}")
        key, rest = pair
        mapping[key], pos = _value(rest, lines, pos + 1, indent)
    if pos < len(lines) and lines[pos][0] > indent:
        raise YamlSubsetError(f"unexpected indentation at {lines[pos][1]!r}")
    return mapping, pos


def parse_yaml_block(text: str) -> YamlValue:
    lines = _lines(text)
    if not lines:
        return {}
    value, pos = _block(lines, 0, lines[0][0])
    if pos != len(lines):
        raise YamlSubsetError(f"unexpected line {lines[pos][1]!r}")
    return value


def _child_block(lines: list[str], start: int) -> list[str]:
    """The lines nested under lines[start] (a `key:` line), comments and blanks included."""
    indent = len(lines[start]) - len(lines[start].lstrip(" "))
    out = []
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and len(line) - len(line.lstrip(" ")) <= indent:
            break
        out.append(line)
    return out


def _find_key(lines: list[str], key: str) -> int | None:
    """The first line that is `key:` at the block's shallowest indentation."""
    body = [(i, line) for i, line in enumerate(lines) if line.strip() and not line.strip().startswith("#")]
    if not body:
        return None
    indent = min(len(line) - len(line.lstrip(" ")) for _i, line in body)
    for index, line in body:
        if len(line) - len(line.lstrip(" ")) == indent and re.match(
            rf"{re.escape(key)}\s*:\s*(#.*)?$", line.strip()
        ):
            return index
    return None


def workflow_matrix(workflow: str) -> tuple[str, dict[str, YamlValue]]:
    """(job id, strategy.matrix) of the job that builds the wheels (the one with torch-version)."""
    lines = workflow.splitlines()
    jobs_at = next((i for i, line in enumerate(lines) if re.match(r"jobs\s*:\s*(#.*)?$", line)), None)
    if jobs_at is None:
        raise YamlSubsetError("no top-level `jobs:`")
    jobs = _child_block(lines, jobs_at)
    body = [line for line in jobs if line.strip() and not line.strip().startswith("#")]
    if not body:
        raise YamlSubsetError("empty `jobs:`")
    job_indent = len(body[0]) - len(body[0].lstrip(" "))
    candidates: list[tuple[str, dict[str, YamlValue]]] = []
    for index, line in enumerate(jobs):
        match = re.match(r"^( *)([A-Za-z0-9_-]+)\s*:\s*(#.*)?$", line)
        if not match or len(match.group(1)) != job_indent:
            continue
        job = _child_block(jobs, index)
        strategy = _find_key(job, "strategy")
        if strategy is None:
            continue
        block = _child_block(job, strategy)
        matrix_at = _find_key(block, "matrix")
        if matrix_at is None:
            continue
        matrix = parse_yaml_block("\n".join(_child_block(block, matrix_at)))
        if isinstance(matrix, dict) and "torch-version" in matrix:
            candidates.append((match.group(2), matrix))
    if not candidates:
        raise YamlSubsetError("no job with a strategy.matrix naming torch-version")
    named = [c for c in candidates if c[0].replace("-", "_") == "build_wheels"]
    return (named or candidates)[0]


def expand_matrix(matrix: Mapping[str, YamlValue]) -> list[dict[str, str]]:
    """GitHub Actions' expansion: the product of the axes, less `exclude`, plus `include`."""
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    for key, values in axes.items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise YamlSubsetError(f"matrix axis {key!r} is not a list of scalars")
    names = list(axes)
    combos = [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]
    for rule in _rules(matrix.get("exclude")):
        combos = [c for c in combos if not all(c.get(k) == v for k, v in rule.items())]
    originals = [dict(c) for c in combos]
    for rule in _rules(matrix.get("include")):
        matched = False
        for combo, original in zip(combos, originals):
            if all(original[k] == v for k, v in rule.items() if k in original):
                combo.update({k: v for k, v in rule.items() if k not in original})
                matched = True
        if not matched:
            combos.append(dict(rule))
            originals.append(dict(rule))
    return combos


def _rules(value: YamlValue) -> list[dict[str, str]]:
    if value in (None, ""):
        return []
    if not isinstance(value, list) or not all(isinstance(rule, dict) for rule in value):
        raise YamlSubsetError("exclude/include is not a list of mappings")
    rules = []
    for rule in value:
        if not all(isinstance(v, str) for v in rule.values()):
            raise YamlSubsetError("exclude/include values must be scalars")
        rules.append({str(k): str(v) for k, v in rule.items()})
    return rules


def _abi(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise YamlSubsetError(f"cxx11_abi {value!r} is neither TRUE nor FALSE")


def _numeric(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", text))


def wheel_sort_key(wheel: Mapping[str, Any]) -> tuple[Any, ...]:
    try:
        torch: Any = (0, Version(wheel["torch"]))
    except InvalidVersion:
        torch = (1, wheel["torch"])
    return (
        torch,
        _numeric(str(wheel["cuda"])),
        _numeric(str(wheel["python"])),
        wheel["cxx11_abi"] is True,
        str(wheel.get("os")),
    )


def wheels_from_workflow(workflow: str) -> tuple[str, list[str], list[dict[str, Any]]]:
    """(job id, the os axis, the wheels); a wheel names its os only when the axis has several."""
    job, matrix = workflow_matrix(workflow)
    combos = expand_matrix(matrix)
    systems = sorted({c["os"] for c in combos if "os" in c})
    wheels = []
    for combo in combos:
        wheel: dict[str, Any] = {
            "torch": combo.get("torch-version"),
            "cuda": combo.get("cuda-version"),
            "python": combo.get("python-version"),
            "cxx11_abi": _abi(combo.get("cxx11_abi")),
        }
        if len(systems) > 1:
            wheel["os"] = combo.get("os")
        if None in (wheel["torch"], wheel["cuda"], wheel["python"]):
            raise YamlSubsetError(f"a matrix entry lacks torch, cuda or python: {combo}")
        wheels.append(wheel)
    unique = {json.dumps(w, sort_keys=True): w for w in wheels}
    return job, systems, sorted(unique.values(), key=wheel_sort_key)


# --------------------------------------------------------------------------------------------
# setup.py: the CUDA architectures a release builds for

_GENCODE = re.compile(r"arch=compute_(\d+[a-z]?),code=sm_(\d+[a-z]?)")
_MIN_CUDA = re.compile(r"""bare_metal_version\s*>=\s*Version\(\s*["']([0-9.]+)["']\s*\)""")
_ARCH_SWITCH = re.compile(r"""["'](\d+[a-z]?)["']\s+in\s+cuda_archs\(\)""")
_ARCH_DEFAULT = re.compile(r"""FLASH_ATTN_CUDA_ARCHS["']\s*,\s*["']([0-9a-z;]+)["']""")


@dataclass
class ArchFacts:
    archs: list[str]
    min_cuda: dict[str, str]
    notes: str


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def gencode_archs(setup_py: str, tag: str) -> ArchFacts:
    """The `-gencode arch=compute_XX,code=sm_XX` flags of setup.py and the `if`s around them."""
    lines = setup_py.splitlines()
    default_match = _ARCH_DEFAULT.search(setup_py)
    default_archs = default_match.group(1).split(";") if default_match else None
    found: dict[str, list[str]] = {}
    for number, line in enumerate(lines):
        code = line.split("#", 1)[0]
        match = _GENCODE.search(code)
        if not match:
            continue
        arch = f"sm_{match.group(2)}"
        conditions: list[str] = []
        depth = _indent(line)
        for previous in reversed(lines[:number]):
            stripped = previous.strip()
            if not stripped or stripped.startswith("#") or _indent(previous) >= depth:
                continue
            depth = _indent(previous)
            if re.match(r"(el)?if\b", stripped):
                conditions.append(stripped)
            elif re.match(r"(def|class)\b", stripped) or depth == 0:
                break
            elif stripped.startswith("else"):
                conditions.append(stripped)
        found.setdefault(arch, conditions)
    min_cuda: dict[str, str] = {}
    notes: dict[str, str] = {}
    switched = False
    for arch, conditions in found.items():
        other: list[str] = []
        for condition in conditions:
            cuda = _MIN_CUDA.search(condition)
            if cuda:
                min_cuda[arch] = max(min_cuda.get(arch, "0"), cuda.group(1), key=_numeric)
            switched = switched or bool(_ARCH_SWITCH.search(condition))
            rest = _MIN_CUDA.sub(" ", _ARCH_SWITCH.sub(" ", condition))
            rest = re.sub(r"^(el)?if\b|:$|\b(and|not|or)\b|\b(CUDA_HOME is None|CUDA_HOME)\b", " ", rest)
            if re.sub(r"\b(SKIP_CUDA_BUILD|IS_ROCM|is|None)\b|[()\s]", "", rest):
                other.append(condition.removesuffix(":").strip())  # kept verbatim
        note = arch + (f" only with CUDA >= {min_cuda[arch]}" if arch in min_cuda else "")
        notes[arch] = note + "".join(f" [{c}]" for c in other)
    archs = sorted(found, key=lambda a: int(re.sub(r"[a-z]+$", "", a[3:])))
    text = "; ".join(notes[a] for a in archs) if archs else "no -gencode flags"
    if switched:
        default = ";".join(default_archs) if default_archs else "unknown"
        text += f"; each only if listed in FLASH_ATTN_CUDA_ARCHS (default {default})"
    text += f" (setup.py at {tag})"
    return ArchFacts(archs, dict(sorted(min_cuda.items())), text)


# --------------------------------------------------------------------------------------------
# flash-attention tags


class TagSource(Protocol):
    def tags(self) -> list[str]: ...

    def read(self, tag: str, path: str) -> str | None: ...


class GitTags:
    """Tags and files of a git repository (bare or not), through the git command."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir

    def _git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", f"--git-dir={self.git_dir}", *args], capture_output=True, timeout=120, check=False
        )

    def tags(self) -> list[str]:
        done = self._git("tag", "--list")
        if done.returncode != 0:
            raise RuntimeError(f"git tag in {self.git_dir}: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode().split()

    def read(self, tag: str, path: str) -> str | None:
        done = self._git("show", f"refs/tags/{tag}:{path}")
        return done.stdout.decode("utf-8", errors="replace") if done.returncode == 0 else None

    def commit(self, tag: str) -> str | None:
        done = self._git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
        sha = done.stdout.decode().strip()
        return sha if done.returncode == 0 and sha else None


def git_dir_of(path: Path) -> Path:
    return path / ".git" if (path / ".git").is_dir() else path


def release_tags(tags: Iterable[str]) -> list[tuple[str, Version]]:
    """`v2.*` tags (not fa4-*) with the registry version each released, oldest first."""
    out = []
    for tag in tags:
        if not re.fullmatch(r"v2\.[0-9][0-9A-Za-z.+-]*", tag):
            continue
        try:
            out.append((tag, Version(tag[1:])))
        except InvalidVersion:
            continue
    return sorted(out, key=lambda item: item[1])


def collect_flash_attention(source: TagSource) -> tuple[dict[str, Any], list[str]]:
    """({version: facts}, problems) for every v2.* tag."""
    facts: dict[str, Any] = {}
    problems: list[str] = []
    for tag, version in release_tags(source.tags()):
        entry: dict[str, Any] = {"tag": tag, "workflow": PUBLISH_WORKFLOW}
        workflow = source.read(tag, PUBLISH_WORKFLOW)
        if workflow is None:
            entry["wheels"] = None
            entry["error"] = f"no {PUBLISH_WORKFLOW} at {tag}"
            problems.append(entry["error"])
        else:
            try:
                entry["job"], entry["os"], entry["wheels"] = wheels_from_workflow(workflow)
            except YamlSubsetError as error:
                entry["wheels"] = None
                entry["error"] = f"{PUBLISH_WORKFLOW} at {tag}: {error}"
                problems.append(entry["error"])
        setup_py = source.read(tag, "setup.py")
        if setup_py is None:
            entry["archs"], entry["arch_min_cuda"], entry["arch_notes"] = None, None, f"no setup.py at {tag}"
        else:
            arch = gencode_archs(setup_py, tag)
            entry["archs"], entry["arch_min_cuda"], entry["arch_notes"] = (
                arch.archs,
                arch.min_cuda,
                arch.notes,
            )
            if not arch.archs:
                problems.append(f"no -gencode flags in setup.py at {tag}")
        facts[str(version)] = entry
    return facts, problems


# --------------------------------------------------------------------------------------------
# triton: the CUDA toolchain (ptxas) each release bundles

TRITON_TOOLCHAIN_JSON = "cmake/nvidia-toolchain-version.json"
TRITON_TOOLCHAIN_TXT = "cmake/nvidia-toolchain-version.txt"
TRITON_SETUP_PY = ("python/setup.py", "setup.py")
TRITON_SOURCE = (
    "git tags v2.* and later of triton-lang/triton, per tag the first of: "
    f"{TRITON_TOOLCHAIN_JSON} (keys ptxas, ptxas-blackwell), {TRITON_TOOLCHAIN_TXT} (one version), "
    "the ptxas download in python/setup.py or setup.py (its version= or its cuda-nvcc-X.Y.Z URL)"
)
# The GPU architectures each CUDA release's ptxas added (only those after sm_87; every triton
# release bundles a ptxas from CUDA 12.0 or newer, which has all older ones). Checked against
# `ptxas --help` of nvidia-cuda-nvcc 11.7.99, 11.8.89, 12.6.85, 12.8.61, 12.8.93 and 12.9.86.
CUDA_ARCHS: dict[str, list[str]] = {
    "11.8": ["sm_89", "sm_90"],
    "12.8": ["sm_100", "sm_120"],
    "12.9": ["sm_103", "sm_121"],
}
CUDA_ARCHS_SOURCE = "https://docs.nvidia.com/cuda/archive/12.9.1/cuda-features-archive/index.html"
# triton >= 3.3 compiles sm_100 and above with ptxas-blackwell where the release bundles one
# (get_ptxas() in third_party/nvidia/backend/compiler.py: "ptxas-blackwell" if arch >= 100)
BLACKWELL_FIRST_SM = 100

_TOOL_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
_LITERAL_VERSION = re.compile(r"""\bversion\s*=\s*["']([0-9]+\.[0-9]+\.[0-9]+)["']""")
_NVCC_URL_VERSION = re.compile(r"cuda[-_]nvcc[-_]([0-9]+\.[0-9]+\.[0-9]+)[-_]")
_PTXAS_PATH = re.compile(r"""bin/ptxas["']""")


class CommitTagSource(TagSource, Protocol):
    def commit(self, tag: str) -> str | None: ...


@dataclass
class Toolchain:
    file: str | None
    ptxas: str | None
    ptxas_blackwell: str | None
    error: str | None = None


def toolchain_from_json(text: str) -> tuple[str | None, str | None]:
    """(ptxas, ptxas-blackwell) of cmake/nvidia-toolchain-version.json; ValueError if malformed."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    versions: list[str | None] = []
    for key in ("ptxas", "ptxas-blackwell"):
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and _TOOL_VERSION.fullmatch(value.strip())):
            raise ValueError(f"{key}: {value!r} is not a version")
        versions.append(value.strip() if isinstance(value, str) else None)
    if versions[0] is None:
        raise ValueError("no ptxas key")
    return versions[0], versions[1]


def _call_arguments(text: str, start: int) -> str:
    """The text from the `(` at start to its closing `)` (parentheses in quotes are skipped)."""
    depth = 0
    quote = ""
    for index in range(start, len(text)):
        char = text[index]
        if quote:
            if char == quote and text[index - 1] != "\\":
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return text[start : index + 1]
    return text[start:]


def _function_body(lines: list[str], start: int) -> str:
    body = [lines[start]]
    for line in lines[start + 1 :]:
        if line.strip() and not line.startswith((" ", "\t", "#")):
            break
        body.append(line)
    return "\n".join(body)


def ptxas_from_setup_py(text: str) -> str | None:
    """The ptxas version an older setup.py downloads, written as a literal.

    v2.0.0: `def download_and_copy_ptxas()` with the version only in its cuda-nvcc-X.Y.Z URL;
    v2.1.0: the same function with `version = "X.Y.Z"`; v2.2-v2.3: a `download_and_copy(...)` call
    with `src_path="bin/ptxas"` and `version="X.Y.Z"`. A version read from the cmake file (3.0 and
    later) is not a literal here and gives None.
    """
    lines = [strip_comment(line) for line in text.splitlines()]
    code = "\n".join(lines)
    blocks = [
        _function_body(lines, n) for n, line in enumerate(lines) if re.match(r"def \w*ptxas\w*\(", line)
    ]
    blocks += [_call_arguments(code, m.end() - 1) for m in re.finditer(r"\bdownload_and_copy\s*\(", code)]
    for block in blocks:
        if not _PTXAS_PATH.search(block):
            continue
        match = _LITERAL_VERSION.search(block) or _NVCC_URL_VERSION.search(block)
        if match:
            return match.group(1)
    return None


def triton_toolchain(source: TagSource, tag: str) -> Toolchain:
    """The ptxas version(s) the release at tag bundles, and the file that says so."""
    text = source.read(tag, TRITON_TOOLCHAIN_JSON)
    if text is not None:
        try:
            ptxas, blackwell = toolchain_from_json(text)
        except ValueError as error:
            return Toolchain(TRITON_TOOLCHAIN_JSON, None, None, f"{TRITON_TOOLCHAIN_JSON} at {tag}: {error}")
        return Toolchain(TRITON_TOOLCHAIN_JSON, ptxas, blackwell)
    text = source.read(tag, TRITON_TOOLCHAIN_TXT)
    if text is not None:
        if not _TOOL_VERSION.fullmatch(text.strip()):
            return Toolchain(
                TRITON_TOOLCHAIN_TXT, None, None, f"{TRITON_TOOLCHAIN_TXT} at {tag}: {text.strip()!r}"
            )
        return Toolchain(TRITON_TOOLCHAIN_TXT, text.strip(), None)
    for path in TRITON_SETUP_PY:
        text = source.read(tag, path)
        if text is not None:
            ptxas = ptxas_from_setup_py(text)
            if ptxas is not None:
                return Toolchain(path, ptxas, None)
    return Toolchain(
        None,
        None,
        None,
        f"no {TRITON_TOOLCHAIN_JSON}, no {TRITON_TOOLCHAIN_TXT}, no ptxas version in setup.py at {tag}",
    )


def _sm(arch: str) -> int:
    return int(re.sub(r"[a-z]+$", "", arch.removeprefix("sm_")))


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def ptxas_archs(ptxas: str | None, ptxas_blackwell: str | None) -> list[str] | None:
    """The archs of CUDA_ARCHS that the bundled ptxas (ptxas-blackwell for sm_100 and up, where
    there is one) can compile for; None when the ptxas version is unknown."""
    if ptxas is None:
        return None
    archs = []
    for cuda, added in CUDA_ARCHS.items():
        for arch in added:
            tool = ptxas_blackwell if ptxas_blackwell and _sm(arch) >= BLACKWELL_FIRST_SM else ptxas
            if _major_minor(tool) >= _major_minor(cuda):
                archs.append(arch)
    return sorted(archs, key=_sm)


def triton_release_tags(tags: Iterable[str]) -> list[tuple[str, Version]]:
    """`vX.Y.Z` tags from v2 on, final and post releases only, oldest first."""
    out = []
    for tag in tags:
        if not re.fullmatch(r"v[0-9]+\.[0-9][0-9A-Za-z.+-]*", tag):
            continue
        try:
            version = Version(tag[1:])
        except InvalidVersion:
            continue
        if version.major >= 2 and kept_version(version):
            out.append((tag, version))
    return sorted(out, key=lambda item: item[1])


def collect_triton(source: CommitTagSource) -> tuple[dict[str, Any], list[str]]:
    """({"source", "cuda_archs", "cuda_archs_source", "releases": {version: facts}}, problems)."""
    releases: dict[str, Any] = {}
    problems: list[str] = []
    for tag, version in triton_release_tags(source.tags()):
        found = triton_toolchain(source, tag)
        entry: dict[str, Any] = {
            "tag": tag,
            "commit": source.commit(tag),
            "file": found.file,
            "ptxas": found.ptxas,
            "ptxas_blackwell": found.ptxas_blackwell,
            "archs": ptxas_archs(found.ptxas, found.ptxas_blackwell),
        }
        if found.error is not None:
            entry["error"] = found.error
            problems.append(found.error)
        releases[str(version)] = entry
    document = {
        "source": TRITON_SOURCE,
        "cuda_archs": {cuda: list(archs) for cuda, archs in CUDA_ARCHS.items()},
        "cuda_archs_source": CUDA_ARCHS_SOURCE,
        "releases": releases,
    }
    return document, problems


def compare_triton(facts: Mapping[str, Any], on_index: Iterable[str]) -> list[str]:
    """Index releases from 2.0 on without a tag, and tags without an index release."""
    index = {v for v in on_index if Version(v).major >= 2}
    tagged = facts["releases"]
    problems = [f"triton {v} is on the index but has no tag here" for v in index - set(tagged)]
    problems += [
        f"tag {e['tag']} has no triton release on the index" for v, e in tagged.items() if v not in index
    ]
    return problems


# --------------------------------------------------------------------------------------------
# Writing


def dumps(value: Any, inline_from: int, depth: int = 0) -> str:
    """JSON with containers expanded down to depth inline_from and each deeper one on one line.

    Keys are sorted, except in an _Ordered mapping (the release maps, ordered by version). A
    container holding only scalars is always written on one line.
    """
    compact = isinstance(value, (dict, list)) and (
        depth >= inline_from or not any(isinstance(v, (dict, list)) for v in _children(value))
    )
    if not isinstance(value, (dict, list)) or compact or not value:
        return json.dumps(value, sort_keys=not isinstance(value, _Ordered), ensure_ascii=False)
    pad = " " * (depth + 1)
    if isinstance(value, list):
        body = ",\n".join(pad + dumps(item, inline_from, depth + 1) for item in value)
        return "[\n" + body + "\n" + " " * depth + "]"
    keys = list(value) if isinstance(value, _Ordered) else sorted(value)
    body = ",\n".join(f"{pad}{json.dumps(k)}: {dumps(value[k], inline_from, depth + 1)}" for k in keys)
    return "{\n" + body + "\n" + " " * depth + "}"


class _Ordered(dict[str, Any]):
    """A mapping written in its own order (versions), not sorted by key."""


def _children(value: dict[str, Any] | list[Any]) -> Iterator[Any]:
    return iter(value.values()) if isinstance(value, dict) else iter(value)


def registry_document(content: Mapping[str, Any]) -> str:
    document = dict(content)
    document["releases"] = _Ordered(content["releases"])
    return dumps(document, inline_from=2) + "\n"


def flash_attention_document(facts: Mapping[str, Any]) -> str:
    return dumps(_Ordered(facts), inline_from=3) + "\n"


def triton_document(facts: Mapping[str, Any]) -> str:
    document = dict(facts)
    document["releases"] = _Ordered(facts["releases"])
    return dumps(document, inline_from=2) + "\n"


def triton_ptxas_count(out: Path) -> int | None:
    """How many releases of triton-ptxas.json have a known ptxas; None without the file."""
    path = out / TRITON_PTXAS_FILE
    if not path.is_file():
        return None
    releases = json.loads(path.read_text())["releases"]
    return sum(1 for entry in releases.values() if entry.get("ptxas") is not None)


def newest(releases: Mapping[str, Any]) -> str | None:
    versions = [Version(v) for v, entry in releases.items() if not entry.get("yanked")]
    return str(max(versions)) if versions else None


def meta_document(out: Path, generated: str, flash_attention_tags: int) -> dict[str, Any]:
    packages: dict[str, Any] = {}
    for path in sorted((out / "registry").glob("*.json")):
        content = json.loads(path.read_text())
        releases = content["releases"]
        packages[content["name"]] = {
            "releases": len(releases),
            "newest": newest(releases),
            "without_requires_dist": sum(
                1
                for entry in releases.values()
                if "requires_dist" in entry and entry["requires_dist"] is None
            ),
        }
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "generated": generated,
        "generator": GENERATOR,
        "packages": packages,
        "flash_attention_tags": flash_attention_tags,
        "triton_ptxas_releases": triton_ptxas_count(out),
    }


def write_snapshot(
    out: Path,
    registry: Mapping[str, Mapping[str, Any]],
    flash_attention: Mapping[str, Any],
    generated: str,
    prune: bool,
    triton: Mapping[str, Any] | None = None,
) -> None:
    (out / "registry").mkdir(parents=True, exist_ok=True)
    names = {f"{name}.json" for name in registry}
    if prune:
        for stale in (out / "registry").glob("*.json"):
            if stale.name not in names:
                stale.unlink()
    for name, content in registry.items():
        (out / "registry" / f"{name}.json").write_text(registry_document(content), encoding="utf-8")
    (out / "flash-attn-wheels.json").write_text(flash_attention_document(flash_attention), encoding="utf-8")
    if triton is not None:
        (out / TRITON_PTXAS_FILE).write_text(triton_document(triton), encoding="utf-8")
    meta = meta_document(out, generated, len(flash_attention))
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def generate(
    out: Path,
    specs: Sequence[PackageSpec],
    fetch: Fetch,
    index_url: str,
    tags: TagSource,
    generated: str,
    workers: int = MAX_WORKERS,
    prune: bool = True,
    triton_tags: CommitTagSource | None = None,
) -> tuple[list[PackageReport], list[str]]:
    """Read everything first, then write: a failed index page leaves the snapshot untouched.

    Without triton_tags, triton-ptxas.json is left as it is (meta.json still counts it).
    """
    registry, reports = collect_registry(specs, fetch, index_url, workers)
    flash_attention, problems = collect_flash_attention(tags)
    triton: dict[str, Any] | None = None
    if triton_tags is not None:
        triton, triton_problems = collect_triton(triton_tags)
        if "triton" in registry:
            triton_problems += compare_triton(triton, registry["triton"]["releases"])
        elif (out / "registry" / "triton.json").is_file():
            shipped = json.loads((out / "registry" / "triton.json").read_text())
            triton_problems += compare_triton(triton, shipped["releases"])
        problems += [TRITON_PROBLEM + problem for problem in triton_problems]
    if "flash-attn" in registry:
        on_index = set(registry["flash-attn"]["releases"])
        problems += [
            f"flash-attn {v} is on the index but has no tag here" for v in on_index - set(flash_attention)
        ]
        problems += [
            f"tag {e['tag']} has no release on the index"
            for v, e in flash_attention.items()
            if v not in on_index
        ]
    write_snapshot(out, registry, flash_attention, generated, prune, triton)
    problems += write_ngc_images(out)
    return reports, sorted(problems, key=str)


NGC_SOURCE = Path(__file__).resolve().parent / "ngc_pytorch_images.json"


def write_ngc_images(out: Path, source: Path = NGC_SOURCE) -> list[str]:
    """snapshot/ngc-pytorch-images.json from the table of what each NGC PyTorch tag ships
    (tools/ngc_pytorch_images.json: per tag, per fact, its value, the page that states it, where
    those words were read when that is a copy, and the words). A fact without an https page is
    left out; a tag left without torch or CUDA is left out whole. Both are said."""
    data = json.loads(source.read_text(encoding="utf-8"))
    kept, problems = {}, []
    for tag, entry in data["images"].items():
        facts = {}
        for name, fact in entry.items():
            if name == "notes":
                continue
            cited = _https(fact.get("source")) and ("via" not in fact or _https(fact["via"]))
            if not (fact.get("value") and cited):
                problems.append(f"NGC image {tag}: {name} has no value or https source; left out")
                continue
            facts[name] = {key: fact[key] for key in ("value", "source", "via") if key in fact}
        if "torch" in facts and "cuda" in facts:
            kept[tag] = facts
        else:
            problems.append(f"NGC image {tag}: no torch or CUDA with its source; left out")
    document = {"source": data["source"], "images": dict(sorted(kept.items(), reverse=True))}
    (out / "ngc-pytorch-images.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return problems


def _https(url: object) -> bool:
    return isinstance(url, str) and url.startswith("https://")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flash-attention-git", type=Path, help="a clone of flash-attention")
    parser.add_argument("--triton-git", type=Path, help="a clone of triton with its tags")
    parser.add_argument(
        "--ngc-images",
        action="store_true",
        help=f"only rewrite ngc-pytorch-images.json from {NGC_SOURCE.relative_to(REPO)} (offline)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--index-url", help="default: pip's configured index")
    parser.add_argument("--packages", help="comma-separated subset of: " + ",".join(p.name for p in PACKAGES))
    parser.add_argument("--workers", type=int, default=MAX_WORKERS)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--retries", type=int, default=3)
    args = parser.parse_args(argv)
    if args.ngc_images:
        args.out.mkdir(parents=True, exist_ok=True)
        problems = write_ngc_images(args.out)
        for problem in problems:
            print(problem)
        print(f"wrote {args.out / 'ngc-pytorch-images.json'}")
        return 1 if problems else 0
    if args.flash_attention_git is None or (args.triton_git is None and not args.packages):
        parser.error(
            "--flash-attention-git and --triton-git are required (or --ngc-images alone; "
            "with --packages, --triton-git may be left out and triton-ptxas.json is kept)"
        )

    specs = list(PACKAGES)
    if args.packages:
        wanted = {canonicalize_name(n) for n in args.packages.split(",") if n.strip()}
        unknown = wanted - {p.name for p in PACKAGES}
        if unknown:
            parser.error(f"unknown package(s): {', '.join(sorted(unknown))}")
        specs = [p for p in PACKAGES if p.name in wanted]
    git_dir = git_dir_of(args.flash_attention_git)
    if not git_dir.exists():
        parser.error(f"{args.flash_attention_git} does not exist")
    triton_dir = None if args.triton_git is None else git_dir_of(args.triton_git)
    if triton_dir is not None and not triton_dir.exists():
        parser.error(f"{args.triton_git} does not exist")

    started = time.monotonic()
    fetcher = UrlFetcher(timeout=args.timeout, retries=args.retries)
    try:
        reports, problems = generate(
            args.out,
            specs,
            fetcher,
            args.index_url or pip_index_url(),
            GitTags(git_dir),
            datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
            workers=args.workers,
            prune=not args.packages,
            triton_tags=None if triton_dir is None else GitTags(triton_dir),
        )
    except FetchError as error:
        print(f"error: {error} (nothing written)", file=sys.stderr)
        return 1
    for report in reports:
        print(
            f"{report.name:24} {report.releases:4} releases"
            f" ({report.skipped_versions} pre/dev/local versions skipped,"
            f" {len(report.metadata_errors)} without metadata)"
        )
        for version, reason in report.metadata_errors.items():
            print(f"    {version}: {reason}")
        if report.unparsed_files:
            print(
                f"    {len(report.unparsed_files)} files neither wheel nor sdist: {report.unparsed_files[:5]}"
            )
    for problem in problems:
        print(problem if problem.startswith(TRITON_PROBLEM) else f"flash-attention: {problem}")
    size = sum(p.stat().st_size for p in args.out.rglob("*.json"))
    print(
        f"wrote {args.out} ({size / 1024:.0f} KiB) in {time.monotonic() - started:.1f} s,"
        f" {fetcher.requests} HTTP requests"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
