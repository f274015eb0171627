"""Feature evidence from the user's project: which attention paths its code and configs select.

Reads Python files, notebooks' code cells and the project's configs (facts/config_shape.py: a
JSON or YAML file with a known framework's keys, the pyproject) of the project (the enclosing git work
tree, or the current folder) and looks for the signals below: ``attn_implementation`` values as
transformers, TRL, axolotl and LLaMA-Factory spell them, imports and calls of flash_attn, FA3's
``flash_attn_interface``, flex_attention, SDPA, xformers and fla, torch.compile, packing,
generate and training, and the model families it runs (facts/model_families.py). Each hit is
evidence ``file:line``.

Bounded: version-control folders, virtual environments, site-packages, node_modules, build
outputs and bundled copies of other projects (third_party/, vendor/, git submodules) are skipped,
and so are files over MAX_FILE_BYTES; at most MAX_FILES files are read.
Each file is tested for a few literals (substring search) before any regex runs, and the per-file
results are cached by (size, mtime) so an unchanged project costs a walk and a stat per file.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from attn_doctor.facts.config_shape import CONFIG_KEYS, OWN_TABLES, readable_text
from attn_doctor.facts.model_families import MODEL_FAMILIES, family_signals

MAX_FILE_BYTES = 1024 * 1024
MAX_FILES = 20_000
EVIDENCE_PER_FEATURE = 3
SOURCE_TREE_DEPTH = 3  # a checkout at flash-attention/, third_party/flash-attention/, ... (not deeper)
SUFFIXES = (".py", ".ipynb", ".yaml", ".yml", ".json", ".toml")
SKIP_FOLDERS = {
    "node_modules",
    "__pycache__",
    "site-packages",
    "dist-packages",
    "build",
    "dist",
    "wandb",
    "mlruns",
}
# bundled copies of other projects: their code is not the project's code path (a flash-attention
# checkout among them still counts as a source build: ProjectScan.source_trees looks there)
VENDORED_FOLDERS = {"third_party", "third-party", "thirdparty", "3rdparty", "vendor", "vendored", "_vendor"}
# files that make their folder a flash-attention source tree (a source build of FA2 or FA3)
SOURCE_TREE_MARKERS = {
    ("hopper", "flash_fwd_kernel_sm90.h"): ("source_build", "flash_attention_3"),
    ("flash_attn", "flash_api.cpp"): ("source_build", "flash_attention_2"),
}
_TRUE = rb"""\\?["']?\s*[:=]\s*(?:True|true)\b"""
_VALUE = rb"""\\?["']?\s*[:=]\s*\\?["']?"""


@dataclass(frozen=True)
class Signal:
    features: tuple[str, ...]
    literal: bytes  # every match contains it: the cheap test before the regex
    pattern: bytes  # compiled on first use: an unchanged project (all cached) compiles none
    folded: bool = False  # the literal is lower-case, sought in the lower-cased text (a Hub name)

    def search(self, data: bytes) -> re.Match[bytes] | None:
        compiled = _COMPILED.get(self.pattern)
        if compiled is None:
            compiled = _COMPILED[self.pattern] = re.compile(self.pattern, re.M)
        return compiled.search(data)


_COMPILED: dict[bytes, re.Pattern[bytes]] = {}


def _signal(features: str, literal: str, pattern: bytes) -> Signal:
    return Signal(tuple(features.split()), literal.encode(), pattern)


_IMPORT_FLASH_ATTN = rb"^\s*(?:from\s+flash_attn(?:\.[\w.]+)?\s+import\b|import\s+flash_attn\b)"
_IMPORT_FA3 = rb"^\s*(?:from|import)\s+(?:hopper\.)?(?:flash_attn_interface|flash_attn_3)\b"
_FLEX = rb"\bflex_attention\s*\(|^\s*from\s+torch\.nn\.attention\.flex_attention\s+import\b"
_XFORMERS = rb"^\s*(?:from\s+xformers(?:\.\w+)*\s+import\b|import\s+xformers\b)|xformers_memory_efficient"
# an SDPA call given a mask (not None); its arguments may hold one level of parentheses
_SDPA_WITH_MASK = (
    rb"\bscaled_dot_product_attention\s*\((?:[^()]|\([^()]*\))*?\battn_mask\s*=\s*(?!None\b)[\w(]"
)
_FLA_ROTARY = rb"^\s*from\s+fla\.modules(?:\.rotary)?\s+import\b[^\n]*\bRotaryEmbedding\b"


def _attn_implementation(feature: str, value: bytes) -> Signal:
    """transformers / TRL / LLaMA-Factory: ``attn_implementation="..."`` (Python, YAML, JSON, CLI)."""
    return _signal(feature, "attn_implementation", rb"attn_implementation" + _VALUE + value + rb"\b")


def _yaml_switch(feature: str, key: str) -> Signal:
    """axolotl-style ``key: true`` lines."""
    return _signal(feature, key, rb"^\s*" + key.encode() + rb"\s*:\s*(?:true|True)\b")


SIGNALS: tuple[Signal, ...] = (
    # selecting FA2 in transformers fails without the flash_attn package: it is required
    _attn_implementation("flash_attention_2 flash_attn_required", rb"(?:paged\|)?flash_attention_2"),
    _attn_implementation("flash_attention_3", rb"(?:paged\|)?flash_attention_3"),
    _attn_implementation("flex_attention", rb"flex_attention"),
    _attn_implementation("sdpa", rb"(?:paged\|)?sdpa"),
    _signal(
        "flash_attention_2 flash_attn_required", "use_flash_attention_2", rb"use_flash_attention_2" + _TRUE
    ),
    _yaml_switch("flash_attention_2 flash_attn_required", "flash_attention"),
    _yaml_switch("sdpa", "sdp_attention"),
    _yaml_switch("xformers", "xformers_attention"),
    _yaml_switch("flex_attention", "flex_attention"),
    # LLaMA-Factory: flash_attn: fa2 | fa3 | sdpa
    _signal("flash_attention_2 flash_attn_required", "flash_attn", rb"^\s*flash_attn\s*:\s*[\"']?fa2\b"),
    _signal("flash_attention_3", "flash_attn", rb"^\s*flash_attn\s*:\s*[\"']?fa3\b"),
    _signal("sdpa", "flash_attn", rb"^\s*flash_attn\s*:\s*[\"']?sdpa\b"),
    # packing and padding-free training (TRL, axolotl, LLaMA-Factory, torchtune, transformers)
    _signal("packed_sequences", "packing", rb"\b(?:sample_packing|packing|neat_packing)" + _TRUE),
    _signal("packed_sequences", "padding_free", rb"\bpadding_free" + _TRUE),
    _yaml_switch("packed_sequences", "packed"),
    _signal("packed_sequences", "DataCollatorWithFlattening", rb"DataCollatorWithFlattening"),
    # torch.compile (code, TrainingArguments, torchtune)
    _signal("torch_compile", "compile", rb"\btorch\.compile\b|^\s*compile\s*:\s*(?:True|true)\b"),
    _signal("torch_compile", "torch_compile", rb"\btorch_compile" + _TRUE),
    # TrainingArguments / axolotl: setting a compile backend or mode turns torch_compile on
    _signal("torch_compile", "torch_compile_", rb"\btorch_compile_(?:backend|mode)" + _VALUE + rb"\w"),
    # library APIs
    _signal("flash_attention_2", "flash_attn", _IMPORT_FLASH_ATTN),
    # a module-level import (not indented: not under try, if or def) fails without the package
    _signal("flash_attn_required", "flash_attn", _IMPORT_FLASH_ATTN.replace(rb"^\s*", rb"^")),
    _signal("varlen", "flash_attn_varlen", rb"\bflash_attn_varlen_(?:qkvpacked_|kvpacked_)?func\b"),
    _signal("flash_attention_3", "flash_attn_", _IMPORT_FA3),
    _signal("flex_attention", "flex_attention", _FLEX),
    _signal("flex_attention", "create_block_mask", rb"\bcreate_block_mask\s*\("),
    _signal("sdpa", "scaled_dot_product_attention", rb"\bscaled_dot_product_attention\s*\("),
    _signal("sdpa", "sdp", rb"\bsdpa?_kernel\s*\("),
    _signal("xformers", "xformers", _XFORMERS),
    # fla's RotaryEmbedding only: flash-attn's flash_attn.layers.rotary is another kernel
    _signal("rotary_embedding", "RotaryEmbedding", _FLA_ROTARY),
    _signal(
        "fla_delta_rule",
        "elta",
        rb"\bchunk_delta_rule\b|\bDeltaNet(?:Config|Model|ForCausalLM)?\b|\bfla\.layers\.delta_net\b|[\"']delta_net[\"']",
    ),
    # what the attention is asked to do
    _signal("sliding_window", "window_size", rb"\bwindow_size\s*=\s*\(\s*[1-9]"),
    _signal("sliding_window", "sliding_window", rb"\bsliding_window" + _VALUE + rb"[1-9]"),
    _signal("softcap", "softcap", rb"\bsoftcap\s*=\s*[1-9]|attn_logit_softcapping" + _VALUE + rb"[1-9]"),
    _signal("softcap sliding_window", "emma", rb"[Gg]emma[-_]?2\b|Gemma2"),
    _signal("sliding_window", "emma", rb"[Gg]emma[-_]?3\b|Gemma3"),
    _signal("attention_mask", "attn_mask", _SDPA_WITH_MASK),
    _signal("attention_mask", "padding_side", rb"\bpadding_side" + _VALUE + rb"left\b"),
    _signal("alibi", "alibi_slopes", rb"\balibi_slopes\s*="),
    _signal("head_dim_256", "head_dim", rb"\bhead_dim" + _VALUE + rb"256\b"),
    _signal("dropout", "dropout", rb"\b(?:dropout_p|attention_dropout)" + _VALUE + rb"0*\.0*[1-9]"),
    _signal("fp8", "float8_e4m3", rb"\bfloat8_e4m3fn\b"),
    # inference and training
    _signal("generate", "generate", rb"\.generate\s*\(|[\"']text-generation[\"']"),
    _signal("backward", "backward", rb"\.backward\s*\("),
    _signal("backward", "Trainer", rb"\b\w*Trainer\s*\("),
    # the model families the code runs: a "feature" of the scan named after the family
    *(
        Signal((name,), literal.encode(), pattern, folded)
        for name in MODEL_FAMILIES
        for literal, pattern, folded in family_signals(name)
    ),
)
# cached hits hold for these signals read through this config test only
_SIGNED = repr(
    ([(s.features, s.pattern, s.folded) for s in SIGNALS], sorted(CONFIG_KEYS), OWN_TABLES.pattern)
)
_SIGNATURE = f"{zlib.crc32(_SIGNED.encode()):08x}"


@dataclass(frozen=True)
class Hit:
    feature: str
    where: str  # "src/train.py:12"


@dataclass
class ScanResult:
    root: Path
    hits: list[Hit] = field(default_factory=list)
    # every file with a hit and the names it shows: what one file shows together (FeatureSet.together)
    scopes: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    files_read: int = 0
    cached: int = 0
    truncated: bool = False  # MAX_FILES reached


def project_root(start: Path) -> Path:
    """The top of the git work tree holding ``start``, or ``start`` itself."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def scan_project(root: Path, exclude: tuple[str, ...] = (), cache_dir: Path | None = None) -> ScanResult:
    """Evidence per feature, at most EVIDENCE_PER_FEATURE each, in walk order."""
    return ProjectScan(root, exclude, cache_dir).result()


SOURCE_TREE_FEATURES = frozenset(feature for features in SOURCE_TREE_MARKERS.values() for feature in features)


class ProjectScan:
    """One walk of the project, shared: a flash-attention source tree is known from file names
    alone (``source_trees``); the other features need the files' contents (``result``)."""

    def __init__(self, root: Path, exclude: tuple[str, ...] = (), cache_dir: Path | None = None) -> None:
        self.root, self.exclude, self.cache_dir = root, exclude, cache_dir
        self._files: list[tuple[str, os.DirEntry[str]]] | None = None
        # what was found, kept: `merge` asks the one scan for every node's environment
        self._source_trees: list[Hit] | None = None
        self._contents: ScanResult | None = None

    def files(self) -> list[tuple[str, os.DirEntry[str]]]:
        if self._files is None:
            self._files = _files(self.root, self.exclude)
        return self._files

    def source_trees(self) -> list[Hit]:
        """The marker files of flash-attention checkouts up to SOURCE_TREE_DEPTH folders down:
        only folders are listed and no file is read, so asking costs a few stats per folder."""
        if self._source_trees is None:
            self._source_trees = self._find_source_trees()
        return self._source_trees

    def _find_source_trees(self) -> list[Hit]:
        found, level = [], [(str(self.root), "")]
        for _ in range(SOURCE_TREE_DEPTH + 1):
            deeper = []
            for folder, prefix in level:
                for (parent, name), features in SOURCE_TREE_MARKERS.items():
                    if os.path.isfile(os.path.join(folder, parent, name)):
                        found += [Hit(feature, f"{prefix}{parent}/{name}:1") for feature in features]
                deeper += _subfolders(folder, prefix, self.exclude)
            level = deeper[:MAX_FILES]
        return found

    def result(self) -> ScanResult:
        """Everything: the contents' evidence and the source trees."""
        contents = self.contents()
        return replace(contents, hits=[*self.source_trees(), *contents.hits])

    def contents(self) -> ScanResult:
        """The evidence in the files' contents (cached per file by size and mtime)."""
        if self._contents is None:
            self._contents = self._read_contents()
        return self._contents

    def _read_contents(self) -> ScanResult:
        result = ScanResult(root=self.root)
        cache = _Cache(self.cache_dir, self.root)
        found: dict[str, list[str]] = {}
        for relative, entry in self.files():
            if result.files_read >= MAX_FILES:
                result.truncated = True
                break
            result.files_read += 1
            hits = cache.get(relative, entry)
            if hits is None:
                hits = _scan_file(entry, relative)
                cache.put(relative, entry, hits)
            else:
                result.cached += 1
            if hits:
                result.scopes.append((relative, frozenset(feature for feature, _ in hits)))
            for feature, line in hits:
                found.setdefault(feature, [])
                if len(found[feature]) < EVIDENCE_PER_FEATURE:
                    found[feature].append(f"{relative}:{line}")
        cache.save()
        result.hits = [Hit(feature, where) for feature, places in found.items() for where in places]
        return result


def _files(root: Path, exclude: tuple[str, ...]) -> list[tuple[str, os.DirEntry[str]]]:
    """(path relative to root, entry) of the files worth reading, sorted within each folder."""
    out: list[tuple[str, os.DirEntry[str]]] = []
    stack = [(str(root), "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        names = {entry.name for entry in entries}
        if prefix and ("pyvenv.cfg" in names or "conda-meta" in names):
            continue  # a virtual environment or conda env inside the project
        if any(name.endswith(".dist-info") for name in names):
            continue  # installed packages (a site-packages, an unpacked wheel): not the project's code
        if prefix and ".git" in names:
            continue  # a git submodule: another project, bundled
        folder_name = os.path.basename(folder)
        subfolders = []
        for entry in entries:
            relative = prefix + entry.name
            if exclude and _excluded(relative, exclude):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if _worth_entering(entry.name) and entry.name.lower() not in VENDORED_FOLDERS:
                        subfolders.append((entry.path, relative + "/"))
                elif entry.is_file(follow_symlinks=False) and (
                    entry.name.endswith(SUFFIXES) or (folder_name, entry.name) in SOURCE_TREE_MARKERS
                ):
                    out.append((relative, entry))
            except OSError:
                continue
        stack.extend(reversed(subfolders))
    return out


def _subfolders(folder: str, prefix: str, exclude: tuple[str, ...]) -> list[tuple[str, str]]:
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return []
    names = {entry.name for entry in entries}
    if prefix and (
        "pyvenv.cfg" in names or "conda-meta" in names or any(n.endswith(".dist-info") for n in names)
    ):
        return []
    return [
        (entry.path, f"{prefix}{entry.name}/")
        for entry in entries
        if _worth_entering(entry.name)
        and not (exclude and _excluded(prefix + entry.name, exclude))
        and entry.is_dir(follow_symlinks=False)
    ]


def _worth_entering(name: str) -> bool:
    return not name.startswith(".") and name not in SKIP_FOLDERS and not name.endswith(".egg-info")


def _excluded(relative: str, exclude: tuple[str, ...]) -> bool:
    return any(relative == pattern.rstrip("/") or Path(relative).match(pattern) for pattern in exclude)


def _scan_file(entry: os.DirEntry[str], relative: str) -> list[tuple[str, int]]:
    if (Path(relative).parent.name, entry.name) in SOURCE_TREE_MARKERS:
        return []  # a marker's evidence is its name (ProjectScan.source_trees), not its text
    try:
        if entry.stat().st_size > MAX_FILE_BYTES:
            return []
        with open(entry.path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return []
    data = readable_text(entry.name, raw)  # code and configs; a saved report or dataset is not evidence
    if data is None:
        return []
    hits: list[tuple[str, int]] = []
    present: dict[tuple[bytes, bool], bool] = {}
    lowered: bytes | None = None
    for signal in SIGNALS:
        key = (signal.literal, signal.folded)
        if key not in present and signal.folded:
            lowered = data.lower() if lowered is None else lowered
            present[key] = signal.literal in lowered
        elif key not in present:
            present[key] = signal.literal in data
        if not present[key]:
            continue
        match = signal.search(data)
        if match is not None:
            line = data.count(b"\n", 0, match.start()) + 1
            hits.extend((feature, line) for feature in signal.features)
    return list(dict.fromkeys(hits))  # a family's class and checkpoint on one line: one hit


class _Cache:
    """Per-file hits by (size, mtime_ns), in one JSON file per project root; best effort."""

    def __init__(self, folder: Path | None, root: Path) -> None:
        key = f"{zlib.crc32(str(root.resolve()).encode()):08x}"
        self.path = None if folder is None else folder / f"{key}.json"
        self.entries: dict[str, list[object]] = {}
        self.dirty = False
        if self.path is not None:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                if data.get("signature") == _SIGNATURE and isinstance(data["files"], dict):
                    self.entries = data["files"]
            except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
                self.entries = {}
        self.seen: set[str] = set()

    def get(self, relative: str, entry: os.DirEntry[str]) -> list[tuple[str, int]] | None:
        self.seen.add(relative)
        known = self.entries.get(relative)
        if self.path is None or not isinstance(known, list) or len(known) != 3:
            return None
        try:
            stat = entry.stat()
        except OSError:
            return None
        if known[0] != stat.st_size or known[1] != stat.st_mtime_ns or not isinstance(known[2], list):
            return None
        try:
            return [(str(feature), int(line)) for feature, line in known[2]]
        except (TypeError, ValueError, OverflowError):  # a damaged entry ("x", Infinity): scan again
            return None

    def put(self, relative: str, entry: os.DirEntry[str], hits: list[tuple[str, int]]) -> None:
        if self.path is None:
            return
        try:
            stat = entry.stat()
        except OSError:
            return
        self.entries[relative] = [stat.st_size, stat.st_mtime_ns, [list(hit) for hit in hits]]
        self.dirty = True

    def save(self) -> None:
        if self.path is None:
            return
        stale = set(self.entries) - self.seen
        if not self.dirty and not stale:
            return
        files = {name: value for name, value in self.entries.items() if name in self.seen}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps({"signature": _SIGNATURE, "files": files}), encoding="utf-8")
            temporary.replace(self.path)
        except OSError:
            pass  # a read-only home or a full disk: the next run scans again
