"""Build attn-doctor's API-change tables (attn_doctor/releases/snapshot/api-changes.json).

The tables say, per package, which public names of the modules that attention code imports or
monkeypatches were added, removed or renamed in which release, and which parameters of their
functions and methods were added, removed or became required. `attn-doctor explain` uses them to
name the release behind ``ImportError: cannot import name 'X' from 'M'``, ``AttributeError:
module 'M' has no attribute 'X'``, ``ModuleNotFoundError: No module named 'M'`` and
``TypeError: f() got an unexpected keyword argument 'k'`` / ``missing 1 required positional
argument``.

Everything is read from the *released code*, never by importing it: each release's Python files
are parsed with ``ast``.

What it reads
-------------
* Registry wheels (sdists where a release has no wheel) of transformers, triton, xformers,
  fla-core and flash-linear-attention. ``fetch`` downloads them with pip (``pip download
  --no-deps``; for binary packages the Linux x86_64 CPython 3.11 wheel), keeps only the ``.py``
  files of the top-level package (of transformers' model folders, only the tracked models'),
  and deletes the archive (triton wheels are 150-400 MB each):
  CACHE/<dist>/<version>/<package>/... . flash-linear-attention's ``fla`` tree of a release is
  the union of the flash-linear-attention and fla-core distributions of that version (the package
  was split in two at 0.3.2).
* Git tags of flash-attention (``vX.Y.Z``; its wheels are not on the registry, and its release
  tags are the versions) and, for xformers releases with no usable registry file (0.0.16: no
  CPython 3.11 wheel, and its sdist needs torch to build metadata), of xformers; ``fetch`` lists
  the registry's versions in CACHE/<dist>/versions.txt, and only those tags are read. A bare
  clone is enough: files are read with ``git show TAG:PATH``. Both mirrors: flash-attention
  (Dao-AILab/flash-attention), xformers (facebookresearch/xformers).

How to run (a maintainer step; ``fetch`` needs the network, ``build`` does not)
-------------------------------------------------------------------------------
    python tools/api_changes.py fetch --cache /tmp/api-trees    # ~7 GB downloaded, ~1 GB kept
    python tools/api_changes.py build --cache /tmp/api-trees \\
        --flash-attention-git PATH/flash-attention.git [--xformers-git PATH/xformers.git]

``build`` writes the JSON (``--out`` to write elsewhere) and prints counts per package. Review the
diff and commit it. ``fetch --packages transformers`` refreshes one package; already extracted
releases are skipped. Which releases are compared: every final (and post) release from
RELEASE_FLOOR on, so every boundary is exact to the release.

Output shape
------------
    {"generated": "YYYY-MM-DD", "source": "...", "packages": {DIST: {
        "releases_compared": ["4.30.0", ...],
        "modules":    {"xformers.components": {"removed": "0.0.34"}, ...},
        "names":      {"M.X": {"added": V, "removed": V, "renamed_to": "M2.Y", "history": [...]}},
        "parameters": {"M.f" or "M.Class.method": {"param": {"added": V, "removed": V,
                        "became_required": V, "became_optional": V, "became_keyword_only": V,
                        "became_positional": V, "history": [...]}}},
        "conditional": {"M.X": [[FIRST, LAST], ...]}}}}

* ``removed`` is the first compared release without the name (its module still present);
  ``added`` the first with it, only when that is not the first compared release the module is in
  (names added or removed together with their module are covered by the ``modules`` entry).
* ``conditional``: names bound only on some paths of the module (under an ``if`` whose other
  branch does not bind them, or in a ``try`` whose ``except`` neither binds them nor raises), with
  the runs of compared releases where that holds. Such a name is missing at run time when the
  condition fails (``_flash_supports_window_size`` in 4.43.0-4.52.4 exists only when flash-attn
  imports): explain must not blame the release for it.
* ``history`` lists every [event, version] in order, only when a name or parameter came and went
  more than once; ``added``/``removed`` are then the last such event.
* A name is a module-level binding: def, class, assignment, and import (re-exports count: a
  name a module imports can be imported from it), and a name a module-level ``__getattr__``
  answers (``if name == "X"``: deprecation shims keep the name importable). Left out: names bound
  only under ``if TYPE_CHECKING:`` (no binding at run time) and names imported from another
  project (``Optional``, ``torch``: no API of this one). ``from X import *`` is resolved inside
  the same tree.
* ``M.Class.member`` names are the methods, properties and class attributes of module-level
  classes, with those inherited from classes of the tracked modules (``AttributeError: 'DynamicCache'
  object has no attribute 'seen_tokens'``). A member is reported absent only when every base
  class was seen (a base from an untracked module of the project could still provide it).
* Parameters are tracked for module-level functions and for ``__init__``, ``forward`` and the
  public methods of module-level classes; a ``**kwargs`` parameter is tracked as ``**kwargs``
  (with it, an unknown keyword is no error). Parameters whose names start with ``_`` are left out.
* Private names (one leading underscore) are kept only when listed in PRIVATE_USED: names that
  real third-party code imports or patches (each checked against public code; see the list).
* ``renamed_to``: a removed name whose definition moved to another tracked module of the package
  in the same release (``M2.X``; of several, the shortest module path, e.g. the dispatching
  ``triton.language.extra.libdevice`` over ``...extra.cuda.libdevice``), a same-release added
  name of the same module that is clearly the same object renamed (close spelling, same kind,
  mostly the same parameters), or a rename in KNOWN_RENAMES (checked by hand).

Tests: tests/test_api_changes.py runs the extractor and the differ offline on small trees the
test writes itself, and checks the shipped JSON.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from attn_doctor.engine.matcher import is_version

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "attn_doctor" / "releases" / "snapshot" / "api-changes.json"

# --------------------------------------------------------------------------------------------
# What is tracked
# --------------------------------------------------------------------------------------------

_TF_MODELS = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "gemma",
    "gemma2",
    "phi3",
    "falcon",
)

# dist -> (top-level package, module patterns: dotted names, "*" one segment, "**" any)
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "transformers": (
        "transformers",
        (
            "transformers.modeling_flash_attention_utils",
            "transformers.utils",
            "transformers.utils.import_utils",
            "transformers.cache_utils",
            "transformers.modeling_utils",
            "transformers.pytorch_utils",
            "transformers.modeling_rope_utils",
            "transformers.integrations.sdpa_attention",
            "transformers.integrations.flash_attention",
            "transformers.integrations.flex_attention",
            "transformers.integrations.sdpa_paged",
            "transformers.integrations.flash_paged",
            "transformers.masking_utils",
            "transformers.modeling_attn_mask_utils",
        )
        + tuple(f"transformers.models.{m}.modeling_{m}" for m in _TF_MODELS),
    ),
    "flash-attn": (
        "flash_attn",
        (
            "flash_attn",
            "flash_attn.flash_attn_interface",
            "flash_attn.flash_attn_triton",
            "flash_attn.flash_attn_triton_og",
            "flash_attn.bert_padding",
            "flash_attn.layers.rotary",
            "flash_attn.modules.mha",
            "flash_attn.ops",
            "flash_attn.ops.**",
        ),
    ),
    "flash-linear-attention": (
        "fla",
        (
            "fla",
            "fla.ops",
            "fla.ops.*",
            "fla.ops.utils.*",
            "fla.layers",
            "fla.layers.*",
            "fla.modules",
            "fla.modules.*",
            "fla.utils",
        ),
    ),
    "triton": (
        "triton",
        (
            "triton",
            "triton.language",
            "triton.language.core",
            "triton.language.math",
            "triton.language.libdevice",
            "triton.language.extra",
            "triton.language.extra.cuda",
            "triton.language.extra.cuda.libdevice",
            "triton.language.extra.libdevice",
            "triton.compiler",
            "triton.compiler.compiler",
            "triton.runtime",
            "triton.runtime.jit",
            "triton.runtime.autotuner",
            "triton.runtime.driver",
            "triton.runtime.cache",
            "triton.backends",
            "triton.backends.compiler",
            "triton.testing",
            "triton.tools.tensor_descriptor",
        ),
    ),
    "xformers": (
        "xformers",
        (
            "xformers",
            "xformers.ops",
            "xformers.ops.fmha",
            "xformers.ops.fmha.*",
            "xformers.components",
            "xformers.components.attention",
            "xformers.components.attention.*",
            "xformers.components.attention.feature_maps",
            "xformers.factory",
            "xformers.triton",
        ),
    ),
}

# Releases compared: every final/post release from this one on.
RELEASE_FLOOR = {
    "transformers": "4.30.0",
    "flash-attn": "1.0.0",
    "flash-linear-attention": "0.1",
    "triton": "2.0.0",
    "xformers": "0.0.16",
}

# Registry distributions fetched per tracked dist (fla is split over two distributions).
REGISTRY_DISTS = {
    "transformers": ("transformers",),
    "triton": ("triton",),
    "xformers": ("xformers",),
    "flash-linear-attention": ("flash-linear-attention", "fla-core"),
}

# Private names that real third-party code imports or monkeypatches, so their removal breaks it.
# Each was found imported, patched or called from outside its package in public code (exact-string
# search of public repositories, e.g. `from transformers.modeling_flash_attention_utils import
# _flash_supports_window_size` in axolotl's ring-attention patch, `LlamaModel._update_causal_mask =`
# in several monkeypatches, `from flash_attn.flash_attn_interface import _flash_attn_varlen_forward`
# in ring-attention code). Names not checked that way are left out.
PRIVATE_USED: dict[str, frozenset[str]] = {
    "transformers": frozenset(
        {
            "_flash_supports_window_size",
            "_get_unpad_data",
            "_upad_input",
            "_flash_attention_forward",
            "_prepare_4d_causal_attention_mask",
            "_prepare_4d_causal_attention_mask_for_sdpa",
            "_prepare_4d_attention_mask_for_sdpa",
            "_prepare_4d_causal_attention_mask_with_cache_position",
            "_expand_mask",
            "_make_causal_mask",
            "_ignore_causal_mask_sdpa",
            "_update_causal_mask",
            "_prepare_from_posids",
            "_CONFIG_FOR_DOC",
            "_compute_default_rope_parameters",
            "_compute_llama3_parameters",
        }
    ),
    "flash-attn": frozenset(
        {
            "_flash_attn_forward",
            "_flash_attn_backward",
            "_flash_attn_varlen_forward",
            "_flash_attn_varlen_backward",
        }
    ),
    "flash-linear-attention": frozenset(),
    "triton": frozenset({"_experimental_descriptor_load", "_experimental_descriptor_store"}),
    "xformers": frozenset(),
}

# Renames and moves checked by hand (old full name -> new full name), for those the automatic
# rule (same name defined in another tracked module, or close spelling in the same module) misses.
_FA = "flash_attn.flash_attn_interface."
# The 2.0 renames (flash-attention's README lists them under "Upgrading from FlashAttention (1.x)").
KNOWN_RENAMES: dict[str, dict[str, str]] = {
    "flash-attn": {
        _FA + "flash_attn_unpadded_func": _FA + "flash_attn_varlen_func",
        _FA + "flash_attn_unpadded_qkvpacked_func": _FA + "flash_attn_varlen_qkvpacked_func",
        _FA + "flash_attn_unpadded_kvpacked_func": _FA + "flash_attn_varlen_kvpacked_func",
    },
}

# --------------------------------------------------------------------------------------------
# Trees: one release's files
# --------------------------------------------------------------------------------------------


class Tree:
    """A release's Python files: relpath ('pkg/sub/mod.py') -> text."""

    def paths(self) -> list[str]:
        raise NotImplementedError

    def read(self, path: str) -> str | None:
        raise NotImplementedError


