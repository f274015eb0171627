"""The message sources of torch (Python, and the compiled checks read against the binaries'
strings), vLLM, SGLang and diffusers, on recorded inputs (tests/fixtures/messages_engines/, fake
wheels built here). No network."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import urllib.error
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.messages import build
from tools.messages.build import extract_file
from tools.messages.python_source import WITH_INFO, RawMessage
from tools.messages.python_source import extract as extract_python
from tools.messages.sources import SOURCES, torch_cpp
from tools.messages.sources import torch as torch_source
from tools.messages.sources.cached_trees import DONE
from tools.messages.sources.diffusers import DIFFUSERS
from tools.messages.sources.sglang import SGLANG
from tools.messages.sources.torch import CPP, TORCH, printable_strings, public_releases
from tools.messages.sources.torch_cpp import TORCH_CPP, BinaryStrings, attention_strings, carried, library_of
from tools.messages.sources.vllm import VLLM

FIXTURES = Path(__file__).parent / "fixtures" / "messages_engines"
SDP = "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def binary_strings() -> BinaryStrings:
    return BinaryStrings({line for line in fixture("libtorch_strings.txt").split("\n") if len(line) >= 8})


# --- which files count ---------------------------------------------------------------------------


def test_every_engine_source_is_listed_once() -> None:
    names = [getattr(source, "distribution", "") for source in SOURCES]
    for source in (TORCH, TORCH_CPP, VLLM, SGLANG, DIFFUSERS):
        assert sum(s is source for s in SOURCES) == 1
    assert names.count("torch") == 2  # the Python files and the compiled checks


@pytest.mark.parametrize(
    ("member", "kept"),
    [
        ("torch/nn/functional.py", True),
        ("torch/nn/attention/flex_attention.py", True),
        ("torch/nn/attention/_utils.py", True),
        ("torch/nn/attention/experimental/_paged_attention.py", True),
        ("torch/_higher_order_ops/flex_attention.py", True),
        ("torch/_inductor/kernel/flex_attention.py", True),  # to 2.7
        ("torch/_inductor/kernel/flex_decoding.py", True),
        ("torch/_inductor/kernel/flex/flex_attention.py", True),  # 2.8+
        ("torch/_inductor/kernel/mm.py", False),
        ("torch/_inductor/kernel/flex_gemm/runtime.py", False),  # a GEMM, not attention
        ("torch/_inductor/kernel/flex/flex_flash_attention.py", True),
        ("torch/utils/cpp_extension.py", True),
        ("torch/cuda/__init__.py", True),
        ("torch/cuda/memory.py", False),
        ("torch/backends/cuda/__init__.py", True),
        ("torch/_dynamo/exc.py", True),
        ("torch/_dynamo/symbolic_convert.py", False),
        ("torch/lib/libtorch_cuda.so", False),
        ("torch/include/ATen/native/transformers/sdp_utils_cpp.h", False),  # torch_cpp's, not a .py
        ("torchgen/model.py", False),
    ],
)
def test_torch_keeps_its_attention_files(member: str, kept: bool) -> None:
    assert (TORCH.keeps(member) == member) is kept


@pytest.mark.parametrize(
    ("source", "member", "kept"),
    [
        (VLLM, "vllm/attention/backends/xformers.py", True),
        (VLLM, "vllm/attention/selector.py", True),
        (VLLM, "vllm/attention/ops/blocksparse_attention/interface.py", True),
        (VLLM, "vllm/v1/attention/backends/flash_attn.py", True),
        (VLLM, "vllm/v1/attention/backends/mla/flashmla.py", True),
        (VLLM, "vllm/platforms/cuda.py", True),
        (VLLM, "vllm/model_executor/layers/attention/attention.py", True),
        (VLLM, "vllm/vllm_flash_attn/flash_attn_interface.py", True),
        (VLLM, "vllm/model_executor/models/llama.py", False),
        (VLLM, "vllm/_C.abi3.so", False),
        (VLLM, "vllm/platforms/cuda.pyi", False),
        (SGLANG, "sglang/srt/layers/attention/flashinfer_backend.py", True),
        (SGLANG, "sglang/srt/layers/attention_backend.py", True),
        (SGLANG, "sglang/srt/server_args.py", True),
        (SGLANG, "sglang-0.4.0/sglang/srt/model_executor/model_runner.py", True),  # an sdist's
        (SGLANG, "sglang/srt/arg_groups/attention_hook.py", True),
        (SGLANG, "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py", True),
        (SGLANG, "sglang/srt/arg_groups/lora_hook.py", False),
        (SGLANG, "sglang/srt/models/llama.py", False),
        (SGLANG, "sglang/srt/layers/linear.py", False),
        (DIFFUSERS, "diffusers/models/attention_dispatch.py", True),
        (DIFFUSERS, "diffusers/models/attention_processor.py", True),
        (DIFFUSERS, "diffusers/models/unets/unet_2d.py", False),
    ],
)
def test_engines_keep_their_attention_files(source: Any, member: str, kept: bool) -> None:
    assert (source.keeps(member) is not None) is kept


def test_engines_take_the_wheel_tags_their_releases_use() -> None:
    assert "manylinux_2_34_x86_64" in SGLANG.platforms  # sglang 0.5.11 on
    assert {"manylinux_2_28_x86_64", "manylinux_2_31_x86_64", "manylinux2014_x86_64"} <= set(VLLM.platforms)


def test_torch_reads_registry_releases_only() -> None:
    assert public_releases(["2.13.0+cpu", "2.13.0", "2.1.0"]) == ["2.13.0", "2.1.0"]
    assert TORCH.floor == "2.1.0" and "manylinux_2_28_x86_64" in TORCH.platforms


# --- torch's wheel: one download, two trees --------------------------------------------------------


def fake_wheel(path: Path) -> None:
    library = (
        b"\x7fELF\x00\x01" + b"No available kernel. Aborting execution.\x00" + b"_ZN3sdp4fooEv\x00\x02ab\x00"
    )
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("torch/nn/functional.py", "raise ValueError('x')\n")
        wheel.writestr("torch/nn/attention/flex_attention.py", "")
        wheel.writestr("torch/_inductor/kernel/mm.py", "")
        wheel.writestr(
            "torch/version.py",
            "__version__ = '2.5.1+cu124'\ngit_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\n",
        )
        wheel.writestr("torch/lib/libtorch_cuda.so", library)
        wheel.writestr("torch/lib/libc10.so", library)
        wheel.writestr("torch/include/ATen/native/transformers/sdp_utils_cpp.h", "// header\n")
        wheel.writestr("torch/include/ATen/ops/add.h", "// not attention\n")


@pytest.mark.skipif(shutil.which("strings") is None, reason="needs binutils' strings")
def test_torch_fetch_keeps_python_files_strings_headers_and_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def download(command: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(command)
        fake_wheel(Path(command[command.index("-d") + 1]) / "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(torch_source.subprocess, "run", download)
    TORCH.fetch(tmp_path, ["2.5.1", "2.13.0+cpu", "2.0.1"], log=lambda _: None)

    assert len(calls) == 1 and "torch===2.5.1" in calls[0]  # === : never the local 2.13.0+cpu
    assert "manylinux_2_28_x86_64" in calls[0]
    tree = tmp_path / "torch" / "2.5.1"
    kept = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    assert kept == [DONE, "torch/nn/attention/flex_attention.py", "torch/nn/functional.py"]
    assert TORCH.releases(tmp_path) == ["2.5.1"]
    stale = tree / "torch/_inductor/kernel/flex_gemm/runtime.py"  # kept under older patterns
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ValueError('a GEMM')\n")
    assert [path for path, _ in TORCH.files(tmp_path, "2.5.1")] == [
        "torch/nn/attention/flex_attention.py",
        "torch/nn/functional.py",
    ]
    binaries = tmp_path / CPP / "2.5.1"
    assert (binaries / "git_version").read_text().strip() == "a8d6afb511a69687bbb2b7e88a3cf67917e1697e"
    assert (binaries / "include/ATen/native/transformers/sdp_utils_cpp.h").exists()
    assert not (binaries / "include/ATen/ops/add.h").exists()
    assert not (binaries / "libc10.so.strings.gz").exists()
    with gzip.open(binaries / "libtorch_cuda.so.strings.gz", "rt") as handle:
        lines = handle.read().splitlines()
    assert "No available kernel. Aborting execution." in lines
    assert not any(line.startswith("_Z") for line in lines)  # mangled symbols dropped
    assert TORCH_CPP.releases(tmp_path) == ["2.5.1"]


@pytest.mark.skipif(shutil.which("strings") is None, reason="needs binutils' strings")
def test_printable_strings_drop_mangled_symbols(tmp_path: Path) -> None:
    binary = tmp_path / "lib.so"
    binary.write_bytes(b"\x00\x01Flash attention has been runtime disabled.\x00_ZN2at6TensorE\x00\x03abc\x00")
    assert printable_strings(binary, tmp_path / "out.gz") == 1
    with gzip.open(tmp_path / "out.gz", "rt") as handle:
        assert handle.read() == "Flash attention has been runtime disabled.\n"


# --- the compiled checks: a pooled message counts where the release's binary holds it -------------


@pytest.mark.parametrize(
    ("template", "held"),
    [
        ("No available kernel.  Aborting execution.", True),  # one string
        ("No available kernel. Aborting execution.", False),  # the later wording: one space
        (  # c10::str's literal arguments are strings of their own
            "Flash attention requires q,k,v to have the same last dimension and to be a multiple of 8 "
            "and less than or equal to 128. Got Query.size(-1): {}, Key.size(-1): {}, Value.size(-1): {} "
            "instead.",
            True,
        ),
        # ". " is too short for strings -n 4: a short run before a string is allowed
        (
            "Mem efficient attention requires last dimension of inputs to be divisible by {}. "
            "Got Query.size(-1): {}",
            True,
        ),
        # an INTERNAL_ASSERT's condition and file are one literal
        ("delta.size(0) == B INTERNAL ASSERT FAILED at {}:{}, please report a bug to PyTorch. ", True),
        (
            "Flash attention only supports gpu architectures in the range [sm80, sm90]. "
            "Attempting to run on a sm {}.{} gpu.",
            False,
        ),
        ("Fused kernels do not support ragged num_head_dims, {}has a ragged num_heads.", False),
        # the first string right after other bytes (no NUL between): the end of a longer line
        ("do not support ragged num_head_dims, {}", True),
        ("support non-null attn_mask. Got Query.size(-1): {}", True),
        # ... but a string's head and another's tail never make one of two strings
        ("No available kernel. Attempting to run on a sm {}", False),
        ("No a ble rnel", False),  # short noise never makes a message
        ("{}", False),  # nothing to look for
    ],
)
def test_binary_strings_hold_a_template(template: str, held: bool) -> None:
    assert carried(template, binary_strings()) is held


def test_attention_strings_are_the_binary_lines_that_read_as_attention_messages() -> None:
    found = attention_strings(binary_strings())
    assert "Flash attention has been runtime disabled." in found
    assert "No available kernel.  Aborting execution." not in found  # no attention word in it
    assert not any(line.startswith(("../", "_Z")) for line in found)
    schema = "_efficient_attention_forward(Tensor query, Tensor key, Tensor value) -> Tensor"
    noise = "Flash attention kernel not used because:G"  # the string and the byte that follows it
    assert attention_strings(BinaryStrings({schema, noise, "Flash attention kernel not used because:"})) == [
        "Flash attention kernel not used because:"
    ]


def torch_cpp_cache(tmp_path: Path) -> Path:
    release = tmp_path / CPP / "2.1.0"
    release.mkdir(parents=True)
    (release / DONE).write_text("torch==2.1.0\n")
    with gzip.open(release / "libtorch_cuda.so.strings.gz", "wt") as handle:
        handle.write(fixture("libtorch_strings.txt"))
    header = release / "include/ATen/native/transformers/sdp_utils_cpp.h"
    header.parent.mkdir(parents=True)
    header.write_text(fixture("sdp_utils_cpp.h"))
    for label, name in (("2026-main", "sdp_utils_new.cpp"), ("2024-older", "sdp_utils_old.cpp")):
        pooled = tmp_path / CPP / "pool" / label / SDP
        pooled.parent.mkdir(parents=True)
        pooled.write_text(fixture(name))
        (tmp_path / CPP / "pool" / label / "SOURCE").write_text(f"{label}: written for the test\n")
    return tmp_path


def test_torch_cpp_keeps_what_the_binary_holds_and_the_wheels_own_headers(tmp_path: Path) -> None:
    cache = torch_cpp_cache(tmp_path)
    assert TORCH_CPP.releases(cache) == ["2.1.0"]  # not "pool"
    assert TORCH_CPP.pool_labels(cache) == ["2026-main", "2024-older"]
    found = {m.template: m for m in TORCH_CPP.messages(cache, "2.1.0")}
    old = found["No available kernel.  Aborting execution."]
    assert (old.file, old.function, old.kind, old.guard) == (
        SDP,
        "select_sdp_backend",
        "TORCH_CHECK",
        "print_debug [print_debug = true]",
    )
    assert "No available kernel. Aborting execution." not in found  # main's wording: not in 2.1's binary
    assert any(
        t.startswith("Flash attention only supports gpu architectures in the range [sm75, sm90]")
        for t in found
    )
    assert not any("[sm80, sm121]" in t for t in found)
    assert not any("AMD GPU" in t for t in found)  # ROCm-only: not in a CUDA build
    head_dim = next(m for t, m in found.items() if t.startswith("Flash attention requires q,k,v"))
    assert head_dim.function == "check_head_dim_size" and head_dim.guard.startswith(
        "!(query_size_last % 8 == 0"
    )
    # the header the wheel ships is the release's own: its checks count without the binary
    own = found["Flash Attention does not support non-null attn_mask."]
    assert own.file == "aten/src/ATen/native/transformers/sdp_utils_cpp.h"
    assert (
        found["Memory efficient kernel not used because:"].file == SDP
    )  # one entry, not one per pooled copy


def test_torch_cpp_takes_the_binarys_attention_strings_no_source_holds(tmp_path: Path) -> None:
    cache = torch_cpp_cache(tmp_path)
    found = {m.template: m for m in TORCH_CPP.messages(cache, "2.1.0")}
    mask = found["Both fused kernels do not support non-null attn_mask."]  # 2.1's wording, in no pooled file
    assert (mask.file, mask.function, mask.kind, mask.guard) == (
        "torch/lib/libtorch_cuda.so",
        "",
        "binary string",
        "",
    )
    assert "Flash attention kernel not used because:" not in TORCH_CPP.uncovered(
        cache, "2.1.0"
    )  # a source has it
    assert "Both fused kernels do not support non-null attn_mask." in TORCH_CPP.uncovered(cache, "2.1.0")
    unread = TORCH_CPP.unread(cache)
    assert any("could not be downloaded" in line and "torch 2.1.0" in line for line in unread)
    assert any("attention messages read only as strings of libtorch_cuda/cpu.so" in line for line in unread)


def test_a_pooled_message_is_looked_for_in_the_library_that_compiles_its_file(tmp_path: Path) -> None:
    cache = torch_cpp_cache(tmp_path)
    release = tmp_path / CPP / "2.1.0"
    (release / "libtorch_cuda.so.strings.gz").rename(release / "libtorch_cpu.so.strings.gz")
    found = {m.template for m in TORCH_CPP.messages(cache, "2.1.0")}
    assert "No available kernel.  Aborting execution." not in found  # cuda/sdp_utils.cpp: not in libtorch_cpu
    assert "Flash attention has been runtime disabled." in found  # the header: either library
    assert library_of(SDP) == "libtorch_cuda.so"
    assert library_of("aten/src/ATen/native/transformers/sdp_utils_cpp.cpp") == "libtorch_cpu.so"
    assert library_of("aten/src/ATen/native/transformers/attention.cpp") == "libtorch_cpu.so"
    assert library_of("aten/src/ATen/native/cudnn/MHA.cpp") == "libtorch_cuda.so"
    assert library_of("aten/src/ATen/native/transformers/sdp_utils_cpp.h") is None


def test_torch_cpp_prefers_the_releases_own_source(tmp_path: Path) -> None:
    cache = torch_cpp_cache(tmp_path)
    own = tmp_path / CPP / "2.1.0" / "src" / SDP
    own.parent.mkdir(parents=True)
    own.write_text('void select_sdp_backend() { TORCH_CHECK(false, "Only this release says this."); }\n')
    found = {m.template: m for m in TORCH_CPP.messages(cache, "2.1.0")}
    assert "Only this release says this." in found  # exact: kept though the binary lacks it
    assert "No available kernel.  Aborting execution." not in found  # the pool's copy of the file is not read
    paths = [path for path, _ in TORCH_CPP.files(cache, "2.1.0")]
    assert paths.count(SDP) == 1


class _NoWheels:
    def fetch(self, cache: Path, versions: Any = None, log: Any = None) -> None:
        pass


def test_torch_cpp_fetch_reads_each_releases_own_files_where_github_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = torch_cpp_cache(tmp_path)
    (tmp_path / CPP / "2.1.0" / "git_version").write_text("7bcf7da3a268b435777fe87c7794c382f444e86d\n")
    asked: list[str] = []

    class Answer(io.BytesIO):
        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *_: object) -> None:
            pass

    def urlopen(url: str, timeout: float) -> Answer:
        asked.append(url)
        if url.endswith("/cuda/sdp_utils.cpp"):
            return Answer(b'void f() { TORCH_CHECK(false, "The release commit says this."); }')
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)  # type: ignore[arg-type]

    monkeypatch.setattr(torch_cpp, "TORCH", _NoWheels())
    monkeypatch.setattr(torch_cpp.urllib.request, "urlopen", urlopen)
    TORCH_CPP.fetch(cache, log=lambda _: None)
    assert all("/7bcf7da3a268b435777fe87c7794c382f444e86d/" in url for url in asked)
    assert len(asked) == len(torch_cpp.FILES)
    own = tmp_path / CPP / "2.1.0" / "src"
    assert (own / DONE).read_text() == "pytorch/pytorch@7bcf7da3a268b435777fe87c7794c382f444e86d\n"
    assert (own / SDP).exists() and not (own / "aten/src/ATen/native/cudnn/MHA.cpp").exists()


def test_torch_cpp_fetch_stops_when_github_cannot_be_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = torch_cpp_cache(tmp_path)
    for version in ("2.1.0", "2.2.0"):
        (tmp_path / CPP / version).mkdir(exist_ok=True)
        (tmp_path / CPP / version / DONE).write_text("")
        (tmp_path / CPP / version / "git_version").write_text("a" * 40 + "\n")
    asked: list[str] = []

    def urlopen(url: str, timeout: float) -> Any:
        asked.append(url)
        raise urllib.error.URLError("Name or service not known")

    logged: list[str] = []
    monkeypatch.setattr(torch_cpp, "TORCH", _NoWheels())
    monkeypatch.setattr(torch_cpp.urllib.request, "urlopen", urlopen)
    TORCH_CPP.fetch(cache, log=logged.append)
    assert len(asked) == 1 and logged == [
        "torch (C++): GitHub cannot be reached; the releases' own .cpp/.cu files are not read"
    ]
    assert not (tmp_path / CPP / "2.1.0" / "src").exists()


# --- the engines' INFO-level backend choice ---------------------------------------------------------


def test_engines_read_info_logs_with_their_guards() -> None:
    found = {
        m.template: m
        for m in extract_file(fixture("engine_selector.py"), "vllm/attention/selector.py", WITH_INFO)
    }
    turing = found["Cannot use FlashAttention-2 backend for Volta and Turing GPUs."]
    assert turing.kind == "log.info"
    assert turing.function == "which_attn_to_use"
    assert turing.guard == "torch.cuda.get_device_capability()[0] < 8"
    assert found["Cannot use {} backend on CPU."].kind == "log.info"
    assert found["XFormers does not support attention logits soft capping."].kind == "ValueError"
    dtype = "Cannot use FlashAttention-2 backend for dtype other than torch.float16 or torch.bfloat16."
    assert found[dtype].kind == "log.warning"
    plain = {m.template for m in extract_python(fixture("engine_selector.py"), "x.py")}
    assert "Cannot use %s backend on CPU." not in plain
    assert (
        "Cannot use FlashAttention-2 backend for Volta and Turing GPUs." not in plain
    )  # INFO is the engines' own


def test_engine_source_messages_cover_each_file(tmp_path: Path) -> None:
    tree = tmp_path / "vllm" / "0.6.2" / "vllm" / "attention"
    tree.mkdir(parents=True)
    (tree / "selector.py").write_text(fixture("engine_selector.py"))
    (tree.parent.parent / DONE).write_text("vllm==0.6.2\n")
    assert VLLM.releases(tmp_path) == ["0.6.2"]
    templates = {m.template for m in VLLM.messages(tmp_path, "0.6.2")}
    assert "Cannot use FlashAttention-2 backend for Volta and Turing GPUs." in templates


def test_a_logging_calls_percent_fields_are_fields() -> None:
    source = (
        "def f(x, n):\n"
        "    logger.warning('Using %s backend with %d heads (100%%).', x, n)\n"
        "    logger.warning('Literal %s kept when nothing follows')\n"
        "    logger.warning(f'{x} as %s', n)\n"
    )
    found = {m.template for m in extract_python(source, "vllm/platforms/cuda.py")}
    assert found == {
        "Using {} backend with {} heads (100%).",
        "Literal %s kept when nothing follows",
        "{} as {}",
    }


# --- build: a source's own messages, two sources of one distribution --------------------------------


class FakeSource:
    def __init__(self, versions: list[str], found: dict[str, list[RawMessage]], unread: list[str]) -> None:
        self.distribution = "torch"
        self._versions, self._found, self._unread = versions, found, unread

    def fetch(self, cache: Path) -> None:
        pass

    def releases(self, cache: Path) -> list[str]:
        return self._versions

    def files(self, cache: Path, version: str) -> Iterator[tuple[str, str]]:
        yield "torch/x.py", "raise ValueError('never read: messages() is used')\n"

    def messages(self, cache: Path, version: str) -> list[RawMessage]:
        return self._found.get(version, [])

    def unread(self, cache: Path) -> list[str]:
        return self._unread


def test_build_uses_a_sources_messages_and_merges_one_distributions_sources(tmp_path: Path) -> None:
    python = RawMessage(
        "torch/nn/functional.py", "sdpa", "ValueError", "Expected query to be 4-D, got {}", ""
    )
    check = RawMessage(
        SDP, "select_sdp_backend", "TORCH_CHECK", "No available kernel. Aborting execution.", "print_debug"
    )
    catalogue = build.build(
        [
            FakeSource(["2.9.0", "2.10.0"], {"2.9.0": [python], "2.10.0": [python]}, []),
            FakeSource(["2.1.0", "2.10.0"], {"2.10.0": [check]}, ["torch 2.1.0 (C++): a note"]),
        ],
        tmp_path,
    )
    info = catalogue["packages"]["torch"]
    assert info == {
        "releases_read": ["2.1.0", "2.9.0", "2.10.0"],
        "entries": 2,
        "unread": ["torch 2.1.0 (C++): a note"],
    }
    by_template = {entry["template"]: entry for entry in catalogue["messages"]}
    assert by_template["No available kernel. Aborting execution."]["releases"] == [["2.10.0", "2.10.0"]]
    assert "never read: messages() is used" not in by_template
