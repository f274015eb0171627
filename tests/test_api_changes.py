"""tools/api_changes.py, offline: the ast extractor and the differ on small trees the tests write
themselves (no upstream code), the archive / git / cache readers, and the shipped
attn_doctor/releases/snapshot/api-changes.json (shape, and entries checked by hand)."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "attn_doctor" / "releases" / "snapshot" / "api-changes.json"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_changes", REPO / "tools" / "api_changes.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["api_changes"] = mod
    spec.loader.exec_module(mod)
    return mod


ac = _load_tool()


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip()


# ------------------------------------------------------------------------------------------------
# extractor
# ------------------------------------------------------------------------------------------------


def test_module_level_bindings() -> None:
    api = ac.extract_module(
        src("""
        import os
        import torch.nn as nn
        import pkg.sub
        from typing import TYPE_CHECKING, Optional
        from .helpers import helper as renamed_helper, other
        from . import sibling
        if TYPE_CHECKING:
            from .only_for_typing import Ghost
        else:
            RUNTIME_ONLY = 1
        try:
            from fastlib import fast_fn
        except ImportError:
            fast_fn = None
        if os.environ.get("X"):
            FLAG = True
        else:
            FLAG = False
        A, (B, C) = 1, (2, 3)
        D: int = 4
        E: int
        TEMP = 0
        del TEMP
        def public_fn(x): ...
        async def async_fn(): ...
        class Thing:
            attr = 1
            def method(self): ...
    """),
        "pkg.mod",
    )
    assert api.names == {
        "os",
        "nn",
        "pkg",
        "TYPE_CHECKING",
        "Optional",
        "renamed_helper",
        "other",
        "sibling",
        "RUNTIME_ONLY",
        "fast_fn",
        "FLAG",
        "A",
        "B",
        "C",
        "D",
        "public_fn",
        "async_fn",
        "Thing",
    }
    # E is only annotated (no binding); TEMP is deleted; Ghost is bound only for type checkers
    assert {"E", "TEMP", "Ghost"}.isdisjoint(api.names)
    assert api.defined >= {"public_fn", "async_fn", "Thing", "A", "FLAG"}
    assert "renamed_helper" not in api.defined
    # imports from another project are no API of this one; the project's own modules are
    assert {"os", "nn", "TYPE_CHECKING", "Optional"} <= api.foreign
    assert {"renamed_helper", "other", "sibling", "pkg", "fast_fn"}.isdisjoint(api.foreign - {"fast_fn"})
    assert api.kinds["Thing"] == "class" and api.kinds["public_fn"] == "def"
    assert api.classes["Thing"] == ((), frozenset({"attr", "method"}))


def test_conditional_bindings() -> None:
    api = ac.extract_module(
        src("""
        from .utils import is_fast_available
        if is_fast_available():
            from fastlib import fast_fn
            FAST_ONLY = True
            BOTH = 1
        else:
            BOTH = 2
        try:
            from .native import native_op
            NATIVE = True
        except ImportError:
            NATIVE = False
        try:
            from .must import must_have
        except ImportError:
            raise RuntimeError("needed")
        if fast_fn:
            SUPPORTS_WINDOW = True
        def top(): ...
    """),
        "pkg.mod",
    )
    assert api.conditional == {"fast_fn", "FAST_ONLY", "native_op", "SUPPORTS_WINDOW"}


def test_module_getattr_shims() -> None:
    api = ac.extract_module(
        src("""
        def __getattr__(name):
            if name == "OldCache":
                return object
            if name in ("old_fn", "older_fn", "not an identifier"):
                return len
            if other == "NotThis":
                pass
            raise AttributeError(name)
    """),
        "pkg.mod",
    )
    assert api.names == {"__getattr__", "OldCache", "old_fn", "older_fn"}


def test_unparsable_module_is_empty() -> None:
    api = ac.extract_module("def broken(:\n", "pkg.bad")
    assert api.names == set() and api.signatures == {}


def test_signatures() -> None:
    api = ac.extract_module(
        src("""
        def f(a, b=1, /, c=2, *args, d, e=3, _private=None, **kwargs): ...
        def g(x, y): ...
        class K:
            def __init__(self, size, *, dtype=None): ...
            def forward(self, x, mask=None): ...
            @staticmethod
            def make(n, m=0): ...
            @classmethod
            def build(cls, spec): ...
            @property
            def size(self): ...
            def _helper(self, z): ...
            def __repr__(self): ...
    """),
        "pkg.mod",
    )
    sig = api.signatures
    assert sig["f"] == (
        ("a", "pos", True),
        ("b", "pos", False),
        ("c", "pk", False),
        ("*args", "var", False),
        ("d", "kw", True),
        ("e", "kw", False),
        ("**kwargs", "varkw", False),
    )
    assert sig["g"] == (("x", "pk", True), ("y", "pk", True))
    assert sig["K.__init__"] == (("size", "pk", True), ("dtype", "kw", False))  # self dropped
    assert sig["K.forward"] == (("x", "pk", True), ("mask", "pk", False))
    assert sig["K.make"] == (("n", "pk", True), ("m", "pk", False))  # staticmethod keeps n
    assert sig["K.build"] == (("spec", "pk", True),)  # cls dropped
    assert "K.size" not in sig  # properties are not called
    assert "K._helper" in sig  # kept here; PRIVATE_USED filters it in the differ
    assert "K.__repr__" not in sig


def test_redefinition_and_reassignment() -> None:
    api = ac.extract_module(
        src("""
        def f(a): ...
        def f(a, b): ...
        def g(x): ...
        g = None
    """),
        "pkg.mod",
    )
    assert api.signatures["f"] == (("a", "pk", True), ("b", "pk", True))
    assert "g" not in api.signatures and "g" in api.names


def test_tree_star_imports_and_selection() -> None:
    tree = ac.DictTree(
        {
            "pkg/__init__.py": "from .core import *\nfrom .util import *\nfrom .listed import *\n",
            "pkg/core.py": "def alpha(): ...\ndef _hidden(): ...\nBETA = 2\n",
            "pkg/util.py": "from .core import *\ndef gamma(): ...\n",
            "pkg/listed.py": "__all__ = ['kept']\ndef kept(): ...\ndef dropped(): ...\n",
            "pkg/sub/__init__.py": "from ..core import alpha\n",
            "pkg/sub/deep/leaf.py": "X = 1\n",
            "pkg/not-a-module.py": "Y = 1\n",
            "other/x.py": "Z = 1\n",
        }
    )
    assert ac.module_paths(tree, "pkg") == {
        "pkg": "pkg/__init__.py",
        "pkg.core": "pkg/core.py",
        "pkg.util": "pkg/util.py",
        "pkg.listed": "pkg/listed.py",
        "pkg.sub": "pkg/sub/__init__.py",
        "pkg.sub.deep.leaf": "pkg/sub/deep/leaf.py",
    }
    mods = ac.extract_tree(tree, "pkg", ("pkg", "pkg.*"))
    assert sorted(mods) == ["pkg", "pkg.core", "pkg.listed", "pkg.sub", "pkg.util"]  # '*' = one segment
    assert mods["pkg"].names == {"alpha", "BETA", "gamma", "kept"}
    assert mods["pkg.sub"].names == {"alpha"} and "alpha" not in mods["pkg.sub"].foreign
    assert sorted(ac.extract_tree(tree, "pkg", ("pkg.**",))) == [
        "pkg.core",
        "pkg.listed",
        "pkg.sub",
        "pkg.sub.deep.leaf",
        "pkg.util",
    ]


# ------------------------------------------------------------------------------------------------
# differ
# ------------------------------------------------------------------------------------------------

V1 = {
    "lib/__init__.py": "from .api import run, make_block_mask\n",
    "lib/api.py": src("""
        import torch
        from typing import Optional
        def run(x, scale=1.0): ...
        def make_block_mask(q, k, v, causal=False): ...
        def flaky(): ...
        def _secret(): ...
        def _known(): ...
        class Moving: ...
        class Store:
            def get(self, i): ...
            def legacy(self): ...
        class Base: ...
        class Child(Base):
            def inherited_later(self): ...
        class Orphan(UnknownBase):
            def vanishing(self): ...
    """),
    "lib/gone.py": "def g(): ...\n",
}
V2 = {
    "lib/__init__.py": "from .api import run, make_block_masks\n",
    "lib/api.py": src("""
        import torch
        def run(x, mask, scale=1.0, *, window=None): ...
        def make_block_masks(q, k, v, causal=False): ...
        def _secret(): ...
        class Store:
            def get(self, i, default=None): ...
        class Base:
            def inherited_later(self): ...
        class Child(Base): ...
        class Orphan(UnknownBase): ...
    """),
    "lib/other.py": "class Moving: ...\n",
    "lib/added.py": "def h(): ...\n",
}
V3 = {
    **V2,
    "lib/api.py": V2["lib/api.py"].replace(
        "def run(x, mask, scale=1.0, *, window=None)",
        "def run(x, mask=None, *, scale=1.0, window=None, **kw)",
    )
    + "def flaky(): ...\n",
}


@pytest.fixture(scope="module")
def table() -> dict:
    rels = [
        (v, ac.extract_tree(ac.DictTree(files), "lib", ("lib", "lib.*")))
        for v, files in (("1.0", V1), ("2.0", V2), ("3.0", V3))
    ]
    return ac.diff_releases(rels, frozenset({"_known"}), {})


def test_modules_added_and_removed(table: dict) -> None:
    assert table["releases_compared"] == ["1.0", "2.0", "3.0"]
    assert table["modules"] == {
        "lib.gone": {"removed": "2.0"},
        "lib.added": {"added": "2.0"},
        "lib.other": {"added": "2.0"},
    }


def test_names(table: dict) -> None:
    names = table["names"]
    assert names["lib.make_block_mask"] == {"removed": "2.0"}
    assert names["lib.make_block_masks"] == {"added": "2.0"}
    # same kind, close spelling, same parameters, same release: a rename
    assert names["lib.api.make_block_mask"] == {"removed": "2.0", "renamed_to": "lib.api.make_block_masks"}
    # the definition moved to another tracked module
    assert names["lib.api.Moving"] == {"removed": "2.0", "renamed_to": "lib.other.Moving"}
    assert names["lib.api.flaky"] == {
        "removed": "2.0",
        "added": "3.0",
        "history": [["removed", "2.0"], ["added", "3.0"]],
    }
    assert "lib.api.Optional" not in names  # another project's name
    assert "lib.api._known" in names and "lib.api._secret" not in names  # PRIVATE_USED only
    assert not any(k.startswith("lib.gone.") for k in names)  # covered by the module entry
    assert not any(k.startswith("lib.added.") for k in names)  # came with its module


def test_class_members(table: dict) -> None:
    names = table["names"]
    assert names["lib.api.Store.legacy"] == {"removed": "2.0"}
    # moved to a base class of the same module: still there, not reported
    assert "lib.api.Child.inherited_later" not in names
    # a base the differ cannot see: an absent member is unknown, not removed
    assert "lib.api.Orphan.vanishing" not in names


def test_parameters(table: dict) -> None:
    p = table["parameters"]
    assert p["lib.api.run"] == {
        "mask": {
            "added": "2.0",
            "became_optional": "3.0",
            "history": [["added", "2.0"], ["became_optional", "3.0"]],
        },
        "scale": {"became_keyword_only": "3.0"},
        "window": {"added": "2.0"},
        "**kw": {"added": "3.0"},
    }
    assert p["lib.api.Store.get"] == {"default": {"added": "2.0"}}
    assert "lib.api.make_block_masks" not in p  # no change after it appeared


def test_required_parameter_event() -> None:
    mk = lambda s: {"m": ac.extract_module(s, "m")}  # noqa: E731
    t = ac.diff_releases([("1", mk("def f(a, b=None): ...\n")), ("2", mk("def f(a, b): ...\n"))])
    assert t["parameters"] == {"m.f": {"b": {"became_required": "2"}}}


def test_pattern_segments() -> None:
    assert ac.select_modules(["a", "a.b", "a.b.c", "ab"], ["a.*"]) == ["a.b"]
    assert ac.select_modules(["a", "a.b", "a.b.c", "ab"], ["a.**"]) == ["a.b", "a.b.c"]
    assert ac.select_modules(["a", "a.b"], ["a"]) == ["a"]


# ------------------------------------------------------------------------------------------------
# readers: archives, cache folders, git tags; the whole build
# ------------------------------------------------------------------------------------------------


def _write_wheel(path: Path, files: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr("lib-1.0.dist-info/METADATA", "Name: lib\n")


def _write_sdist(path: Path, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"lib-2.0/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_archive_trees(tmp_path: Path) -> None:
    whl, sdist = tmp_path / "lib-1.0-py3-none-any.whl", tmp_path / "lib-2.0.tar.gz"
    _write_wheel(whl, {"lib/__init__.py": "A = 1\n", "lib/x.py": "B = 1\n", "other/y.py": "C=1\n"})
    _write_sdist(sdist, {"lib/__init__.py": "A = 2\n", "setup.py": "", "tests/t.py": ""})
    w = ac.ArchiveTree(whl, "lib")
    assert w.paths() == ["lib/__init__.py", "lib/x.py"] and w.read("lib/x.py") == "B = 1\n"
    s = ac.ArchiveTree(sdist, "lib")
    assert s.paths() == ["lib/__init__.py"] and s.read("lib/__init__.py") == "A = 2\n"
    u = ac.UnionTree([ac.DictTree({"lib/a.py": "1"}), ac.DictTree({"lib/a.py": "2", "lib/b.py": ""})])
    assert u.paths() == ["lib/a.py", "lib/b.py"] and u.read("lib/a.py") == "1"


def _cache_release(cache: Path, dist: str, version: str, files: dict[str, str]) -> None:
    root = cache / dist / version
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".done").write_text("x.whl\n")


def test_build_from_cache_and_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    # a registry-style cache of two releases, with one unfinished download that must be ignored
    cache = tmp_path / "cache"
    _cache_release(cache, "triton", "1.0.0", {"triton/testing.py": "def bench(fn, flush=True): ...\n"})
    _cache_release(cache, "triton", "2.0.0", {"triton/testing.py": "def bench(fn, quantiles=None): ...\n"})
    (cache / "triton" / "3.0.0").mkdir()
    # a git repository with two release tags
    repo = tmp_path / "fa"
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    repo.mkdir()
    run("init", "-q")
    (repo / "flash_attn").mkdir()
    for tag, text in (
        ("v1.0.0", "def fa(q, k, v): ...\nOLD = 1\n"),
        ("v2.0.0", "def fa(q, k, v, window=None): ...\n"),
    ):
        (repo / "flash_attn" / "flash_attn_interface.py").write_text(text)
        run("add", "-A")
        run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", tag)
        run("tag", tag)
    run("tag", "v3.0.0.beta1")  # a pre-release: not compared
    monkeypatch.setitem(ac.RELEASE_FLOOR, "triton", "0.1")
    logs: list[str] = []
    packages = ac.build(cache, {"flash-attn": repo / ".git"}, ["triton", "flash-attn"], logs.append)
    assert packages["triton"]["releases_compared"] == ["1.0.0", "2.0.0"]
    assert packages["triton"]["parameters"] == {
        "triton.testing.bench": {"flush": {"removed": "2.0.0"}, "quantiles": {"added": "2.0.0"}}
    }
    fa = packages["flash-attn"]
    assert fa["releases_compared"] == ["1.0.0", "2.0.0"]
    assert fa["names"] == {"flash_attn.flash_attn_interface.OLD": {"removed": "2.0.0"}}
    assert fa["parameters"] == {"flash_attn.flash_attn_interface.fa": {"window": {"added": "2.0.0"}}}
    out = tmp_path / "out.json"
    ac.write_json(packages, out, "test")
    doc = json.loads(out.read_text())
    assert set(doc) == {"generated", "source", "packages"}
    assert out.read_text().count("\n") == 1  # compact


# ------------------------------------------------------------------------------------------------
# the shipped JSON
# ------------------------------------------------------------------------------------------------

EVENTS = {
    "added",
    "removed",
    "became_required",
    "became_optional",
    "became_keyword_only",
    "became_positional",
}


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(SHIPPED.read_text())


def _check_entry(entry: dict, *, name: bool) -> None:
    allowed = EVENTS | {"history"} | ({"renamed_to"} if name else set())
    assert entry and set(entry) <= allowed, entry
    for key in EVENTS & set(entry):
        Version(entry[key])
    if "history" in entry:
        assert len(entry["history"]) > 1
        for kind, version in entry["history"]:
            assert kind in EVENTS and version
            assert entry[kind] == [v2 for k2, v2 in entry["history"] if k2 == kind][-1]


def test_shipped_shape(shipped: dict) -> None:
    assert set(shipped) == {"generated", "source", "packages"}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", shipped["generated"])
    assert set(shipped["packages"]) == set(ac.MODULES)
    assert SHIPPED.stat().st_size < 1_500_000
    for dist, table in shipped["packages"].items():
        assert set(table) == {"releases_compared", "modules", "names", "parameters", "conditional"}
        rels = table["releases_compared"]
        assert rels == sorted(rels, key=Version) and len(rels) == len(set(rels))
        compared = set(rels)
        prefix = ac.MODULES[dist][0]
        for key, entry in {**table["modules"], **table["names"]}.items():
            assert key == prefix or key.startswith(prefix + "."), key
            _check_entry(entry, name=key in table["names"])
            for k in EVENTS & set(entry):
                assert entry[k] in compared and entry[k] != rels[0]
        for func, params in table["parameters"].items():
            assert func.startswith(prefix + ".") and params
            for entry in params.values():
                _check_entry(entry, name=False)
        for key, runs in table["conditional"].items():
            assert key.startswith(prefix + ".") and runs
            for first, last in runs:
                assert first in compared and last in compared and Version(first) <= Version(last)
        # only verified private names
        for key in table["names"]:
            for part in key.split("."):
                if part.startswith("_") and not part.startswith("__"):
                    assert part in ac.PRIVATE_USED[dist], key


def test_shipped_compares_enough_releases(shipped: dict) -> None:
    tf = shipped["packages"]["transformers"]["releases_compared"]
    # every minor from 4.30 on, first and last release of each at least
    minors = {tuple(Version(v).release[:2]) for v in tf}
    assert {(4, m) for m in range(30, 58)} <= minors and (5, 0) in minors
    assert {"2.0.0", "3.0.0", "3.2.0", "3.3.0"} <= set(shipped["packages"]["triton"]["releases_compared"])
    assert {"1.0.9", "2.0.0", "2.3.0", "2.6.0"} <= set(shipped["packages"]["flash-attn"]["releases_compared"])


# Each entry below was checked by hand against the released code (the extracted wheels of the two
# neighbouring releases, or `git show vX:flash_attn/flash_attn_interface.py` in the
# flash-attention mirror), and each is an error users hit (issue URL in the comment).
def test_shipped_checked_entries(shipped: dict) -> None:
    tf = shipped["packages"]["transformers"]
    # `class LlamaFlashAttention2` is in 4.47.1's models/llama/modeling_llama.py, not in 4.48.0's
    # (https://github.com/deepseek-ai/DeepSeek-VL2/issues/45: pinning 4.47.1 fixes it)
    assert tf["names"]["transformers.models.llama.modeling_llama.LlamaFlashAttention2"]["removed"] == "4.48.0"
    assert tf["names"]["transformers.models.llama.modeling_llama.LlamaSdpaAttention"]["removed"] == "4.48.0"
    # `_flash_supports_window_size` in 4.53.3's modeling_flash_attention_utils.py, not in 4.54.0's
    # (https://github.com/huggingface/transformers/issues/37428,
    #  https://github.com/axolotl-ai-cloud/axolotl/pull/2966)
    assert tf["names"]["transformers.modeling_flash_attention_utils._flash_supports_window_size"] == {
        "removed": "4.54.0"
    }
    # 4.51.0's modeling_flash_attention_utils.py binds it only under `if flash_attn_func:` (set by
    # `if is_flash_attn_2_available(): from flash_attn import ...`): the ImportError of
    # https://github.com/huggingface/transformers/issues/37428 (4.51, ROCm, April 2025) came from
    # that condition, not from a removal
    assert tf["conditional"]["transformers.modeling_flash_attention_utils._flash_supports_window_size"] == [
        ["4.43.0", "4.52.4"]
    ]  # 4.53.0 binds it to False first, then tests flash_attn_func
    # `def _get_unpad_data` in 4.42.4's models/llama/modeling_llama.py, absent from 4.43.0's (moved to
    # modeling_flash_attention_utils.py, new in 4.43.0)
    assert tf["names"]["transformers.models.llama.modeling_llama._get_unpad_data"]["removed"] == "4.43.0"
    # is_torch_fx_available: exported by utils/__init__.py in 4.57.6, gone in 5.0.0
    assert tf["names"]["transformers.utils.is_torch_fx_available"] == {"removed": "5.0.0"}
    # LlamaAttention.forward: position_embeddings optional (=None) in 4.47.1, positional without
    # default in 4.48.0
    fwd = tf["parameters"]["transformers.models.llama.modeling_llama.LlamaAttention.forward"]
    assert fwd["position_embeddings"]["became_required"] == "4.48.0"
    # `def seen_tokens` (a property of DynamicCache's base) in 4.53.3's cache_utils.py, not in 4.54.0
    assert tf["names"]["transformers.cache_utils.DynamicCache.seen_tokens"]["removed"] == "4.54.0"

    fa = shipped["packages"]["flash-attn"]
    # v1.0.9 defines flash_attn_unpadded_func, v2.0.0 flash_attn_varlen_func
    # (https://github.com/Dao-AILab/flash-attention/issues/641)
    assert fa["names"]["flash_attn.flash_attn_interface.flash_attn_unpadded_func"] == {
        "removed": "2.0.0",
        "renamed_to": "flash_attn.flash_attn_interface.flash_attn_varlen_func",
    }
    # flash_attn_func's signature: window_size first in v2.3.0 (not in v2.2.5), softcap first in
    # v2.6.0 (not in v2.5.9.post1)
    ffunc = fa["parameters"]["flash_attn.flash_attn_interface.flash_attn_func"]
    assert ffunc["window_size"] == {"added": "2.3.0"} and ffunc["softcap"] == {"added": "2.6.0"}

    tr = shipped["packages"]["triton"]
    # compiler/compiler.py imports AttrsDescriptor in 3.2.0, not in 3.3.0
    # (https://github.com/leomaxwell973/Triton-3.3.0-UPDATE_FROM_3.2.0_and_FIXED-Windows-Nvidia-Prebuilt/issues/2)
    assert tr["names"]["triton.compiler.compiler.AttrsDescriptor"]["removed"] == "3.3.0"
    # `def pow` in 2.3.1's language/math.py; 3.0.0 defines it in language/extra/libdevice.py
    assert tr["names"]["triton.language.math.pow"] == {
        "removed": "3.0.0",
        "renamed_to": "triton.language.extra.libdevice.pow",
    }
    # testing.do_bench has fast_flush in 3.1.0, not in 3.2.0
    assert tr["parameters"]["triton.testing.do_bench"]["fast_flush"] == {"removed": "3.2.0"}

    xf = shipped["packages"]["xformers"]
    # xformers/components/ is in the 0.0.33.post2 wheel, not in 0.0.34's; its MultiHeadDispatch
    # export went at 0.0.29
    assert xf["modules"]["xformers.components"] == {"removed": "0.0.34"}
    assert xf["names"]["xformers.components.MultiHeadDispatch"] == {"removed": "0.0.29"}
