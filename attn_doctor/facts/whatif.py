"""What-if inputs: packages declared by pins or requirements files, and environments from files.

They build the same ``Package``/``Environment`` facts as probing, so matching and reporting
cannot tell the difference.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from attn_doctor.errors import InputError
from attn_doctor.facts.model import MAX_VERSION_CHARS, Environment, Package
from attn_doctor.facts.names import installed_name, rule_name
from attn_doctor.inputs import read_json, read_text

MAX_INCLUDE_DEPTH = 10
_INCLUDE = re.compile(r"^(?:-r|-c|--requirement|--constraint)(?:\s*=\s*|\s+|(?=[^-\s]))(?P<file>.+)$")
# pip options that say where or how to install, not what: nothing to read for the target
_INSTALL_OPTIONS = (
    "-i",
    "--index-url",
    "--extra-index-url",
    "--no-index",
    "-f",
    "--find-links",
    "--trusted-host",
    "--pre",
    "--prefer-binary",
    "--only-binary",
    "--no-binary",
    "--require-hashes",
    "--hash",
    "--use-feature",
    "--config-settings",
    "--global-option",
)
_OPTION = re.compile(r"\s--")
_PIN = re.compile(r"^[ \t]*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)[ \t]*===?[ \t]*(?P<version>[^\s;,]+)[ \t]*$")


def parse_pin(text: str) -> Package:
    """``--pin NAME==VERSION``."""
    match = _PIN.fullmatch(text)
    source = f"--pin {_shown(repr(text))}"
    if not match:
        raise InputError(source, "expected NAME==VERSION, e.g. transformers==4.44.0")
    _check_version(match["version"], source)
    return Package(
        name=installed_name(match["name"], match["version"]),
        version=match["version"],
        distribution=match["name"],
        origin="--pin",
    )


def parse_requirements(path: Path, option: str = "-r") -> tuple[dict[str, Package], list[str]]:
    """requirements.txt, ``pip freeze`` output or a constraints file, and one line per line it does
    not understand (an unknown option: reported, never dropped silently).

    A line that does not pin one exact version (``torch>=2.4``, a VCS URL) declares the package
    with an unknown version: the rules that need it become "unknown", never "not affected".
    """
    problems: list[str] = []
    packages = _parse_requirements(path, f"{option} {path}", 0, set(), problems)
    return packages, problems


def _parse_requirements(
    path: Path, source: str, depth: int, seen: set[Path], problems: list[str]
) -> dict[str, Package]:
    text = read_text(path, source)
    resolved = path.resolve()
    if resolved in seen:
        raise InputError(source, "requirements include themselves (-r/-c loop)")
    if depth > MAX_INCLUDE_DEPTH:
        raise InputError(source, f"requirements included more than {MAX_INCLUDE_DEPTH} files deep")
    seen = seen | {resolved}
    packages: dict[str, Package] = {}
    for number, line in _logical_lines(text):
        origin = f"{path}:{number}"
        if include := _INCLUDE.match(line):
            target = include["file"].strip().strip("'\"")
            if "://" in target:
                raise InputError(origin, f"{target}: URLs are not supported: download the file first")
            included = path.parent / target
            packages.update(_parse_requirements(included, f"{origin} ({target})", depth + 1, seen, problems))
            continue
        if line.startswith("-e") or line.startswith("--editable"):
            name = _egg_name(line)
            if name:
                packages[rule_name(name)] = Package(rule_name(name), None, name, origin)
            continue
        if line.startswith("-"):
            if line.split("=", 1)[0].split()[0] not in _INSTALL_OPTIONS:
                problems.append(f"{origin}: {_shown(line)}: not a line this reader understands (skipped)")
            continue
        package = _requirement_line(line, origin)
        if package is not None:
            packages[package.name] = package
    return packages


def _requirement_line(line: str, origin: str) -> Package | None:
    options = _OPTION.search(line)  # drop --hash=... options (a search linear in the line)
    requirement_text = line[: options.start()] if options else line
    try:
        requirement = Requirement(requirement_text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            return None
    except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as exc:
        raise InputError(origin, f"a marker that cannot be evaluated: {_shown(str(exc))}") from None
    except ValueError as exc:  # InvalidRequirement, or a number past the int-string limit
        raise InputError(origin, f"not a requirement: {_shown(str(exc).splitlines()[0])}") from None
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
    except ValueError:  # InvalidWheelFilename, InvalidVersion
        return None


def _shown(text: str) -> str:
    """A line of the user's, short enough for one error line."""
    return text if len(text) <= 120 else text[:117] + "..."


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


def load_environment_file(path: Path, option: str | None = None) -> Environment:
    """The JSON that ``attn-doctor probe --json`` wrote on another machine; ``option`` (``--env-file``)
    names where the user gave it, for errors about the file as a whole."""
    data = read_json(path, f"{option} {path}" if option else None)
    return Environment.from_json_dict(data, str(path))


def _check_version(version: str, source: str) -> None:
    try:
        if len(version) > MAX_VERSION_CHARS:
            raise ValueError(version)
        Version(version)
    except ValueError:  # InvalidVersion, or a number past the int-string limit
        raise InputError(source, f"{_shown(repr(version))} is not a valid PEP 440 version") from None
