"""Find and load rule files. One bad file never hides the others: problems are collected."""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_doctor.engine.schema import Rule, parse_rule
from attn_doctor.errors import InputError
from attn_doctor.facts.cache import cache_folder
from attn_doctor.inputs import parse_toml, read_bytes

MAX_RULE_BYTES = 256 * 1024
MAX_CACHED_DOCUMENTS = 1000
SHAPES = "symptom shapes"  # the cache's one entry that is not a document (engine/patterns.py)


@dataclass
class RuleSet:
    rules: list[Rule] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "path: field 'x': message"

    @property
    def stack_rules(self) -> list[Rule]:
        """The rules `check` matches: faults the stack's facts decide, and the user errors they show
        (code that needs a package the target lacks: a usage rule with ``absent``). Installation
        faults and other user errors are properties of one run, named by `explain` from its log."""
        return [
            rule
            for rule in self.rules
            if rule.kind == "bug" or (rule.kind == "usage" and rule.affects.absent)
        ]

    def extend(self, *others: RuleSet) -> None:
        """Add each of ``others`` in turn (all at once: the ids are indexed once per call)."""
        known = {rule.id: rule for rule in self.rules}
        for other in others:
            for rule in other.rules:
                if rule.id in known:
                    self.problems.append(
                        f"{rule.path}: field 'id': {rule.id!r} is already defined in {known[rule.id].path}"
                    )
                    continue
                known[rule.id] = rule
                self.rules.append(rule)
            self.problems.extend(other.problems)

    def get(self, rule_id: str) -> Rule | None:
        return next((rule for rule in self.rules if rule.id == rule_id), None)


def database_path() -> Path:
    """The rules shipped in the wheel, or the repository's ``rules/`` in a source checkout."""
    packaged = Path(__file__).resolve().parents[1] / "rules_db"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "rules"


def load_rules(paths: list[Path] | None = None, *, trust_database: bool = False) -> RuleSet:
    """Rules from the database, or from ``paths`` (files or folders of ``*.toml``).

    ``trust_database`` skips compiling the shipped database's symptom patterns (`check` does not
    use them); user rule files are always validated in full.
    """
    database = database_path()
    ruleset = RuleSet()
    documents = _ParsedCache()
    for path in paths if paths is not None else [database]:
        ruleset.extend(
            _load_path(path, documents, compile_symptoms=not (trust_database and path == database))
        )
    documents.save()
    return ruleset


def _load_path(path: Path, documents: _ParsedCache, compile_symptoms: bool) -> RuleSet:
    if path.is_dir():
        files = sorted(path.glob("*.toml"))
        if not files:
            return RuleSet(problems=[f"{path}: no *.toml rule files"])
        ruleset = RuleSet()
        ruleset.extend(*(_load_file(file, documents, compile_symptoms) for file in files))
        return ruleset
    if path.exists():
        return _load_file(path, documents, compile_symptoms)  # a FIFO or device: one problem line
    return RuleSet(problems=[f"{path}: no such rule file or folder"])


def _load_file(path: Path, documents: _ParsedCache, compile_symptoms: bool) -> RuleSet:
    """One file's rule, or its problems: whatever breaks in one file never stops the others."""
    if compile_symptoms:
        documents.read_shapes()
    try:
        raw = read_bytes(path, cap=MAX_RULE_BYTES)
        data = documents.get(path, raw)
        parsed = parse_rule(data, expected_id=path.stem, path=str(path), compile_symptoms=compile_symptoms)
    except InputError as exc:
        return RuleSet(problems=[str(exc)])
    except UnicodeDecodeError:
        return RuleSet(problems=[f"{path}: not UTF-8 text"])
    except (RecursionError, MemoryError, OverflowError, ValueError) as exc:  # hostile nesting, sizes
        return RuleSet(problems=[f"{path}: cannot be read as a rule: {type(exc).__name__}"])
    if isinstance(parsed, Rule):
        return RuleSet(rules=[parsed])
    return RuleSet(problems=[f"{path}: {line}" for line in parsed])


class _ParsedCache:
    """TOML documents already parsed, by path and content (tomllib is pure Python: reading the
    database is a tenth of `check`; JSON is parsed in C). Best effort, like every cache."""

    def __init__(self) -> None:
        folder = cache_folder()
        self.path = None if folder is None else folder / "rules.json"
        self.entries: dict[str, Any] = {}
        self.dirty = False
        if self.path is not None:
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                self.entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError, RecursionError):
                self.entries = {}
        self.shapes_read = False

    def read_shapes(self) -> None:
        """Hand the remembered symptom shapes to engine/patterns.py, once, where symptoms are
        compiled (``check`` trusts the database and never imports it)."""
        if not self.shapes_read:
            from attn_doctor.engine import patterns

            patterns.remember(self.entries.get(SHAPES))
            self.shapes_read = True

    def get(self, path: Path, raw: bytes) -> dict[str, Any]:
        key = f"{os.path.abspath(path)}:{zlib.crc32(raw):08x}:{len(raw)}"
        known = self.entries.get(key)
        if isinstance(known, dict):
            return dict(known)
        data: dict[str, Any] = parse_toml(raw.decode("utf-8"), str(path))
        try:
            json.dumps(data)  # a TOML date has no JSON form: such a file is parsed each time
        except (TypeError, ValueError):
            return data
        self.entries[key] = data
        self.dirty = True
        return data

    def save(self) -> None:
        if self.shapes_read:
            from attn_doctor.engine import patterns

            shapes = patterns.remembered()
            if shapes is not None:
                self.entries[SHAPES], self.dirty = shapes, True
        if self.path is None or not self.dirty:
            return
        if len(self.entries) > MAX_CACHED_DOCUMENTS:  # edited rules leave old keys behind
            self.entries = dict(list(self.entries.items())[-MAX_CACHED_DOCUMENTS // 2 :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(self.entries), encoding="utf-8")
            temporary.replace(self.path)
        except OSError:
            pass
