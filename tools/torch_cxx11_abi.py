"""Which C++ ABI each torch release's Linux wheel was built with, read from the wheel itself.

A C++ extension (flash-attn, xformers) must be compiled with the ``_GLIBCXX_USE_CXX11_ABI`` value
torch was built with, so the planner's rule (``attn_doctor.planner.target.cxx11_abi``) decides which
prebuilt wheel fits. Two members of the wheel say which, and both are read:

- ``torch/share/cmake/Torch/TorchConfig.cmake``: ``set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")``,
  the flag it hands to code built against torch (up to 2.7; from 2.8 no line sets it: the
  compiler's default, the C++11 ABI, is the only one torch supports);
- ``torch/lib/libc10.so``: the exported constructor ``c10::Error::Error(c10::SourceLocation,
  std::string)`` every ``TORCH_CHECK`` of an extension calls; its mangled name ends in ``Ss`` for the
  old ``std::string`` and in ``NSt7__cxx1112basic_string...`` for the C++11 one (the symbol an
  extension built with the other ABI reports as undefined).

A torch wheel is close to 1 GB: this reads only the zip's end record, its central directory and
those two members, through HTTP range requests, for the CPython 3.11 manylinux x86_64 wheel of each
release (the one pip installs there).

    python -m tools.torch_cxx11_abi --generated 2026-11-26   # writes the snapshot file below
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import struct
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

OUT = Path(__file__).resolve().parents[1] / "attn_doctor/releases/snapshot/torch-cxx11-abi.json"
INDEX_JSON = "https://pypi.org/pypi/torch/json"  # the project's JSON API: every release's files
FILES = "https://files.pythonhosted.org/packages"  # where PyPI serves a file, by its blake2b digest
MEMBER = "torch/share/cmake/Torch/TorchConfig.cmake"
LIBRARY = "torch/lib/libc10.so"
# every final release from the first with a CPython 3.11 wheel: 17 pre-C++11-ABI, the rest after 2.7
RELEASES = (
    "1.13.0", "1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.1", "2.1.2", "2.2.0", "2.2.1", "2.2.2",
    "2.3.0", "2.3.1", "2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0",
    "2.9.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0",
)  # fmt: skip
SOURCE = (
    "The CPython 3.11 manylinux x86_64 wheel of each torch release on PyPI (the one pip installs), read "
    "through HTTP range requests (tools/torch_cxx11_abi.py): the zip's central directory, then the "
    "TORCH_CXX_FLAGS line of torch/share/cmake/Torch/TorchConfig.cmake that sets "
    "-D_GLIBCXX_USE_CXX11_ABI (none from 2.8 on) and the exported symbol of c10::Error::Error("
    "c10::SourceLocation, std::string) in torch/lib/libc10.so, whose std::string is the old ABI's "
    "(Ss) or the C++11 ABI's (std::__cxx11::basic_string); where both say, they agree."
)

# (start, length) -> exactly those bytes of one file
ReadRange = Callable[[int, int], bytes]

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_EOCD_SIZE, _CENTRAL_SIZE, _LOCAL_SIZE = 22, 46, 30
_MAX_COMMENT = 0xFFFF
_FLAG = re.compile(r"TORCH_CXX_FLAGS\b.*-D_GLIBCXX_USE_CXX11_ABI=([01])\b")
# c10::Error::Error(c10::SourceLocation, std::string), the complete-object constructor
_ERROR = "_ZN3c105ErrorC1ENS_14SourceLocationE"
_STRINGS = {"Ss": False, "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE": True}
_SHT_DYNSYM = 11


class ZipError(ValueError):
    """The bytes read are not the zip (or member) they should be."""


@dataclass(frozen=True)
class Member:
    """One central-directory entry: where a member's bytes are and how to check them."""

    name: str
    method: int  # 0 stored, 8 deflated
    crc: int
    compressed_size: int
    size: int
    offset: int  # of its local header


@dataclass(frozen=True)
class Abi:
    """What a member's text says: the line (verbatim), its 1-based number and the ABI it sets."""

    line: str
    line_number: int
    cxx11: bool


@dataclass(frozen=True)
class Symbol:
    """The library's c10::Error constructor (verbatim) and the ABI its std::string is of."""

    name: str
    cxx11: bool


