"""What-if inputs: packages declared by pins, and environments probed on another machine.

They build the same ``Package``/``Environment`` facts as probing, so matching and reporting
cannot tell the difference.
"""

from __future__ import annotations

import re
from pathlib import Path

from attn_doctor.errors import InputError
from attn_doctor.facts.model import Environment, Package
from attn_doctor.facts.names import installed_name
from attn_doctor.facts.sources.common import check_version, shown
from attn_doctor.inputs import read_json

_PIN = re.compile(r"^[ \t]*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)[ \t]*===?[ \t]*(?P<version>[^\s;,]+)[ \t]*$")


def parse_pin(text: str) -> Package:
    """``--pin NAME==VERSION``."""
    match = _PIN.fullmatch(text)
    source = f"--pin {shown(repr(text))}"
    if not match:
        raise InputError(source, "expected NAME==VERSION, e.g. transformers==4.44.0")
    check_version(match["version"], source)
    return Package(
        name=installed_name(match["name"], match["version"]),
        version=match["version"],
        distribution=match["name"],
        origin="--pin",
    )


def load_environment_file(path: Path, option: str | None = None) -> Environment:
    """The JSON that ``attn-doctor probe --json`` wrote on another machine; ``option`` (``--env-file``)
    names where the user gave it, for errors about the file as a whole."""
    data = read_json(path, f"{option} {path}" if option else None)
    return Environment.from_json_dict(data, str(path))
