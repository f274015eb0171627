"""What-if inputs: packages declared by pins or requirements files, and environments from files.

They build the same ``Package``/``Environment`` facts as probing, so matching and reporting
cannot tell the difference.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from attn_doctor.errors import InputError
from attn_doctor.facts.model import Environment, Package
from attn_doctor.facts.names import installed_name, rule_name

MAX_INPUT_BYTES = 16 * 1024 * 1024
MAX_INCLUDE_DEPTH = 10
_INCLUDE = re.compile(r"^(?:-r|-c|--requirement|--constraint)\s*=?\s*(?P<file>\S+)$")
_PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*(?P<version>[^\s;,]+)\s*$")


def parse_pin(text: str) -> Package:
    """``--pin NAME==VERSION``."""
    match = _PIN.match(text)
    source = f"--pin {text!r}"
    if not match:
        raise InputError(source, "expected NAME==VERSION, e.g. transformers==4.44.0")
    _check_version(match["version"], source)
    return Package(
        name=installed_name(match["name"], match["version"]),
        version=match["version"],
        distribution=match["name"],
        origin="--pin",
    )


def parse_requirements(path: Path) -> dict[str, Package]:
    """requirements.txt, ``pip freeze`` output or a constraints file.

    A line that does not pin one exact version (``torch>=2.4``, a VCS URL) declares the package
    with an unknown version: the rules that need it become "unknown", never "not affected".
    """
    return _parse_requirements(path, depth=0, seen=set())


def _parse_requirements(path: Path, depth: int, seen: set[Path]) -> dict[str, Package]:
    text = read_input(path)
    resolved = path.resolve()
    if resolved in seen or depth > MAX_INCLUDE_DEPTH:
        raise InputError(str(path), "requirements include themselves (-r/-c loop)")
    seen = seen | {resolved}
    packages: dict[str, Package] = {}
    for number, line in _logical_lines(text):
        origin = f"{path}:{number}"
        if include := _INCLUDE.match(line):
            packages.update(_parse_requirements(path.parent / include["file"], depth + 1, seen))
            continue
        if line.startswith("-e") or line.startswith("--editable"):
            name = _egg_name(line)
            if name:
                packages[rule_name(name)] = Package(rule_name(name), None, name, origin)
            continue
        if line.startswith("-"):  # --index-url, --hash on its own line, --extra-index-url, ...
            continue
        package = _requirement_line(line, origin)
        if package is not None:
            packages[package.name] = package
    return packages


def _requirement_line(line: str, origin: str) -> Package | None:
    requirement_text = re.split(r"\s+--", line, maxsplit=1)[0]  # drop --hash=... options
    try:
        requirement = Requirement(requirement_text)
    except InvalidRequirement as exc:
        raise InputError(origin, f"not a requirement: {str(exc).splitlines()[0]}") from None
    if requirement.marker is not None and not requirement.marker.evaluate():
        return None
    version: str | None = None
    if requirement.url:
        version = _version_from_url(requirement.url)
    else:
        specifiers = list(requirement.specifier)
        if (
            len(specifiers) == 1
            and specifiers[0].operator in ("==", "===")
            and "*" not in specifiers[0].version
        ):
            version = specifiers[0].version
            _check_version(version, origin)
    return Package(
        name=installed_name(requirement.name, version),
        version=version,
        distribution=requirement.name,
        origin=origin,
    )


def _version_from_url(url: str) -> str | None:
    """``pip freeze`` writes ``name @ file:///.../name-1.2-py3-none-any.whl``: the wheel names it."""
    filename = url.rsplit("/", 1)[-1].split("#", 1)[0]
    if not filename.endswith(".whl"):
        return None
    try:
        return str(parse_wheel_filename(filename)[1])
    except (InvalidWheelFilename, InvalidVersion):
        return None


def _egg_name(line: str) -> str | None:
    match = re.search(r"#egg=([A-Za-z0-9._-]+)", line)
    return match[1] if match else None


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with comments removed and backslash continuations joined, numbered from 1."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        joined = (pending + stripped).strip()
        pending = ""
        if joined:
            lines.append((start, joined))
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines


def load_environment_file(path: Path) -> Environment:
    """The JSON that ``attn-doctor probe --json`` wrote on another machine."""
    return Environment.from_json_dict(read_json(path), str(path))


def read_json(path: Path) -> Any:
    """A user's JSON input file; anything that is not JSON is an InputError naming the file."""
    try:
        return json.loads(read_input(path))
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"not JSON: {exc.msg} at line {exc.lineno}") from None


def read_input(path: Path) -> str:
    """A user's input file as text; too large or binary is an InputError naming the file."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise InputError(str(path), exc.strerror or "cannot read") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise InputError(str(path), f"larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    if b"\0" in raw:
        raise InputError(str(path), "binary file (contains NUL bytes)")
    return raw.decode("utf-8", errors="replace")


def _check_version(version: str, source: str) -> None:
    try:
        Version(version)
    except InvalidVersion:
        raise InputError(source, f"{version!r} is not a valid PEP 440 version") from None
