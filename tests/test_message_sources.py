"""The message sources of flash-attn, xformers, triton, fla and kernels, and the C++ extractor
(tools/messages/cpp_source.py), on recorded inputs: source snippets written here and an excerpt of
flash-attn 2.8.3's flash_api.cpp (tests/fixtures/messages/). No network."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from attn_doctor.releases.messages import read
from tools.messages import build, cpp_source
from tools.messages.python_source import RawMessage
from tools.messages.python_source import extract as extract_python
from tools.messages.sources import SOURCES
from tools.messages.sources.archives import NOTES, ArchiveTrees, glob, members
from tools.messages.sources.cached_trees import DONE
from tools.messages.sources.fla import FLA
from tools.messages.sources.flash_attn import FLASH_ATTN, FlashAttnTrees
from tools.messages.sources.kernels import KERNELS
from tools.messages.sources.triton import TRITON
from tools.messages.sources.xformers import XFORMERS

FIXTURES = Path(__file__).parent / "fixtures" / "messages"
DEFAULT_TAIL = (
    " to be true, but got false.  (Could this error message be improved?  "
    "If so, please report an enhancement request to PyTorch.)"
)


def messages(source: str, path: str = "csrc/x.cpp") -> dict[str, RawMessage]:
    return {m.template: m for m in cpp_source.extract(source, path)}


# --- the C++ extractor -------------------------------------------------------------------------


def test_cpp_check_joins_literal_pieces_and_makes_fields_of_the_rest() -> None:
    found = messages(
        """
        at::Tensor mha_fwd(at::Tensor &q, int head_size) {
            TORCH_CHECK(head_size <= 256, "FlashAttention forward only supports head dimension at most ",
                        256, ", got ", head_size, " (" "adjacent" " literals)\\n");
            TORCH_CHECK_VALUE(q.dim() == 4, "q must be 4-D, got " + std::to_string(q.dim()) + " dims");
        }
        """
    )
    check = found[
        "FlashAttention forward only supports head dimension at most {}, got {} (adjacent literals)\n"
    ]
    assert (check.function, check.kind, check.guard) == ("mha_fwd", "TORCH_CHECK", "!(head_size <= 256)")
    value = found["q must be 4-D, got {} dims"]
    assert value.kind == "TORCH_CHECK_VALUE"


def test_cpp_check_without_message_gets_c10s_text() -> None:
    found = cpp_source.extract("void f(float p) {\n  TORCH_CHECK(p  <\n 1.f);\n}\n", "a.cpp")
    assert [m.template for m in found] == ["Expected p < 1.f" + DEFAULT_TAIL]
    assert found[0].guard == "!(p < 1.f)"


def test_cpp_guards_come_from_enclosing_ifs_else_and_unbraced_ifs() -> None:
    found = messages(
        """
        void run(Params &params, bool paged, float softcap) {
            if (params.is_local) {
                TORCH_CHECK(false, "This build does not support local attention.");
            } else if (softcap > 0.f) {
                AT_ERROR("softcap needs local attention, got ", softcap);
            } else {
                TORCH_WARN("neither local attention nor softcap here");
            }
            if (paged)
                TORCH_CHECK(params.page_size % 256 == 0,
                            "Paged KV cache block size must be divisible by 256");
            if (params.a || params.b) { TORCH_CHECK(!params.c, "c cannot go with a or b at all"); }
        }
        """
    )
    assert found["This build does not support local attention."].guard == "params.is_local"
    error = found["softcap needs local attention, got {}"]
    assert (error.kind, error.guard) == ("AT_ERROR", "!(params.is_local) && softcap > 0.f")
    warn = found["neither local attention nor softcap here"]
    assert (warn.kind, warn.guard) == ("TORCH_WARN", "!(softcap > 0.f)")
    paged = found["Paged KV cache block size must be divisible by 256"]
    assert paged.guard == "paged && !(params.page_size % 256 == 0)"
    assert found["c cannot go with a or b at all"].guard == "(params.a || params.b) && params.c"


def test_cpp_comments_and_strings_hide_nothing_and_add_nothing() -> None:
    found = messages(
        """
        // TORCH_CHECK(false, "a commented-out check never counts");
        /* AT_ERROR("nor one in a block comment"); { */
        void f(const std::string &name) {
            const char *text = "TORCH_CHECK(false, \\"text inside a string\\")";
            TORCH_CHECK(name != "a) , {b", "a name may hold ), { and commas: ", name);  // trailing (
            char open = '(';
        }
        """
    )
    assert list(found) == ["a name may hold ), { and commas: {}"]
    assert found["a name may hold ), { and commas: {}"].function == "f"
    assert found["a name may hold ), { and commas: {}"].guard == '!(name != "a) , {b")'


def test_cpp_throw_and_brace_initializers_and_lambdas() -> None:
    found = messages(
        """
        namespace flash {
        struct Runner {
            void launch(int arch) const {
                auto sizes = std::vector<int>{1, 2, 3};
                BOOL_SWITCH(arch >= 90, IsSm90, [&] {
                    if (!IsSm90) {
                        throw std::runtime_error("arch " + std::to_string(arch) +
                                                 " unsupported by this kernel");
                    }
                });
            }
        };
        }
        """
    )
    thrown = found["arch {} unsupported by this kernel"]
    assert (thrown.kind, thrown.function, thrown.guard) == ("std::runtime_error", "launch", "!IsSm90")


def test_cpp_condition_names_bound_in_the_function_are_shown() -> None:
    found = messages(
        """
        void mha_fwd() {
            auto dprops = at::cuda::getCurrentDeviceProperties();
            bool is_sm8x = dprops->major == 8 && dprops->minor >= 0;
            bool is_sm90 = dprops->major == 9 && dprops->minor == 0;
            TORCH_CHECK(is_sm90 || is_sm8x, "FlashAttention only supports Ampere GPUs or newer.");
        }
        """
    )
    assert found["FlashAttention only supports Ampere GPUs or newer."].guard == (
        "!(is_sm90 || is_sm8x) [is_sm90 = dprops->major == 9 && dprops->minor == 0; "
        "is_sm8x = dprops->major == 8 && dprops->minor >= 0]"
    )


def test_cpp_macros_expand_where_used_and_stay_fields_where_not() -> None:
    found = cpp_source.extract((FIXTURES / "flash_api_2.8.3_excerpt.cpp").read_text(), "csrc/flash_api.cpp")
    by_template = {m.template: m for m in found}
    for name in ("q", "k", "v"):
        device = by_template[f"{name} must be on CUDA"]
        assert (device.function, device.guard) == ("mha_fwd", f"!({name}.is_cuda())")
    shape = by_template["k must have shape (batch_size, seqlen_k, num_heads_k, head_size)"]
    assert shape.guard == "!(k.sizes() == torch::IntArrayRef({batch_size, seqlen_k, num_heads_k, head_size}))"
    unused = by_template["{} must be contiguous"]  # CHECK_CONTIGUOUS is defined, not used here
    assert (unused.function, unused.guard) == ("CHECK_CONTIGUOUS", "!(x.is_contiguous())")
    ampere = by_template["FlashAttention only supports Ampere GPUs or newer."]
    assert (ampere.function, ampere.kind) == ("mha_fwd", "TORCH_CHECK")
    assert ampere.guard == "!(is_sm8x_min) [is_sm8x_min = cc_major >= 8]"
    softcap = by_template["Softcapping does not support dropout for now"]
    assert softcap.guard == "softcap > 0.f && !(p_dropout == 0.f)"
    assert not any("#" in m.template or "__VA_ARGS__" in m.template for m in found)
    assert len(found) == 19  # 12 TORCH_CHECKs, 3 CHECK_DEVICE, 3 CHECK_SHAPE, CHECK_CONTIGUOUS


def test_cpp_macro_arguments_with_checks_are_read_once_where_written() -> None:
    found = cpp_source.extract(
        """
        #define DISPATCH(TYPE, NAME, ...) \\
            switch (TYPE) { case 0: { __VA_ARGS__(); break; } \\
            default: AT_ERROR(#NAME, " not implemented for '", toString(TYPE), "'"); }
        void linear(int t) {
            DISPATCH(t, "linear", [&] { TORCH_CHECK(t > 0, "linear failed."); });
        }
        """,
        "fused_dense.cpp",
    )
    assert sorted((m.template, m.function) for m in found) == [
        ("\"linear\" not implemented for '{}'", "linear"),
        ("linear failed.", "linear"),
    ]


def test_build_reads_cpp_files_with_the_cpp_extractor_and_python_with_ast() -> None:
    cpp = build.extract_file('void f() { TORCH_CHECK(x, "from the C++ extractor here"); }', "csrc/a.cu")
    py = build.extract_file('raise ValueError("from the python extractor here")', "pkg/a.py")
    assert [(m.kind, m.template) for m in cpp] == [("TORCH_CHECK", "from the C++ extractor here")]
    assert [(m.kind, m.template) for m in py] == [("ValueError", "from the python extractor here")]


# --- exception classes that build their own text (python_source) -------------------------------


def test_exception_classes_text_from_init_and_str() -> None:
    triton_21 = """
class OutOfResources(Exception):
    def __init__(self, required, limit, name):
        self.message = f'out of resource: {name}, '\\
                       f'Required: {required}, '\\
                       f'Hardware limit: {limit}'
        self.message += '. Reducing block sizes or `num_stages` may help.'
        super().__init__(self.message)
"""
    triton_3 = """
class OutOfResources(TritonError):
    def __str__(self) -> str:
        return f"out of resource: {self.name}, Required: {self.required}, Hardware limit: {self.limit}. " \\
            "Reducing block sizes or `num_stages` may help."
class Helper:
    def __str__(self):
        return "a plain class's text is no message"
"""
    expected = (
        "out of resource: {}, Required: {}, Hardware limit: {}. "
        + "Reducing block sizes or `num_stages` may help."
    )

    old = extract_python(triton_21, "triton/runtime/errors.py")
    new = extract_python(triton_3, "triton/runtime/errors.py")
    assert [(m.function, m.kind, m.template) for m in old] == [
        ("OutOfResources.__init__", "OutOfResources", expected)
    ]
    assert [(m.function, m.kind, m.template) for m in new] == [
        ("OutOfResources.__str__", "OutOfResources", expected)
    ]


# --- what each source keeps ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "member", "kept"),
    [
        (
            FLASH_ATTN,
            "flash_attn-2.8.3/flash_attn/flash_attn_interface.py",
            "flash_attn/flash_attn_interface.py",
        ),
        (FLASH_ATTN, "flash_attn-2.8.3/flash_attn/cute/interface.py", "flash_attn/cute/interface.py"),
        (FLASH_ATTN, "flash_attn-2.8.3/hopper/flash_attn_interface.py", "hopper/flash_attn_interface.py"),
        (FLASH_ATTN, "flash_attn-2.8.3/setup.py", "setup.py"),
        (FLASH_ATTN, "flash_attn-2.8.3/csrc/flash_attn/flash_api.cpp", "csrc/flash_attn/flash_api.cpp"),
        (FLASH_ATTN, "flash_attn-2.8.3/csrc/flash_attn_ck/mha_fwd.cpp", "csrc/flash_attn_ck/mha_fwd.cpp"),
        (FLASH_ATTN, "flash_attn-2.8.3/csrc/flash_attn/src/flash_fwd_hdim128_fp16_sm80.cu", None),
        (FLASH_ATTN, "flash_attn-2.8.3/csrc/cutlass/include/cutlass/cutlass.h", None),
        (FLASH_ATTN, "flash_attn-2.8.3/csrc/composable_kernel/include/ck/ck.hpp", None),
        (FLASH_ATTN, "flash_attn-2.8.3/hopper/test_flash_attn.py", None),
        (FLASH_ATTN, "flash_attn-2.8.3/tests/test_flash_attn.py", None),
        (FLASH_ATTN, "flash_attn-2.8.3/PKG-INFO", None),
        (TRITON, "triton/runtime/errors.py", "triton/runtime/errors.py"),
        (TRITON, "triton/compiler/compiler.py", "triton/compiler/compiler.py"),
        (TRITON, "triton/backends/nvidia/driver.py", "triton/backends/nvidia/driver.py"),
        (TRITON, "triton/language/extra/cuda/libdevice.py", "triton/language/extra/cuda/libdevice.py"),
        (TRITON, "triton/__init__.py", "triton/__init__.py"),
        (TRITON, "triton/backends/nvidia/include/cuda.h", None),
        (TRITON, "triton/_C/libtriton.so", None),
        (TRITON, "triton/profiler/proton.py", None),
        (TRITON, "triton-3.1.0.dist-info/METADATA", None),
        (XFORMERS, "xformers/_cpp_lib.py", "xformers/_cpp_lib.py"),
        (XFORMERS, "xformers/__init__.py", "xformers/__init__.py"),
        (XFORMERS, "xformers/ops/fmha/dispatch.py", "xformers/ops/fmha/dispatch.py"),
        (
            XFORMERS,
            "xformers/ops/fmha/_triton/splitk_kernels.py",
            "xformers/ops/fmha/_triton/splitk_kernels.py",
        ),
        (XFORMERS, "xformers/ops/swiglu_op.py", None),
        (XFORMERS, "xformers/components/attention/core.py", None),
        (FLA, "fla/ops/utils/op.py", "fla/ops/utils/op.py"),
        (FLA, "fla/__init__.py", "fla/__init__.py"),
        (FLA, "fla_core-0.3.2.dist-info/RECORD", None),
        (KERNELS, "kernels/utils.py", "kernels/utils.py"),
        (KERNELS, "kernels/layer/layer.py", "kernels/layer/layer.py"),
        (KERNELS, "kernels/benchmarks/attention.py", None),
        (KERNELS, "kernels/_rust.abi3.so", None),
    ],
)
def test_each_source_keeps_the_files_whose_messages_count(
    source: ArchiveTrees, member: str, kept: str | None
) -> None:
    assert source.keeps(member) == kept


def test_glob_star_stays_in_a_folder_and_double_star_crosses() -> None:
    assert glob("hopper/*.cpp").match("hopper/flash_api.cpp")
    assert not glob("hopper/*.cpp").match("hopper/instantiations/flash_fwd_hdim64.cpp")
    assert glob("fla/**.py").match("fla/ops/gla/chunk.py")
    assert glob("csrc/cutlass/**").match("csrc/cutlass/include/a.h")
    assert not glob("setup.py").match("hopper/setup.py")


def test_fla_is_one_distribution_before_the_split_and_two_after() -> None:
    assert FLA.distributions("0.3.1") == ["flash-linear-attention"]
    assert FLA.distributions("0.3.2") == ["flash-linear-attention", "fla-core"]
    assert FLA.distributions("0.6.0") == ["flash-linear-attention", "fla-core"]


def test_binaries_are_noted_not_kept() -> None:
    assert KERNELS.binary("kernels/_rust.abi3.so")
    assert TRITON.binary("triton/_C/libtriton.so")
    assert XFORMERS.binary("xformers/_C.so")
    assert not XFORMERS.binary("xformers/_cpp_lib.py")


def test_every_source_is_listed_once() -> None:
    names = [source.distribution for source in SOURCES]
    for name in ("flash-attn", "xformers", "triton", "flash-linear-attention", "kernels"):
        assert names.count(name) == 1


# --- fetching from recorded archives, and the build over the cache -----------------------------


def _wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zipped:
        for name, text in files.items():
            zipped.writestr(name, text)
    return path


def test_members_read_only_what_is_asked(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "a-1.0-py3-none-any.whl", {"a/x.py": "x = 1", "a/big.so": "\0" * 100})
    sdist = tmp_path / "a-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tarred:
        tarred.add(wheel, arcname="a-1.0/a/wheel.bin")
    assert {name: read() for name, read in members(wheel) if name.endswith(".py")} == {"a/x.py": b"x = 1"}
    assert [name for name, _ in members(sdist)] == ["a-1.0/a/wheel.bin"]


def test_fetch_unions_distributions_notes_binaries_and_build_reads_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = {
        ("demo", "1.0"): {"demo/a.py": 'raise ImportError("demo needs the kernels package installed")'},
        ("demo", "2.0"): {"demo/a.py": "", "demo/_rust.abi3.so": "\0"},
        ("demo-core", "2.0"): {
            "demo/ops.py": 'raise ImportError("demo needs the kernels package installed")',
            "demo/csrc/api.cpp": 'void f(bool ok) { TORCH_CHECK(ok, "demo kernel built without this GPU"); }',
        },
    }
    source = ArchiveTrees(
        "demo",
        "demo",
        ("demo/**.py", "demo/**.cpp"),
        suffixes=(".py", ".cpp"),
        also=(("demo-core", "2.0"),),
        binaries=("demo/*.so",),
    )

    def download(self: ArchiveTrees, distribution: str, version: str, tmp: Path) -> Path | None:
        files = wheels.get((distribution, version))
        return None if files is None else _wheel(tmp / f"{distribution}-{version}-py3-none-any.whl", files)

    monkeypatch.setattr(ArchiveTrees, "_download", download)
    cache = tmp_path / "cache"
    source.fetch(cache, versions=["1.0", "2.0", "3.0"], log=lambda line: None)
    assert source.releases(cache) == ["1.0", "2.0"]
    assert sorted(path for path, _ in source.files(cache, "2.0")) == [
        "demo/a.py",
        "demo/csrc/api.cpp",
        "demo/ops.py",
    ]
    assert source.unread(cache) == [
        "demo 3.0: no wheel or sdist could be read",
        "demo 2.0: demo/_rust.abi3.so is compiled code, not read",
    ]
    catalogue = build.build([source], cache)
    entries = {(e["file"], e["template"]): e for e in catalogue["messages"]}
    assert entries[("demo/a.py", "demo needs the kernels package installed")]["releases"] == [["1.0", "1.0"]]
    assert entries[("demo/ops.py", "demo needs the kernels package installed")]["releases"] == [
        ["2.0", "2.0"]
    ]
    check = entries[("demo/csrc/api.cpp", "demo kernel built without this GPU")]
    assert (check["kind"], check["function"], check["guard"]) == ("TORCH_CHECK", "f", "!(ok)")
    out = tmp_path / "out.zip"
    build.write(catalogue, out)
    assert read(out).packages["demo"]["releases_read"] == ["1.0", "2.0"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_flash_attn_takes_hopper_cpp_from_the_releases_tag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    (work / "hopper" / "instantiations").mkdir(parents=True)
    (work / "hopper" / "flash_api.cpp").write_text(
        'void mha_fwd() { TORCH_CHECK(false, "FA3 check read from the tag"); }'
    )
    (work / "hopper" / "flash_attn_interface.py").write_text("# from the tag")
    (work / "hopper" / "test_flash_attn.py").write_text("assert False, 'a test'")
    (work / "hopper" / "instantiations" / "flash_fwd_hdim64.cu").write_text("")
    (work / "hopper" / "flash_fwd_hdim64_fp16_sm90.cu").write_text("")

    def git(*args: str, cwd: Path = work) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "r")
    git("tag", "v2.8.3")
    mirror = tmp_path / "mirror.git"
    git("clone", "--mirror", "-q", str(work), str(mirror), cwd=tmp_path)
    monkeypatch.setenv("FLASH_ATTENTION_GIT", str(mirror))

    source = FlashAttnTrees("flash-attn", "flash_attn", FLASH_ATTN.include, exclude=FLASH_ATTN.exclude)
    dest = tmp_path / "cache" / "flash-attn" / "2.8.3"
    (dest / "hopper").mkdir(parents=True)
    (dest / "hopper" / "flash_attn_interface.py").write_text("# from the sdist")
    notes: list[str] = []
    taken = source.supplement("2.8.3", dest, notes)
    assert taken == ["git v2.8.3: hopper/flash_api.cpp"]
    assert (dest / "hopper" / "flash_attn_interface.py").read_text() == "# from the sdist"
    assert not (dest / "hopper" / "test_flash_attn.py").exists()
    assert notes == []
    assert source.supplement("2.8.4", tmp_path / "cache" / "flash-attn" / "2.8.4", notes) == []
    assert notes == ["flash-attn 2.8.4: no tag v2.8.4 in the git mirror, hopper/ C++ (FA3) not read"]


def test_downloads_try_every_linux_wheel_tag_then_the_sdist_without_build_isolation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], dict[str, str] | None]] = []

    def run(command: list[str], capture_output: bool, env: dict[str, str] | None = None) -> object:
        calls.append((command, env))
        return subprocess.CompletedProcess(command, 1)

    monkeypatch.setattr(subprocess, "run", run)
    assert TRITON._download("triton", "3.9.0", tmp_path) is None
    first = calls[0][0]
    assert first[first.index("triton==3.9.0") + 1 :] == [
        "--only-binary=:all:",
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_27_x86_64",
        "--platform",
        "manylinux_2_28_x86_64",
        "--python-version",
        "3.11",
    ]
    assert [c[0][-1] for c in calls] == ["3.11", "3.10", "3.12", "--no-build-isolation"]
    calls.clear()
    assert FLASH_ATTN._download("flash-attn", "2.8.3", tmp_path) is None
    assert len(calls) == 1  # no wheels on the registry: the sdist at once
    command, env = calls[0]
    assert command[-3:] == ["flash-attn==2.8.3", "--no-binary=:all:", "--no-build-isolation"]
    assert env is not None and env["FLASH_ATTENTION_SKIP_CUDA_BUILD"] == "TRUE"


def test_unread_lists_the_notes_of_kept_releases_only(tmp_path: Path) -> None:
    folder = tmp_path / "xformers"
    for version in ("0.0.30", "0.0.31"):
        (folder / version).mkdir(parents=True)
        (folder / version / DONE).write_text("")
    (folder / NOTES).mkdir()
    (folder / NOTES / "0.0.31.txt").write_text("xformers 0.0.31: xformers/_C.so is compiled code, not read\n")
    (folder / NOTES / "0.0.9.txt").write_text("from a release below the floor\n")
    (folder / "failed.txt").write_text("0.0.32\n")
    assert XFORMERS.unread(tmp_path) == [
        "xformers 0.0.32: no wheel or sdist could be read",
        "xformers 0.0.31: xformers/_C.so is compiled code, not read",
    ]