def http_range(url: str, timeout: float = 60.0, retries: int = 3) -> ReadRange:
    """A reader of ``url`` by HTTP Range; it refuses a server that ignores Range, so a wheel of a
    gigabyte is never read whole by mistake."""

    def read(start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        request = urllib.request.Request(url, headers={"Range": f"bytes={start}-{start + length - 1}"})
        for attempt in range(retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    if response.status != 206:
                        raise ZipError(f"{url}: answered {response.status} to a Range request")
                    data: bytes = response.read(length + 1)
                    if len(data) != length:
                        raise ZipError(f"{url}: {len(data)} bytes for a range of {length}")
                    return data
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                if attempt == retries or (isinstance(error, urllib.error.HTTPError) and error.code == 404):
                    raise
                time.sleep(2**attempt)
        raise AssertionError("unreachable")

    return read


def _zip64_end(read: ReadRange, tail: bytes, at: int) -> tuple[int, int, int]:
    """Entries, directory size and offset from the zip64 end record a large archive may need."""
    locator = tail[at - 20 : at]
    if len(locator) != 20 or not locator.startswith(_EOCD64_LOCATOR):
        raise ZipError("a zip64 archive without its end-record locator")
    (offset,) = struct.unpack_from("<Q", locator, 8)
    record = read(offset, 56)
    if not record.startswith(_EOCD64):
        raise ZipError("no zip64 end record where its locator points")
    entries, size, start = struct.unpack_from("<QQQ", record, 32)
    return int(entries), int(size), int(start)


def list_wheel(read: ReadRange, size: int) -> dict[str, Member]:
    """The members of a zip of ``size`` bytes, from its end record and central directory only."""
    tail_start = max(0, size - _EOCD_SIZE - _MAX_COMMENT)
    tail = read(tail_start, size - tail_start)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < _EOCD_SIZE:
        raise ZipError("no end-of-central-directory record")
    entries, directory_size, directory_start = struct.unpack_from("<HLL", tail, at + 10)
    if entries == 0xFFFF or 0xFFFFFFFF in (directory_size, directory_start):
        entries, directory_size, directory_start = _zip64_end(read, tail, at)
    directory = read(directory_start, directory_size)
    members: dict[str, Member] = {}
    pos = 0
    for _ in range(entries):
        if directory[pos : pos + 4] != _CENTRAL:
            raise ZipError(f"no central-directory entry at {directory_start + pos}")
        fields = struct.unpack_from("<6H3L5H2L", directory, pos + 4)
        method, crc, compressed, plain = fields[3], fields[6], fields[7], fields[8]
        name_length, extra_length, comment_length, offset = fields[9], fields[10], fields[11], fields[15]
        name = directory[pos + _CENTRAL_SIZE : pos + _CENTRAL_SIZE + name_length].decode("utf-8")
        extra = directory[
            pos + _CENTRAL_SIZE + name_length : pos + _CENTRAL_SIZE + name_length + extra_length
        ]
        plain, compressed, offset = _zip64_sizes(extra, plain, compressed, offset)
        members[name] = Member(name, method, crc, compressed, plain, offset)
        pos += _CENTRAL_SIZE + name_length + extra_length + comment_length
    return members


def _zip64_sizes(extra: bytes, plain: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """The 64-bit values a zip64 extra field holds for those saturated at 0xFFFFFFFF."""
    pos = 0
    while pos + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, pos)
        if kind == 0x0001:
            values = iter(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            plain = next(values) if plain == 0xFFFFFFFF else plain
            compressed = next(values) if compressed == 0xFFFFFFFF else compressed
            offset = next(values) if offset == 0xFFFFFFFF else offset
        pos += 4 + length
    return plain, compressed, offset


def read_member(read: ReadRange, member: Member) -> bytes:
    """One member's content, read by range from its local header; checked against its CRC-32."""
    header = read(member.offset, _LOCAL_SIZE)
    if not header.startswith(_LOCAL):
        raise ZipError(f"no local header for {member.name} at {member.offset}")
    name_length, extra_length = struct.unpack_from("<HH", header, 26)
    data = read(member.offset + _LOCAL_SIZE + name_length + extra_length, member.compressed_size)
    if member.method == 0:
        content = data
    elif member.method == 8:  # raw deflate: no zlib header (wbits -15)
        inflate = zlib.decompressobj(-15)
        content = inflate.decompress(data) + inflate.flush()
    else:
        raise ZipError(f"{member.name}: compression method {member.method} is not read here")
    if len(content) != member.size or zlib.crc32(content) != member.crc:
        raise ZipError(f"{member.name}: size or CRC-32 differs from the central directory")
    return content


def parse_abi(text: str) -> Abi | None:
    """The uncommented TORCH_CXX_FLAGS line that sets -D_GLIBCXX_USE_CXX11_ABI, and its value; None
    where no line sets it (torch 2.8 on)."""
    found = [
        Abi(line, number, match.group(1) == "1")
        for number, line in enumerate(text.splitlines(), start=1)
        if not line.lstrip().startswith("#") and (match := _FLAG.search(line))
    ]
    if len({abi.cxx11 for abi in found}) > 1:
        raise ValueError(f"{len(found)} TORCH_CXX_FLAGS lines set the ABI to both values")
    return found[0] if found else None


def dynamic_symbols(elf: bytes) -> list[str]:
    """The names a little-endian ELF64 library defines in its dynamic symbol table (what code
    linked against it can call); undefined imports are left out."""
    if elf[:6] != b"\x7fELF\x02\x01":
        raise ValueError("not a little-endian ELF64 file")
    (table,) = struct.unpack_from("<Q", elf, 0x28)
    entry_size, count = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<LLQQQQLLQQ", elf, table + i * entry_size) for i in range(count)]
    names = []
    for section in sections:
        if section[1] != _SHT_DYNSYM:
            continue
        strings = sections[section[6]][4]  # sh_link: the string table's sh_offset
        for at in range(section[4], section[4] + section[5], section[9] or 24):
            name, _, _, index = struct.unpack_from("<LBBH", elf, at)
            if index != 0:  # SHN_UNDEF: imported, not defined here
                names.append(elf[strings + name : elf.index(b"\0", strings + name)].decode("ascii"))
    return names


def symbol_abi(symbols: Iterable[str]) -> Symbol:
    """The ABI of the std::string that c10::Error's constructor takes: the one symbol an extension
    built with the other ABI cannot find."""
    found = [
        Symbol(name, _STRINGS[name[len(_ERROR) :]])
        for name in symbols
        if name.startswith(_ERROR) and name[len(_ERROR) :] in _STRINGS
    ]
    if len(found) != 1:
        raise ValueError(f"{len(found)} c10::Error(SourceLocation, std::string) constructors, not one")
    return found[0]


def release_wheels(files: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A release's non-yanked CPython 3.11 manylinux x86_64 wheels, the one pip installs first:
    the highest build tag (2.10.0 has ``torch-2.10.0-3-cp311-...`` beside the untagged one)."""
    kept = []
    for file in files:
        try:
            _, _, build, tags = parse_wheel_filename(str(file["filename"]))
        except InvalidWheelFilename:
            continue
        if not file.get("yanked") and any(
            t.interpreter == "cp311" and t.abi == "cp311" and t.platform.startswith("manylinux")
            and t.platform.endswith("_x86_64")
            for t in tags
        ):  # fmt: skip
            kept.append((build, file))
    return [
        file for _, file in sorted(kept, key=lambda pair: (pair[0], str(pair[1]["filename"])), reverse=True)
    ]


def public_url(file: Mapping[str, Any], index_url: str) -> str:
    """The file's address on PyPI's file host (from its blake2b digest); the index's own, resolved,
    where the index gives no digest."""
    digest = file.get("digests", {}).get("blake2b_256")
    if digest:
        return f"{FILES}/{digest[:2]}/{digest[2:4]}/{digest[4:]}/{file['filename']}"
    return urllib.parse.urljoin(index_url, str(file["url"]))


def read_wheel(file: Mapping[str, Any], index_url: str, reader: Callable[[str], ReadRange]) -> dict[str, Any]:
    """The record of one wheel: its name, where it is, the member read and what that says."""
    url = public_url(file, index_url)
    read = reader(urllib.parse.urljoin(index_url, str(file["url"])))  # the route the index names
    members = list_wheel(read, int(file["size"]))
    if MEMBER not in members or LIBRARY not in members:
        raise ZipError(f"{file['filename']} lacks {MEMBER} or {LIBRARY}")
    flag = parse_abi(read_member(read, members[MEMBER]).decode("utf-8"))
    symbol = symbol_abi(dynamic_symbols(read_member(read, members[LIBRARY])))
    if flag is not None and flag.cxx11 != symbol.cxx11:
        raise ValueError(f"{file['filename']}: {MEMBER} and {LIBRARY} name different ABIs")
    return {
        "abi": symbol.cxx11,
        "library": LIBRARY,
        "line": None if flag is None else flag.line,
        "line_number": None if flag is None else flag.line_number,
        "member": MEMBER,
        "sha256": file["digests"]["sha256"],
        "symbol": symbol.name,
        "url": url,
        "wheel": file["filename"],
    }


def collect(
    index: Mapping[str, Any], versions: Sequence[str], index_url: str, reader: Callable[[str], ReadRange]
) -> dict[str, dict[str, Any]]:
    """Each release's record: the wheel pip installs, with any other wheel of that release beside it."""
    releases: dict[str, dict[str, Any]] = {}
    for version in versions:
        wheels = release_wheels(index["releases"].get(version, []))
        if not wheels:
            raise SystemExit(f"torch {version}: no CPython 3.11 manylinux x86_64 wheel on the index")
        records = [read_wheel(wheel, index_url, reader) for wheel in wheels]
        releases[version] = {"version": version, **records[0]}
        if records[1:]:
            releases[version]["other_wheels"] = records[1:]
        flags = " | ".join(
            f"{r['wheel']}: {(r['line'] or 'no line').strip()}, {r['symbol']}" for r in records
        )
        print(f"{version}: cxx11_abi={records[0]['abi']}  ({flags})", file=sys.stderr)
    return releases


def snapshot(releases: Mapping[str, Any], generated: str) -> str:
    """The file's text: sorted keys, so the same wheels and date give the same bytes."""
    data = {"generated": generated, "releases": dict(releases), "source": SOURCE}
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--index-json", default=INDEX_JSON, help="the torch project's JSON API page")
    parser.add_argument("--releases", default=",".join(RELEASES), help="comma-separated torch versions")
    parser.add_argument(
        "--generated", default=datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    )
    args = parser.parse_args(argv)
    versions = sorted({v.strip() for v in args.releases.split(",") if v.strip()}, key=Version)
    with urllib.request.urlopen(args.index_json, timeout=120) as response:
        index = json.load(response)
    releases = collect(index, versions, args.index_json, http_range)
    args.out.write_text(snapshot(releases, args.generated), encoding="utf-8")
    print(f"wrote {args.out} ({len(releases)} releases)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
