"""Read back what `attn-doctor repro --format json` saved, so a report can include an earlier run.

The file comes from the user (maybe edited, maybe from another version): every field is checked,
and anything wrong is one InputError naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attn_doctor.errors import InputError
from attn_doctor.inputs import read_json
from attn_doctor.report.repro_report import REPRO_SCHEMA_ID, REPRO_SCHEMA_VERSION
from attn_doctor.repro.runner import CaseResult, Status


def load_repro_results(path: Path) -> list[CaseResult]:
    data = read_json(path, f"--repro-json {path}")
    source = str(path)
    if not isinstance(data, dict) or data.get("schema") != REPRO_SCHEMA_ID:
        raise InputError(
            source,
            f'not attn-doctor repro results (no "schema": "{REPRO_SCHEMA_ID}"; see repro --format json)',
        )
    if data.get("schema_version") != REPRO_SCHEMA_VERSION:
        raise InputError(
            source,
            f"schema_version {data.get('schema_version')!r} is not supported "
            f"(this attn-doctor reads {REPRO_SCHEMA_VERSION})",
        )
    try:
        return [_case(item) for item in _typed(data, "results", list)]
    except (TypeError, ValueError) as exc:
        raise InputError(source, f"malformed repro results: {exc}") from None


def _case(item: Any) -> CaseResult:
    versions = _typed(item, "versions", dict)
    if not all(isinstance(value, str) for value in versions.values()):
        raise TypeError("'versions' must map names to version strings")
    return CaseResult(
        repro=_typed(item, "repro", str),
        case=_typed(item, "case", str),
        expect_bug=_typed(item, "expect_bug", (bool, type(None))),
        status=Status(_typed(item, "status", str)),
        detail=_typed(item, "detail", str),
        device=_typed(item, "device", str),
        versions=versions,
        command=_typed(item, "command", str),
        max_abs_error=_typed(item, "max_abs_error", (int, float, type(None))),
        max_rel_error=_typed(item, "max_rel_error", (int, float, type(None))),
        sanitizer=_typed(item, "sanitizer", (str, type(None))),
        # results saved before rerun commands carried the seed have none
        seed=_typed(item, "seed", (int, type(None))) if "seed" in item else None,
    )


def _typed(data: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    """``data[key]``, which must be of ``kind``."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object, got {type(data).__name__}")
    if key not in data:
        raise ValueError(f"missing field {key!r}")
    value = data[key]
    if not isinstance(value, kind):
        raise TypeError(f"{key!r} has the wrong type ({type(value).__name__})")
    return value
