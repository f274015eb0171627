"""Project configuration: ``[tool.attn-doctor]`` in pyproject.toml."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.errors import InputError
from attn_doctor.facts.features import check_feature_name, check_model_family
from attn_doctor.inputs import parse_toml, read_text

FAIL_ON_LEVELS = (*SEVERITIES, "never")
_KEYS = {"gpus", "driver", "nvcc", "fail-on", "features", "models", "ignore", "scan", "exclude"}


@dataclass
class Config:
    gpus: list[str] = field(default_factory=list)
    driver: str | None = None  # the target GPUs' NVIDIA driver, as --driver
    nvcc: str | None = None  # the target's CUDA toolkit ("none": it has none), as --nvcc
    fail_on: str | None = None
    features: list[str] | None = None
    models: list[str] | None = None  # the model families the code runs, as --model
    ignore: dict[str, str] = field(default_factory=dict)  # rule id -> reason
    scan: bool = True  # scan the project for the features it uses
    exclude: list[str] = field(default_factory=list)  # project paths or globs the scan skips
    path: Path | None = None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start``."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def project_config(config: Path | None, project: Path | None) -> Config:
    """``--config``, else the pyproject.toml nearest to ``--project`` (or the current folder)."""
    if config is not None:
        return load_config(config, "--config")
    return load_config(find_pyproject(project or Path.cwd()))


def load_config(path: Path | None, option: str | None = None) -> Config:
    """``option``: how the user named the file (``--config``), for errors about the file itself."""
    if path is None:
        return Config()
    source = f"{path} [tool.attn-doctor]"
    data = parse_toml(read_text(path, f"{option} {path}" if option else None), str(path))
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise InputError(f"{path} [tool]", "must be a table")
    section = tool.get("attn-doctor", {})
    if not isinstance(section, dict):
        raise InputError(source, "must be a table")
    unknown = sorted(set(section) - _KEYS)
    if unknown:
        raise InputError(source, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    config = Config(path=path)
    config.gpus = _strings(section.get("gpus", []), f"{source} gpus")
    for key in ("driver", "nvcc"):
        value = section.get(key)
        if value is not None and not isinstance(value, str):
            raise InputError(f"{source} {key}", 'must be a version string such as "570.86" or "12.8"')
        setattr(config, key, value)
    fail_on = section.get("fail-on")
    if fail_on is not None and fail_on not in FAIL_ON_LEVELS:
        raise InputError(f"{source} fail-on", f"must be one of {', '.join(FAIL_ON_LEVELS)}")
    config.fail_on = fail_on
    for key, check_name in (("features", check_feature_name), ("models", check_model_family)):
        if key in section:
            names = _strings(section[key], f"{source} {key}")
            for name in names:
                check_name(name, f"{source} {key}")
            setattr(config, key, names)
    scan = section.get("scan", True)
    if not isinstance(scan, bool):
        raise InputError(f"{source} scan", "must be true or false")
    config.scan = scan
    config.exclude = _strings(section.get("exclude", []), f"{source} exclude")
    ignore = section.get("ignore", {})
    if not isinstance(ignore, dict):
        raise InputError(f"{source} ignore", 'must be a table of RULE-ID = "reason"')
    for rule_id, reason in ignore.items():
        if not isinstance(reason, str) or not reason.strip():
            raise InputError(f"{source} ignore.{rule_id}", "needs a reason (a non-empty string)")
    config.ignore = dict(ignore)
    return config


def _strings(value: Any, source: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InputError(source, "must be a list of strings")
    return list(value)
