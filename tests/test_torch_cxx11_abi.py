"""The planner's C++ ABI rule (torch >= 2.7 uses the C++11 ABI) against what torch's own wheels say,
as tools/torch_cxx11_abi.py read them into snapshot/torch-cxx11-abi.json; and that reader's zip,
ELF and text parsing on archives built here (no network)."""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from attn_doctor.planner.target import cxx11_abi
from attn_doctor.releases.facts import SNAPSHOT, ReleaseFacts
from tools.torch_cxx11_abi import (
    LIBRARY,
    MEMBER,
    ZipError,
    dynamic_symbols,
    list_wheel,
    parse_abi,
    read_member,
    read_wheel,
    release_wheels,
    snapshot,
    symbol_abi,
)

FILE = SNAPSHOT / "torch-cxx11-abi.json"
DATA: dict[str, Any] = json.loads(FILE.read_text(encoding="utf-8"))
RELEASES: dict[str, dict[str, Any]] = DATA["releases"]
OLD = "_ZN3c105ErrorC1ENS_14SourceLocationESs"
NEW = "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"


def _wheels(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [entry, *entry.get("other_wheels", [])]


@pytest.mark.parametrize("version", sorted(RELEASES, key=Version))
def test_rule_agrees_with_the_wheel(version: str) -> None:
    for wheel in _wheels(RELEASES[version]):
        assert cxx11_abi(version) is wheel["abi"], (version, wheel["wheel"])


def test_the_wheels_read_span_the_change() -> None:
    before = [v for v in RELEASES if Version(v) < Version("2.7")]
    after = [v for v in RELEASES if Version(v) >= Version("2.7")]
    assert len(before) >= 4 and len(after) >= 4
    assert {"2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0"} <= set(RELEASES)


@pytest.mark.parametrize("version", sorted(RELEASES, key=Version))
def test_recorded_evidence_parses_to_the_recorded_abi(version: str) -> None:
    for wheel in _wheels(RELEASES[version]):
        assert symbol_abi(["_ZN3c105Error4whatEv", wheel["symbol"]]).cxx11 is wheel["abi"]
        if wheel["line"] is None:  # torch 2.8 on: TorchConfig.cmake no longer sets the flag
            assert Version(version) >= Version("2.8")
            continue
        found = parse_abi(wheel["line"])
        assert found is not None and found.cxx11 is wheel["abi"] and found.line == wheel["line"]


def test_parser_skips_comments_and_refuses_contradictions() -> None:
    old, new = (
        'set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")',
        'set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=1")',
    )
    text = f"# {new}\nif(LINUX)\n  {old}\n"
    found = parse_abi(text)
    assert found is not None and (found.line_number, found.cxx11) == (3, False)
    assert parse_abi("if(TORCH_CXX_FLAGS)\n  set_property(TARGET torch)\n") is None
    with pytest.raises(ValueError):
        parse_abi(f"{old}\n{new}")
    with pytest.raises(ValueError):
        symbol_abi([OLD, NEW])
    with pytest.raises(ValueError):
        symbol_abi(["_ZN3c105Error4whatEv"])


def test_snapshot_is_the_generators_bytes() -> None:
    assert snapshot(RELEASES, DATA["generated"]) == FILE.read_text(encoding="utf-8")


def test_release_facts_reads_the_snapshot(tmp_path: Path) -> None:
    facts = ReleaseFacts()
    assert (facts.torch_cxx11_abi("2.6.0"), facts.torch_cxx11_abi("2.7.0+cu126")) == (False, True)
    assert facts.torch_cxx11_abi("2.99.0") is None and facts.torch_cxx11_abi("not a version") is None
    assert ReleaseFacts(tmp_path).torch_cxx11_abi("2.7.0") is None  # an older snapshot without the file


def _elf(symbols: list[tuple[str, int]]) -> bytes:
    """A minimal little-endian ELF64 with a .dynsym (name, section index) and its .dynstr."""
    strings, entries = b"\0", [struct.pack("<LBBHQQ", 0, 0, 0, 0, 0, 0)]
    for name, index in symbols:
        entries.append(struct.pack("<LBBHQQ", len(strings), 0x12, 0, index, 0, 0))
        strings += name.encode() + b"\0"
    dynsym = b"".join(entries)
    table = 64 + len(dynsym) + len(strings)
    header = b"\x7fELF\x02\x01\x01".ljust(16, b"\0") + struct.pack(
        "<HHLQQQLHHHHHH", 3, 62, 1, 0, 0, table, 0, 64, 0, 0, 64, 3, 0
    )
    sections = [
        struct.pack("<LLQQQQLLQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack("<LLQQQQLLQQ", 0, 11, 0, 0, 64, len(dynsym), 2, 1, 8, 24),
        struct.pack("<LLQQQQLLQQ", 0, 3, 0, 0, 64 + len(dynsym), len(strings), 0, 0, 1, 0),
    ]
    return header + dynsym + strings + b"".join(sections)


def test_dynamic_symbols_keep_only_defined_names() -> None:
    elf = _elf([(NEW, 12), ("_ZNKSs4findEPKcmm", 0), ("_ZN3c105Error4whatEv", 12)])
    assert dynamic_symbols(elf) == [NEW, "_ZN3c105Error4whatEv"]
    assert symbol_abi(dynamic_symbols(elf)).name == NEW
    with pytest.raises(ValueError):
        dynamic_symbols(b"MZ" + elf[2:])


class Ranges:
    """A range reader over bytes in memory that counts what it was asked for."""

    def __init__(self, data: bytes) -> None:
        self.data, self.read = data, 0

    def __call__(self, start: int, length: int) -> bytes:
        assert start >= 0 and start + length <= len(self.data)
        self.read += length
        return self.data[start : start + length]


def _zip(members: dict[str, tuple[bytes, int]], comment: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, (content, method) in members.items():
            archive.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), content, compress_type=method)
        archive.comment = comment
    return buffer.getvalue()


def test_range_reads_stored_and_deflated_members() -> None:
    noise = random.Random(7).randbytes(300_000)  # incompressible, stored: the bulk never to be read
    text = b'if(LINUX)\n  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")\nendif()\n' * 50
    data = _zip(
        {
            "torch/lib/big.so": (noise, zipfile.ZIP_STORED),
            "stored.txt": (b"kept as is", zipfile.ZIP_STORED),
            MEMBER: (text, zipfile.ZIP_DEFLATED),
        },
        comment=b"a comment moves the end record",
    )
    read = Ranges(data)
    members = list_wheel(read, len(data))
    assert list(members) == ["torch/lib/big.so", "stored.txt", MEMBER]
    assert members[MEMBER].method == zipfile.ZIP_DEFLATED and members[MEMBER].compressed_size < len(text)
    assert read_member(read, members["stored.txt"]) == b"kept as is"
    assert read_member(read, members[MEMBER]) == text
    assert read.read < len(data) - len(noise) + 70_000  # the end record's window, not the stored bulk


def test_a_member_that_does_not_match_its_directory_entry_is_refused() -> None:
    data = bytearray(_zip({"a.txt": (b"abcdef", zipfile.ZIP_STORED)}))
    data[data.index(b"abcdef")] = ord("X")
    read = Ranges(bytes(data))
    with pytest.raises(ZipError):
        read_member(read, list_wheel(read, len(data))["a.txt"])
    with pytest.raises(ZipError):
        list_wheel(Ranges(b"not a zip at all"), 16)


def _file(name: str, **extra: Any) -> dict[str, Any]:
    digest = "ab" * 32
    return {
        "filename": name,
        "url": f"../../files/{name}",
        "digests": {"sha256": "0" * 64, "blake2b_256": digest},
        **extra,
    }


def test_release_wheels_pick_what_pip_installs_first() -> None:
    files = [
        _file("torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl"),
        _file("torch-2.10.0-3-cp311-cp311-manylinux_2_28_x86_64.whl"),
        _file("torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl"),
        _file("torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl"),
        _file("torch-2.10.0-1-cp311-cp311-manylinux_2_28_x86_64.whl", yanked=True),
        _file("torch-2.10.0.tar.gz"),
    ]
    assert [f["filename"] for f in release_wheels(files)] == [
        "torch-2.10.0-3-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    ]


def test_read_wheel_records_both_members() -> None:
    line = '  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")'
    cmake = f'# flags\nif(CMAKE_SYSTEM_NAME STREQUAL "Linux")\n{line}\nendif()\n'.encode()
    data = _zip({MEMBER: (cmake, zipfile.ZIP_DEFLATED), LIBRARY: (_elf([(OLD, 9)]), zipfile.ZIP_DEFLATED)})
    name = "torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl"
    asked: list[str] = []

    def reader(url: str) -> Callable[[int, int], bytes]:
        asked.append(url)
        return Ranges(data)

    record = read_wheel({**_file(name), "size": len(data)}, "https://index.invalid/pypi/torch/json", reader)
    assert asked == [f"https://index.invalid/files/{name}"]
    assert record["abi"] is False and record["symbol"] == OLD and record["line_number"] == 3
    assert record["line"] == line
    assert record["url"] == f"https://files.pythonhosted.org/packages/ab/ab/{'ab' * 30}/{name}"
    contradiction = _zip(
        {MEMBER: (cmake, zipfile.ZIP_STORED), LIBRARY: (_elf([(NEW, 9)]), zipfile.ZIP_STORED)}
    )
    with pytest.raises(ValueError):
        read_wheel(
            {**_file(name), "size": len(contradiction)},
            "https://index.invalid/",
            lambda _: Ranges(contradiction),
        )