class DictTree(Tree):
    def __init__(self, files: Mapping[str, str]):
        self._files = dict(files)

    def paths(self) -> list[str]:
        return sorted(self._files)

    def read(self, path: str) -> str | None:
        return self._files.get(path)


class DirTree(Tree):
    def __init__(self, root: Path):
        self.root = Path(root)

    def paths(self) -> list[str]:
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*.py"))

    def read(self, path: str) -> str | None:
        p = self.root / path
        try:
            return p.read_bytes().decode("utf-8", "replace")
        except OSError:
            return None


class ArchiveTree(Tree):
    """A wheel (zip) or sdist (tar.gz / zip); an sdist's leading 'name-version/' is dropped."""

    def __init__(self, archive: Path, package: str):
        self._files: dict[str, str] = {}
        for name, data in _archive_members(Path(archive)):
            rel = _package_relpath(name, package)
            if rel is not None:
                self._files[rel] = data.decode("utf-8", "replace")

    def paths(self) -> list[str]:
        return sorted(self._files)

    def read(self, path: str) -> str | None:
        return self._files.get(path)


class GitTree(Tree):
    def __init__(self, git_dir: Path, rev: str, package: str):
        self.git_dir, self.rev, self.package = str(git_dir), rev, package
        self._paths: list[str] | None = None

    def _git(self, *args: str) -> bytes:
        return subprocess.run(
            ["git", "--git-dir", self.git_dir, *args], check=True, capture_output=True
        ).stdout

    def paths(self) -> list[str]:
        if self._paths is None:
            out = self._git("ls-tree", "-r", "--name-only", self.rev, "--", self.package)
            self._paths = sorted(p for p in out.decode().splitlines() if p.endswith(".py"))
        return self._paths

    def read(self, path: str) -> str | None:
        try:
            return self._git("show", f"{self.rev}:{path}").decode("utf-8", "replace")
        except subprocess.CalledProcessError:
            return None


class UnionTree(Tree):
    def __init__(self, trees: Iterable[Tree]):
        self.trees = list(trees)

    def paths(self) -> list[str]:
        return sorted({p for t in self.trees for p in t.paths()})

    def read(self, path: str) -> str | None:
        for t in self.trees:
            text = t.read(path)
            if text is not None:
                return text
        return None


def _archive_members(archive: Path) -> Iterator[tuple[str, bytes]]:
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.filename.endswith(".py"):
                    yield info.filename, zf.read(info)
    else:
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                if m.isfile() and m.name.endswith(".py"):
                    f = tf.extractfile(m)
                    if f is not None:
                        yield m.name, f.read()


def _package_relpath(name: str, package: str) -> str | None:
    parts = name.split("/")
    if parts and parts[0] == package:
        return name
    if len(parts) > 1 and parts[1] == package:  # sdist: name-version/pkg/...
        return "/".join(parts[1:])
    return None


def module_paths(tree: Tree, package: str) -> dict[str, str]:
    """Dotted module name -> relpath, for the files of `package` in the tree."""
    out: dict[str, str] = {}
    for p in tree.paths():
        if not p.endswith(".py") or not (p == f"{package}.py" or p.startswith(package + "/")):
            continue
        parts = p[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(not x.isidentifier() for x in parts):
            continue
        out[".".join(parts)] = p
    return out


def _pattern_re(pattern: str) -> re.Pattern[str]:
    """'*' is one dotted segment, '**' one or more."""
    out = []
    for seg in pattern.split("."):
        out.append(".+" if seg == "**" else "[^.]+" if seg == "*" else re.escape(seg))
    return re.compile(r"\.".join(out) + r"\Z")


def select_modules(modules: Iterable[str], patterns: Iterable[str]) -> list[str]:
    pats = [_pattern_re(p) for p in patterns]
    return sorted(m for m in modules if any(p.match(m) for p in pats))


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

# A parameter: (name, kind, required); kind in pos (positional-only), pk (positional or
# keyword), var (*args), kw (keyword-only), varkw (**kwargs).
Param = tuple[str, str, bool]


@dataclass
class ModuleAPI:
    names: set[str] = field(default_factory=set)  # every module-level binding
    defined: set[str] = field(default_factory=set)  # bound by def/class (not by import)
    kinds: dict[str, str] = field(default_factory=dict)  # name -> def | class | other
    foreign: set[str] = field(default_factory=set)  # bound by importing another project's name
    # bound only on some paths: under an `if` without a binding in its other branch, or in a
    # `try` whose `except` neither binds it nor raises (e.g. only when flash-attn imports)
    conditional: set[str] = field(default_factory=set)
    star_imports: list[str] = field(default_factory=list)  # absolute module names
    signatures: dict[str, tuple[Param, ...]] = field(default_factory=dict)  # qualname -> params
    # class -> (base names as written, e.g. 'Cache' or 'nn.Module'; own members: methods,
    # properties and class-level assignments)
    classes: dict[str, tuple[tuple[str, ...], frozenset[str]]] = field(default_factory=dict)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return False


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    if target:
        return f"{base}.{target}" if base else target
    return base


def signature_of(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> tuple[Param, ...]:
    a = fn.args
    params: list[Param] = []
    positional = [(p, "pos") for p in a.posonlyargs] + [(p, "pk") for p in a.args]
    n_default = len(a.defaults)
    first_default = len(positional) - n_default
    for i, (p, kind) in enumerate(positional):
        params.append((p.arg, kind, i < first_default))
    if a.vararg is not None:
        params.append(("*" + a.vararg.arg, "var", False))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        params.append((p.arg, "kw", d is None))
    if a.kwarg is not None:
        params.append(("**" + a.kwarg.arg, "varkw", False))
    if method and params and params[0][1] in ("pos", "pk") and not _is_staticmethod(fn):
        params = params[1:]  # self / cls
    return tuple(p for p in params if not p[0].lstrip("*").startswith("_") or p[0].startswith("**"))


def _decorator_names(fn: ast.AST) -> set[str]:
    out = set()
    for d in getattr(fn, "decorator_list", []):
        node = d.func if isinstance(d, ast.Call) else d
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def _is_staticmethod(fn: ast.AST) -> bool:
    return "staticmethod" in _decorator_names(fn)


def _tracked_method(name: str) -> bool:
    """__init__, forward, __call__ and every non-dunder method (private ones are filtered later
    by PRIVATE_USED)."""
    return name in ("__init__", "forward", "__call__") or not name.startswith("__")


def extract_module(source: str, module: str, is_package: bool = False) -> ModuleAPI:
    """Module-level bindings and signatures of one module's source (parsed, never imported)."""
    api = ModuleAPI()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return api

    own = module.split(".")[0]
    frames: list[set[str]] = []  # names bound in each enclosing if/try block
    depth = [0]  # how many conditional blocks enclose the statement
    always: set[str] = set()  # names bound on every path

    def bind(name: str, kind: str, defined: bool, origin: str | None = None) -> None:
        for frame in frames:
            frame.add(name)
        if depth[0] == 0:
            always.add(name)
        api.names.add(name)
        api.kinds[name] = kind
        if defined:
            api.defined.add(name)
        else:
            api.defined.discard(name)
        # an import from outside the project (typing, torch, einops, ...) is no API of it; the
        # project's own modules and its extensions (flash_attn_2_cuda, triton._C) are
        if origin is not None and not origin.split(".")[0].startswith(own):
            api.foreign.add(name)
        else:
            api.foreign.discard(name)

    def block(body: list[ast.stmt], conditional: bool = True) -> set[str]:
        frames.append(set())
        depth[0] += conditional
        try:
            walk(body)
        finally:
            depth[0] -= conditional
            got = frames.pop()
        return got

    def settle(names: set[str]) -> None:
        """`names` were bound on every path through a construct."""
        if depth[0] == 0:
            always.update(names)

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bind(node.name, "def", True)
                api.signatures[node.name] = signature_of(node, method=False)
                if node.name == "__getattr__":  # PEP 562: names served lazily (deprecation shims)
                    for lazy in _getattr_names(node):
                        if lazy not in api.names:
                            bind(lazy, "other", True)
            elif isinstance(node, ast.ClassDef):
                bind(node.name, "class", True)
                members = set()
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        members.add(item.name)
                    elif isinstance(item, ast.Assign):
                        for t in item.targets:
                            members.update(_target_names(t))
                    elif isinstance(item, ast.AnnAssign):
                        members.update(_target_names(item.target))
                bases = tuple(ast.unparse(b.value if isinstance(b, ast.Subscript) else b) for b in node.bases)
                api.classes[node.name] = (bases, frozenset(members))
                for k in list(api.signatures):
                    if k.startswith(node.name + "."):
                        del api.signatures[k]
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        decos = _decorator_names(item)
                        if "property" in decos or "setter" in decos or "getter" in decos:
                            continue
                        if _tracked_method(item.name):
                            api.signatures[f"{node.name}.{item.name}"] = signature_of(
                                item, method="staticmethod" not in decos
                            )
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    for n in _target_names(t):
                        bind(n, "other", True)
                        api.signatures.pop(n, None)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                if isinstance(node, ast.AnnAssign) and node.value is None:
                    continue
                for n in _target_names(node.target):
                    bind(n, "other", True)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    bind(alias.asname or alias.name.split(".")[0], "other", False, alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    src = _resolve_relative(module, is_package, node.level, node.module)
                else:
                    src = node.module or ""
                for alias in node.names:
                    if alias.name == "*":
                        api.star_imports.append(src)
                    else:
                        bind(alias.asname or alias.name, "other", False, src)
            elif isinstance(node, ast.Delete):
                for t in node.targets:
                    for n in _target_names(t):
                        api.names.discard(n)
                        api.defined.discard(n)
            elif isinstance(node, ast.If):
                if _is_type_checking(node.test):
                    walk(node.orelse)
                else:
                    settle(block(node.body) & block(node.orelse))
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":  # try / try-except*
                on_success = block(getattr(node, "body")) | block(getattr(node, "orelse"))  # noqa: B009
                for h in getattr(node, "handlers"):  # noqa: B009
                    got = block(h.body)
                    if not (h.body and isinstance(h.body[-1], ast.Raise)):
                        on_success &= got
                settle(on_success)
                walk(getattr(node, "finalbody"))  # noqa: B009
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                walk(node.body)

    walk(tree.body)
    api.conditional = api.names - always
    return api


def _getattr_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names a module-level ``__getattr__(name)`` answers: string constants its argument is compared
    with (``name == "X"``, ``name in ("X", "Y")``)."""
    args = fn.args.posonlyargs + fn.args.args
    if not args:
        return set()
    param = args[0].arg
    out: set[str] = set()
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name)):
            continue
        if node.left.id != param:
            continue
        for op, comp in zip(node.ops, node.comparators):
            if isinstance(op, ast.Eq) and isinstance(comp, ast.Constant):
                values: list[ast.expr] = [comp]
            elif isinstance(op, ast.In) and isinstance(comp, (ast.Tuple, ast.List, ast.Set)):
                values = list(comp.elts)
            else:
                continue
            out.update(
                v.value
                for v in values
                if isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.isidentifier()
            )
    return out


def _literal_all(source: str) -> list[str] | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                return list(value)
    return None


def extract_tree(tree: Tree, package: str, patterns: Iterable[str]) -> dict[str, ModuleAPI]:
    """ModuleAPI of every tracked module of one release, star imports resolved in the tree."""
    paths = module_paths(tree, package)
    cache: dict[str, ModuleAPI] = {}
    texts: dict[str, str] = {}

    def api_of(mod: str, stack: tuple[str, ...] = ()) -> ModuleAPI | None:
        if mod in cache:
            return cache[mod]
        rel = paths.get(mod)
        if rel is None:
            return None
        text = texts.get(mod)
        if text is None:
            text = tree.read(rel) or ""
            texts[mod] = text
        api = extract_module(text, mod, is_package=rel.endswith("__init__.py"))
        for src in api.star_imports:
            if src in stack or src == mod:
                continue
            sub = api_of(src, stack + (mod,))
            if sub is None:
                continue
            exported = _literal_all(texts.get(src, "")) or [n for n in sub.names if not n.startswith("_")]
            for n in exported:
                if n in sub.names or n in exported:
                    api.names.add(n)
                    api.kinds.setdefault(n, sub.kinds.get(n, "other"))
        cache[mod] = api
        return api

    out = {}
    for mod in select_modules(paths, patterns):
        api = api_of(mod)
        if api is not None:
            out[mod] = api
    return out


# --------------------------------------------------------------------------------------------
# Diff
# --------------------------------------------------------------------------------------------


def _events(states: Sequence[str | None], versions: list[str]) -> list[list[str]]:
    """Events from presence states per release: 'P' present, 'A' absent (container present),
    None (container missing: no event, the container's own entry covers it)."""
    events: list[list[str]] = []
    prev: str | None = None
    for v, s in zip(versions, states):
        if s is None:
            continue
        if prev == "A" and s == "P":
            events.append(["added", v])
        elif prev == "P" and s == "A":
            events.append(["removed", v])
        prev = s
    return events


def _ranges(flags: list[bool], versions: list[str]) -> list[list[str]]:
    """[[first, last], ...] runs of compared releases where the flag holds."""
    out: list[list[str]] = []
    for i, flag in enumerate(flags):
        if not flag:
            continue
        if i > 0 and flags[i - 1]:
            out[-1][1] = versions[i]
        else:
            out.append([versions[i], versions[i]])
    return out


def _entry(events: list[list[str]]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    for kind, v in events:
        entry[kind] = v
    if len(events) > 1:
        entry["history"] = events
    return entry


def _keep_name(name: str, private_ok: frozenset[str]) -> bool:
    if name.startswith("__") and name.endswith("__"):
        return False
    if name.startswith("_"):
        return name in private_ok
    return True


def _keep_qualname(qual: str, private_ok: frozenset[str]) -> bool:
    parts = qual.split(".")
    if not _keep_name(parts[0], private_ok):
        return False
    if len(parts) > 1:
        meth = parts[-1]
        return meth in ("__init__", "forward", "__call__") or _keep_name(meth, private_ok)
    return True


def diff_releases(
    releases: list[tuple[str, dict[str, ModuleAPI]]],
    private_ok: frozenset[str] = frozenset(),
    known_renames: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The package's table from the ModuleAPIs of its releases, oldest first."""
    versions = [v for v, _ in releases]
    all_modules = sorted({m for _, mods in releases for m in mods})
    modules_out: dict[str, dict[str, Any]] = {}
    names_out: dict[str, dict[str, Any]] = {}
    params_out: dict[str, dict[str, Any]] = {}
    conditional_out: dict[str, list[list[str]]] = {}
    added_at: dict[tuple[str, str], list[str]] = {}  # (module, version) -> names added there

    for mod in all_modules:
        mstates = ["P" if mod in mods else "A" for _, mods in releases]
        ev = _events(mstates, versions)
        if ev:
            modules_out[mod] = _entry(ev)
        all_names = sorted({n for _, mods in releases if mod in mods for n in mods[mod].names})
        for name in all_names:
            states = [
                None if mod not in mods else ("P" if name in mods[mod].names else "A") for _, mods in releases
            ]
            ev = _events(states, versions)
            for kind, v in ev:
                if kind == "added":
                    added_at.setdefault((mod, v), []).append(name)
            foreign = all(
                name in mods[mod].foreign for _, mods in releases if mod in mods and name in mods[mod].names
            )
            if foreign or not _keep_name(name, private_ok):
                continue
            if ev:
                names_out[f"{mod}.{name}"] = _entry(ev)
            cond = [mod in mods and name in mods[mod].conditional for _, mods in releases]
            if any(cond):
                conditional_out[f"{mod}.{name}"] = _ranges(cond, versions)
        all_classes = sorted({c for _, mods in releases if mod in mods for c in mods[mod].classes})
        for cls in all_classes:
            if not _keep_name(cls, private_ok):
                continue
            resolved = [
                class_members(mods, mod, cls) if mod in mods and cls in mods[mod].classes else None
                for _, mods in releases
            ]
            everything = sorted({m for r in resolved if r for m in r[0]})
            for member in everything:
                if not _keep_name(member, private_ok):
                    continue
                states = []
                for r in resolved:
                    if r is None:
                        states.append(None)
                    elif member in r[0]:
                        states.append("P")
                    else:  # absent: only a fact when every base was seen
                        states.append("A" if r[1] else None)
                ev = _events(states, versions)
                if ev:
                    names_out[f"{mod}.{cls}.{member}"] = _entry(ev)
        all_funcs = sorted({q for _, mods in releases if mod in mods for q in mods[mod].signatures})
        for qual in all_funcs:
            if not _keep_qualname(qual, private_ok):
                continue
            sigs = [mods[mod].signatures.get(qual) if mod in mods else None for _, mods in releases]
            pnames: list[str] = []
            for s in sigs:
                for p in s or ():
                    if p[0] not in pnames:
                        pnames.append(p[0])
            per_param: dict[str, dict[str, Any]] = {}
            for pn in pnames:
                states = []
                for s in sigs:
                    if s is None:
                        states.append(None)
                    else:
                        states.append("P" if any(p[0] == pn for p in s) else "A")
                ev = _events(states, versions)
                # required / keyword-only transitions while present in both releases
                prev = None
                for v, s in zip(versions, sigs):
                    if s is None:
                        continue
                    cur = next((p for p in s if p[0] == pn), None)
                    if cur is not None and prev is not None:
                        if cur[2] and not prev[2]:
                            ev.append(["became_required", v])
                        elif prev[2] and not cur[2]:
                            ev.append(["became_optional", v])
                        if cur[1] == "kw" and prev[1] in ("pk", "pos"):
                            ev.append(["became_keyword_only", v])
                        elif prev[1] == "kw" and cur[1] in ("pk", "pos"):
                            ev.append(["became_positional", v])
                    prev = cur
                if ev:
                    ev.sort(key=lambda e: Version(e[1]) if is_version(e[1]) else Version("0"))
                    per_param[pn] = _entry(ev)
            if per_param:
                params_out[f"{mod}.{qual}"] = per_param

    _add_renames(releases, names_out, added_at, known_renames or {})
    return {
        "releases_compared": versions,
        "modules": modules_out,
        "names": names_out,
        "parameters": params_out,
        "conditional": conditional_out,
    }


_BUILTIN_BASES = frozenset(
    {
        "object",
        "dict",
        "list",
        "tuple",
        "str",
        "int",
        "Exception",
        "RuntimeError",
        "ValueError",
        "TypeError",
        "ImportError",
        "Enum",
        "IntEnum",
        "ABC",
        "Generic",
        "Protocol",
        "NamedTuple",
        "TypedDict",
    }
)


def class_members(
    mods: Mapping[str, ModuleAPI], mod: str, cls: str, _seen: frozenset[tuple[str, str]] = frozenset()
) -> tuple[set[str], bool]:
    """Members of a class with those it inherits from classes of the tracked modules, and
    whether that is complete (every base resolved, or a base from outside the project)."""
    api = mods[mod]
    bases, own = api.classes[cls]
    members, complete = set(own), True
    for base in bases:
        root, last = base.split(".")[0], base.split(".")[-1]
        if root in _BUILTIN_BASES or (root in api.foreign):
            continue
        where: str | None
        if root == base and base in api.classes and (mod, base) not in _seen:
            where = mod
        else:
            where = next(
                (
                    m
                    for m in sorted(mods)
                    if last in mods[m].classes and last in mods[m].defined and (m, last) not in _seen
                ),
                None,
            )
        if where is None:
            complete = False
            continue
        sub, ok = class_members(mods, where, last, _seen | {(mod, cls)})
        members |= sub
        complete = complete and ok
    return members, complete


def _param_names(sig: tuple[Param, ...] | None) -> set[str]:
    return {p[0] for p in sig or ()}


def _add_renames(
    releases: list[tuple[str, dict[str, ModuleAPI]]],
    names_out: dict[str, dict[str, Any]],
    added_at: dict[tuple[str, str], list[str]],
    known: Mapping[str, str],
) -> None:
    by_version = dict(releases)
    versions = [v for v, _ in releases]
    for key, entry in names_out.items():
        if key in known:
            entry["renamed_to"] = known[key]
            continue
        removed = entry.get("removed")
        if removed is None or entry.get("history"):
            continue
        mod, name = key.rsplit(".", 1)
        idx = versions.index(removed)
        before, after = releases[idx - 1][1], by_version[removed]
        old = before.get(mod)
        if old is None:
            continue
        # (a) the definition moved to another tracked module in the same release
        if name in old.defined:
            moved = [
                m
                for m, api in after.items()
                if m != mod and name in api.defined and not (m in before and name in before[m].defined)
            ]
            if moved:  # several (a dispatching module and a backend's): the shortest path
                entry["renamed_to"] = f"{min(moved, key=lambda m: (len(m), m))}.{name}"
                continue
        # (b) a close spelling added to the same module in the same release
        kind = old.kinds.get(name)
        if kind not in ("def", "class") or name not in old.defined:
            continue
        cands = []
        new = after.get(mod)
        for cand in added_at.get((mod, removed), []):
            if new is None or new.kinds.get(cand) != kind or cand not in new.defined:
                continue
            ratio = difflib.SequenceMatcher(None, name, cand).ratio()
            if ratio < (0.8 if kind == "def" else 0.9):
                continue
            if kind == "def":
                a, b = _param_names(old.signatures.get(name)), _param_names(new.signatures.get(cand))
                if (a or b) and len(a & b) / max(1, len(a | b)) < 0.7:
                    continue
                if not (a or b) and ratio < 0.9:  # nothing but the spelling to go by
                    continue
            cands.append((ratio, cand))
        if len(cands) == 1 or (len(cands) > 1 and sorted(cands)[-1][0] > sorted(cands)[-2][0]):
            entry["renamed_to"] = f"{mod}.{max(cands)[1]}"


# --------------------------------------------------------------------------------------------
# Releases of each package
# --------------------------------------------------------------------------------------------


def _final(v: str) -> bool:
    try:
        pv = Version(v)
    except InvalidVersion:
        return False
    return not pv.is_prerelease and not pv.is_devrelease


def cache_releases(cache: Path, dist: str) -> dict[str, Path]:
    """Version -> extracted tree root, for releases `fetch` finished (a '.done' file)."""
    root = Path(cache) / dist
    if not root.is_dir():
        return {}
    return {d.name: d for d in root.iterdir() if (d / ".done").exists() and _final(d.name)}


def git_tags(git_dir: Path) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "tag"], check=True, capture_output=True, text=True
    ).stdout
    return out.split()


def releases_for(dist: str, cache: Path | None, git: Mapping[str, Path]) -> list[tuple[str, Tree]]:
    package, _ = MODULES[dist]
    floor = Version(RELEASE_FLOOR[dist])
    trees: dict[str, Tree] = {}
    if dist == "flash-attn":
        for tag in git_tags(git["flash-attn"]):
            v = tag[1:] if tag.startswith("v") else None
            if v and _final(v) and Version(v) >= floor:
                trees[v] = GitTree(git["flash-attn"], tag, package)
    else:
        parts: dict[str, list[Tree]] = {}
        for reg in REGISTRY_DISTS[dist]:
            for v, path in (cache_releases(cache, reg) if cache else {}).items():
                parts.setdefault(v, []).append(DirTree(path))
        for v, ts in parts.items():
            if Version(v) >= floor:
                trees[v] = ts[0] if len(ts) == 1 else UnionTree(ts)
        if dist in git:  # releases with no registry file, from the tag
            for tag in git_tags(git[dist]):
                v = tag[1:] if tag.startswith("v") else tag
                if _final(v) and Version(v) >= floor and v not in trees and _registry_has(cache, dist, v):
                    trees[v] = GitTree(git[dist], tag, package)
    return sorted(trees.items(), key=lambda kv: Version(kv[0]))


def _registry_has(cache: Path | None, dist: str, version: str) -> bool:
    """Whether fetch saw `version` on the registry (listed in CACHE/<dist>/versions.txt)."""
    if cache is None:
        return False
    listing = Path(cache) / dist / "versions.txt"
    return listing.exists() and version in listing.read_text().split()


def build(
    cache: Path | None, git: Mapping[str, Path], dists: Iterable[str], log: Callable[[str], None] = print
) -> dict[str, Any]:
    packages = {}
    for dist in dists:
        if dist == "flash-attn" and "flash-attn" not in git:
            log("flash-attn: no --flash-attention-git, skipped")
            continue
        package, patterns = MODULES[dist]
        rels = releases_for(dist, cache, git)
        if not rels:
            log(f"{dist}: no releases found, skipped")
            continue
        extracted = [(v, extract_tree(t, package, patterns)) for v, t in rels]
        table = diff_releases(extracted, PRIVATE_USED.get(dist, frozenset()), KNOWN_RENAMES.get(dist))
        packages[dist] = table
        log(
            f"{dist}: {len(rels)} releases, {len(table['modules'])} modules, "
            f"{len(table['names'])} names, {len(table['parameters'])} functions with parameter "
            f"changes ({sum(len(p) for p in table['parameters'].values())} parameters)"
        )
    return packages


# --------------------------------------------------------------------------------------------
# fetch
# --------------------------------------------------------------------------------------------

_BINARY_ARGS = [
    "--only-binary=:all:",
    "--platform",
    "manylinux2014_x86_64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
]


def registry_versions(dist: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", dist], capture_output=True, text=True, check=True
    ).stdout
    for line in out.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def _worth_keeping(rel: str) -> bool:
    """transformers ships ~400 model folders: keep only those of the tracked models."""
    parts = rel.split("/")
    if parts[0] == "transformers" and len(parts) > 3 and parts[1] == "models":
        return parts[2] in _TF_MODELS
    return True


def fetch_one(dist: str, version: str, package: str, dest: Path) -> str | None:
    """Download one release, keep its package's .py files under dest, delete the archive."""
    with tempfile.TemporaryDirectory() as tmp:
        for extra in (_BINARY_ARGS, ["--only-binary=:all:"], ["--no-binary=:all:"]):
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "-q",
                    "-d",
                    tmp,
                    f"{dist}=={version}",
                    *extra,
                ],
                capture_output=True,
            )
            files = os.listdir(tmp)
            if r.returncode == 0 and files:
                break
        else:
            return None
        archive = Path(tmp) / files[0]
        if dest.exists():
            shutil.rmtree(dest)
        for name, data in _archive_members(archive):
            rel = _package_relpath(name, package)
            if rel is not None and _worth_keeping(rel):
                p = dest / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / ".done").write_text(archive.name + "\n")
        return archive.name


def fetch(cache: Path, dists: Iterable[str], log: Callable[[str], None] = print) -> None:
    for dist in dists:
        if dist not in REGISTRY_DISTS:
            continue
        package = MODULES[dist][0]
        for reg in REGISTRY_DISTS[dist]:
            versions = [
                v for v in registry_versions(reg) if _final(v) and Version(v) >= Version(RELEASE_FLOOR[dist])
            ]
            (cache / reg).mkdir(parents=True, exist_ok=True)
            (cache / reg / "versions.txt").write_text("\n".join(versions) + "\n")
            for v in sorted(versions, key=Version):
                dest = cache / reg / v
                if (dest / ".done").exists():
                    continue
                got = fetch_one(reg, v, package, dest)
                log(f"{reg} {v}: {got or 'NOT FOUND'}")


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def write_json(packages: dict[str, Any], out: Path, source: str) -> int:
    doc = {"generated": datetime.date.today().isoformat(), "source": source, "packages": packages}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return len(text)


SOURCE = (
    "ast of the released code (no imports): registry wheels/sdists of transformers, triton, "
    "xformers, flash-linear-attention+fla-core; git tags of flash-attention; "
    "tools/api_changes.py"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download releases and keep their .py files (network)")
    f.add_argument("--cache", type=Path, required=True)
    f.add_argument("--packages", default=",".join(REGISTRY_DISTS))
    b = sub.add_parser("build", help="parse the trees and write the JSON (offline)")
    b.add_argument("--cache", type=Path)
    b.add_argument("--flash-attention-git", type=Path)
    b.add_argument("--xformers-git", type=Path)
    b.add_argument("--packages", default=",".join(MODULES))
    b.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    dists = [d.strip() for d in args.packages.split(",") if d.strip()]
    unknown = [d for d in dists if d not in MODULES]
    if unknown:
        ap.error(f"unknown package(s): {', '.join(unknown)}")
    if args.cmd == "fetch":
        fetch(args.cache, dists)
        return 0
    git = {}
    if args.flash_attention_git:
        git["flash-attn"] = args.flash_attention_git
    if args.xformers_git:
        git["xformers"] = args.xformers_git
    packages = build(args.cache, git, dists)
    size = write_json(packages, args.out, SOURCE)
    print(f"wrote {args.out} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
