"""tools/refresh_release_facts.py, offline: recorded registry answers, recorded publish.yml files,
recorded triton toolchain files, the flash-attention and triton mirrors where this machine has
them, and the snapshot shipped in the package.

tests/fixtures/registry/README.md says what was
recorded and how.
"""

from __future__ import annotations

import datetime
import functools
import http.server
import importlib.util
import io
import json
import re
import subprocess
import sys
import threading
import urllib.parse
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REGISTRY = FIXTURES / "registry"
PUBLISH = FIXTURES / "flash-attn-publish"
SNAPSHOT = REPO / "attn_doctor" / "releases" / "snapshot"
MIRROR = Path("/work/.mirror/Dao-AILab+flash-attention/repo")
# Written for the test (not copies): triton's toolchain-version files in their two shapes, with the
# versions the v3.1.0, v3.3.0 and v3.6.0 release branches pin (each also read off the ptxas binary in
# that release's wheel).
TOOLCHAIN_V310 = "12.4.99\n"
TOOLCHAIN_V330 = '{"ptxas": "12.4.99", "ptxas-blackwell": "12.8.61", "cuobjdump": "12.8.55"}\n'
TOOLCHAIN_V360 = '{"ptxas": "12.8.93", "ptxas-blackwell": "12.9.86", "cuobjdump": "12.8.55"}\n'
TRITON_MIRROR = Path("/work/.mirror/triton-lang+triton/repo")  # triton-lang/triton, with its tags
OPENAI_TRITON = Path("/work/.mirror/openai+triton/repo")  # an older copy: tags v2.0.0 and v2.1.0
TRITON_FORK = Path("/work/.mirror/woct0rdho+triton-windows/repo")  # upstream's release/3.x.x branches
TOOLCHAIN_FILES = {
    "cmake/nvidia-toolchain-version.json",
    "cmake/nvidia-toolchain-version.txt",
    "python/setup.py",
}
INDEX = "https://index.invalid/simple"  # the recorded answers' files live under files.index.invalid

LINUX_X86_311 = {"platform_system": "Linux", "platform_machine": "x86_64", "python_version": "3.11"}
MAC_ARM_311 = {"platform_system": "Darwin", "platform_machine": "arm64", "python_version": "3.11"}


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "refresh_release_facts", REPO / "tools" / "refresh_release_facts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gen = _load()


class RecordedIndex:
    """URL -> recorded bytes; anything not recorded is a 404, as the index answers."""

    def __init__(self) -> None:
        self.requested: list[tuple[str, dict[str, str]]] = []

    def __call__(self, url: str, headers: Mapping[str, str]) -> bytes:
        self.requested.append((url, dict(headers)))
        parts = urllib.parse.urlsplit(url)
        if url.startswith(INDEX + "/") and parts.path.endswith("/"):
            assert headers.get("Accept") == "application/vnd.pypi.simple.v1+json"
            path = REGISTRY / "simple" / f"{parts.path.rstrip('/').rsplit('/', 1)[1]}.json"
        elif parts.netloc == "files.index.invalid" and url.endswith(".metadata") and "Range" not in headers:
            path = REGISTRY / "metadata" / url.rsplit("/", 1)[1]
        else:
            path = None
        if path is None or not path.is_file():
            raise gen.FetchError(url, "HTTP 404", 404)
        return path.read_bytes()


class RecordedTags:
    """The three recorded publish.yml files as tags (and a fa4 tag that must be ignored)."""

    def tags(self) -> list[str]:
        return ["v2.8.3", "fa4-v4.0.0.beta1", "v2.6.3", "v2.7.0"]

    def read(self, tag: str, path: str) -> str | None:
        if path == ".github/workflows/publish.yml":
            return (PUBLISH / f"publish-{tag}.yml").read_text()
        if path == "setup.py" and tag == "v2.8.3":
            return SETUP_V283_EXCERPT
        return None


# Written for the test (not a copy): the shape of flash-attention's setup.py gencode block, with the
# architectures and CUDA thresholds its v2.8.3 tag sets (sm_80; sm_90 from CUDA 11.8; sm_100 and
# sm_120 from CUDA 12.8).
SETUP_V283_EXCERPT = """
def cuda_archs():
    return os.environ.get("FLASH_ATTN_CUDA_ARCHS", "80;90;100;120").split(";")

flags = []
if "80" in cuda_archs():
    flags += ["-gencode", "arch=compute_80,code=sm_80"]
if bare_metal_version >= Version("11.8") and "90" in cuda_archs():
    flags += ["-gencode", "arch=compute_90,code=sm_90"]
if bare_metal_version >= Version("12.8") and "100" in cuda_archs():
    flags += ["-gencode", "arch=compute_100,code=sm_100"]
if bare_metal_version >= Version("12.8") and "120" in cuda_archs():
    flags += ["-gencode", "arch=compute_120,code=sm_120"]
"""


# setup.py of triton 2.x downloads ptxas in three shapes. These snippets were written for the test
# in those shapes (they are not copies): the version only in the cuda-nvcc file name of the URL
# (v2.0.0), a `version = "..."` in a ptxas function (v2.1.0), and keyword arguments of a generic
# download call, where the ptxas call is not the first (v2.2.0 to v2.3.1).
SETUP_PTXAS_URL_ONLY = """
def download_and_copy_ptxas():
    base_dir = os.path.dirname(__file__)
    src_path = "bin/ptxas"
    url = "https://conda.example.invalid/label/cuda-12.0.0/linux-64/cuda-nvcc-12.0.76-0.tar.bz2"
    dst_path = os.path.join(base_dir, "triton", "third_party", "cuda", src_path)
    if not os.path.exists(dst_path):
        fetch(url, dst_path)  # version="99.9.9" in a comment is not read


download_and_copy_ptxas()
"""

SETUP_PTXAS_LITERAL = """
def download_and_copy_ptxas():
    src_path = "bin/ptxas"
    version = "12.1.105"
    url = f"https://conda.example.invalid/label/cuda-12.1.1/linux-64/cuda-nvcc-{version}-0.tar.bz2"
    curr_version = read_version(src_path)
"""

SETUP_DOWNLOAD_CALLS = """
download_and_copy(
    src_path="bin/cuobjdump",
    variable="TRITON_CUOBJDUMP_PATH",
    version="12.2.140",
    url_func=lambda arch, version: f"https://example.invalid/cuda-cuobjdump-{version}-0.tar.bz2",
)
download_and_copy(
    src_path="bin/ptxas",
    variable="TRITON_PTXAS_PATH",
    version="12.3.52",
    url_func=lambda arch, version: f"https://example.invalid/cuda-nvcc/{version}/cuda-nvcc-{version}-0.tar.bz2",
)
"""

SETUP_FROM_CMAKE_FILE = """
download_and_copy(
    name="ptxas",
    src_path="bin/ptxas",
    variable="TRITON_PTXAS_PATH",
    version=NVIDIA_TOOLCHAIN_VERSION["ptxas"],
    url_func=lambda system, arch, version: f"https://example.invalid/cuda_nvcc-{system}-{arch}-{version}.tar.xz",
)
"""


class RecordedTriton:
    """The recorded toolchain files and a written 2.x setup.py as tags, and tags to leave out."""

    FILES = {
        ("v3.1.0", "cmake/nvidia-toolchain-version.txt"): TOOLCHAIN_V310,
        ("v3.3.0", "cmake/nvidia-toolchain-version.json"): TOOLCHAIN_V330,
        ("v3.6.0", "cmake/nvidia-toolchain-version.json"): TOOLCHAIN_V360,
    }

    def tags(self) -> list[str]:
        return ["v3.6.0", "v3.3.0", "v2.1.0", "v3.1.0", "v3.9.0", "v1.1.2", "v3.4.0rc1", "legacy-backend"]

    def read(self, tag: str, path: str) -> str | None:
        if (tag, path) in self.FILES:
            return self.FILES[tag, path]
        if (tag, path) == ("v2.1.0", "python/setup.py"):
            return SETUP_PTXAS_LITERAL
        if tag == "v3.9.0" and path == "setup.py":
            return SETUP_FROM_CMAKE_FILE  # but no cmake file: no version anywhere
        return None

    def commit(self, tag: str) -> str | None:
        return f"{sum(map(ord, tag)):040x}"


def pins(requires: list[str], name: str, environment: Mapping[str, str]) -> list[str]:
    """The specifiers of `name` that apply in `environment` (no extra)."""
    out = []
    for text in requires:
        requirement = Requirement(text)
        if requirement.name != name:
            continue
        env = {**environment, "extra": ""}
        if requirement.marker is None or requirement.marker.evaluate(env):
            out.append(str(requirement.specifier))
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RecordedIndex, Any]:
    out = tmp_path_factory.mktemp("snapshot")
    index = RecordedIndex()
    specs = [
        p for p in gen.PACKAGES if p.name in {"torch", "triton", "xformers", "transformers", "flash-attn"}
    ]
    reports, problems = gen.generate(
        out, specs, index, INDEX, RecordedTags(), "2026-01-02", workers=4, triton_tags=RecordedTriton()
    )
    return out, index, (reports, problems)


def registry(out: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "registry" / f"{name}.json").read_text())
    return data


# -- registry ---------------------------------------------------------------------------------


def test_torch_pins_triton_on_linux_x86_64(generated: tuple[Path, RecordedIndex, Any]) -> None:
    out, _index, _ = generated
    torch = registry(out, "torch")["releases"]
    assert list(torch) == ["2.5.1", "2.7.0"]
    release = torch["2.5.1"]
    assert release["metadata_from"] == "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl"
    assert release["metadata_via"] == "pep658"
    assert release["uploaded"] == "2024-10-29"
    assert release["yanked"] is False
    assert release["requires_python"] == ">=3.8.0"
    expected = 'triton==3.1.0; platform_system == "Linux" and platform_machine == "x86_64"'
    assert expected + ' and python_version < "3.13"' in release["requires_dist"]
    assert pins(release["requires_dist"], "triton", LINUX_X86_311) == ["==3.1.0"]
    assert pins(release["requires_dist"], "triton", MAC_ARM_311) == []
    assert pins(release["requires_dist"], "nvidia-cudnn-cu12", LINUX_X86_311) == ["==9.1.0.70"]
    newer = torch["2.7.0"]
    assert newer["metadata_from"] == "torch-2.7.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert pins(newer["requires_dist"], "triton", LINUX_X86_311) == ["==3.3.0"]
    assert pins(newer["requires_dist"], "nvidia-cudnn-cu12", LINUX_X86_311) == ["==9.5.1.17"]


def test_xformers_pins_the_exact_torch(generated: tuple[Path, RecordedIndex, Any]) -> None:
    out, _index, _ = generated
    xformers = registry(out, "xformers")["releases"]
    assert pins(xformers["0.0.29.post3"]["requires_dist"], "torch", LINUX_X86_311) == ["==2.6.0"]
    assert pins(xformers["0.0.30"]["requires_dist"], "torch", LINUX_X86_311) == ["==2.7.0"]
    assert xformers["0.0.30"]["metadata_from"] == "xformers-0.0.30-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert xformers["0.0.29.post3"]["uploaded"] == "2025-02-10"


def test_failed_metadata_is_kept_with_its_reason(generated: tuple[Path, RecordedIndex, Any]) -> None:
    out, index, (reports, _problems) = generated
    triton = registry(out, "triton")["releases"]
    assert list(triton) == ["0.4.1", "2.0.0", "3.1.0"]
    assert pins(triton["3.1.0"]["requires_dist"], "filelock", LINUX_X86_311) == [""]
    # 2.0.0's metadata was not recorded: 404 for the .metadata file, then 404 for the wheel itself
    lost = triton["2.0.0"]
    assert lost["requires_dist"] is None
    assert (
        lost["metadata_from"] == "triton-2.0.0-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    )
    assert "HTTP 404" in lost["metadata_error"]
    assert lost["requires_python"] is None  # the index's value for that file, as recorded
    assert any("Range" in headers for url, headers in index.requested if "triton-2.0.0-1-cp311" in url)
    # the real 0.4.1 wheels carry metadata that says 0.4.0: recorded as such, not trusted
    assert triton["0.4.1"]["requires_dist"] is None
    assert "says version '0.4.0'" in triton["0.4.1"]["metadata_error"]
    report = next(r for r in reports if r.name == "triton")
    assert set(report.metadata_errors) == {"0.4.1", "2.0.0"}


def test_stack_packages_keep_only_stack_requirements(generated: tuple[Path, RecordedIndex, Any]) -> None:
    out, _index, _ = generated
    content = registry(out, "transformers")
    assert content["requires_dist_kept"] == ["accelerate", "flash-attn", "torch", "transformers", "triton"]
    requires = content["releases"]["4.46.0"]["requires_dist"]
    names = {Requirement(r).name for r in requires}
    assert names <= set(content["requires_dist_kept"]) and {"torch", "accelerate"} <= names
    assert 'accelerate>=0.26.0; extra == "torch"' in requires
    assert "filelock" not in names and "tokenizers" not in names
    assert content["releases"]["4.46.0"]["yanked"] is True  # really yanked, with this reason:
    assert content["releases"]["4.46.0"]["yanked_reason"].startswith(
        "This version unfortunately does not work"
    )
    assert len(requires) == len(set(requires))
    raw = (REGISTRY / "metadata" / "transformers-4.46.0-py3-none-any.whl.metadata").read_text()
    assert raw.count("Requires-Dist:") > 100 > len(requires)


def test_index_only_package(generated: tuple[Path, RecordedIndex, Any]) -> None:
    out, index, _ = generated
    content = registry(out, "flash-attn")
    assert content["metadata"] == "none"
    assert content["releases"] == {
        "2.6.3": {"files": ["sdist"], "requires_python": ">=3.8", "uploaded": "2024-07-25", "yanked": False},
        "2.7.0.post2": {
            "files": ["sdist"],
            "requires_python": ">=3.8",
            "uploaded": "2024-11-13",
            "yanked": False,
        },
    }
    assert not [url for url, _h in index.requested if "flash_attn" in url]


def test_only_the_given_index_is_asked(generated: tuple[Path, RecordedIndex, Any]) -> None:
    _out, index, _ = generated
    hosts = {urllib.parse.urlsplit(url).netloc for url, _headers in index.requested}
    assert hosts == {"index.invalid", "files.index.invalid"}
    pages = [url for url, _h in index.requested if url.endswith("/")]
    assert sorted(pages) == sorted(
        f"{INDEX}/{n}/" for n in ("torch", "triton", "xformers", "transformers", "flash-attn")
    )


def test_snapshot_files_and_determinism(generated: tuple[Path, RecordedIndex, Any], tmp_path: Path) -> None:
    out, _index, (_reports, problems) = generated
    meta = json.loads((out / "meta.json").read_text())
    assert meta["schema"] == "attn-doctor/release-facts" and meta["schema_version"] == 1
    assert meta["generated"] == "2026-01-02"
    assert meta["packages"]["torch"] == {"newest": "2.7.0", "releases": 2, "without_requires_dist": 0}
    assert meta["packages"]["triton"]["without_requires_dist"] == 2
    assert meta["flash_attention_tags"] == 3
    assert meta["triton_ptxas_releases"] == 4  # 2.1.0, 3.1.0, 3.3.0, 3.6.0; not 3.9.0
    assert sorted(p.name for p in (out / "registry").iterdir()) == [
        "flash-attn.json",
        "torch.json",
        "transformers.json",
        "triton.json",
        "xformers.json",
    ]
    # tags and index releases are compared: v2.7.0 never reached the index (2.7.0.post2 did)
    assert "tag v2.7.0 has no release on the index" in problems
    # a second run writes the same bytes
    again = tmp_path / "again"
    specs = [
        p for p in gen.PACKAGES if p.name in {"torch", "triton", "xformers", "transformers", "flash-attn"}
    ]
    gen.generate(
        again,
        specs,
        RecordedIndex(),
        INDEX,
        RecordedTags(),
        "2026-01-02",
        workers=1,
        triton_tags=RecordedTriton(),
    )
    assert (again / "triton-ptxas.json").is_file()
    for path in sorted(out.rglob("*.json")):
        assert (again / path.relative_to(out)).read_bytes() == path.read_bytes(), path.name


def test_failed_index_page_writes_nothing(tmp_path: Path) -> None:
    specs = [p for p in gen.PACKAGES if p.name in {"torch", "peft"}]  # peft was not recorded
    with pytest.raises(gen.FetchError, match="HTTP 404"):
        gen.generate(tmp_path / "out", specs, RecordedIndex(), INDEX, RecordedTags(), "2026-01-02")
    assert not (tmp_path / "out").exists()


def _entry(filename: str, yanked: bool = False) -> Any:
    raw = {"filename": filename, "url": f"https://files.index.invalid/{filename}", "yanked": yanked}
    return gen.parse_index_file(raw, INDEX + "/x/", filename.split("-")[0])


@pytest.mark.parametrize(
    ("filenames", "chosen"),
    [
        (
            [
                "torch-2.5.1-cp310-cp310-manylinux1_x86_64.whl",
                "torch-2.5.1-cp311-cp311-manylinux2014_aarch64.whl",
                "torch-2.5.1-cp311-cp311-win_amd64.whl",
                "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl",
                "torch-2.5.1-cp312-cp312-manylinux1_x86_64.whl",
            ],
            "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl",
        ),
        (
            [
                "torch-2.5.1-cp310-cp310-manylinux1_x86_64.whl",
                "torch-2.5.1-cp312-cp312-manylinux1_x86_64.whl",
            ],
            "torch-2.5.1-cp312-cp312-manylinux1_x86_64.whl",
        ),
        (
            [
                "torch-1.0.0-cp27-cp27m-manylinux1_x86_64.whl",
                "torch-1.0.0-cp37-cp37m-manylinux1_x86_64.whl",
                "torch-1.0.0-cp36-cp36m-manylinux1_x86_64.whl",
            ],
            "torch-1.0.0-cp37-cp37m-manylinux1_x86_64.whl",
        ),
        (
            ["x-1.0-cp39-cp39-manylinux_2_28_x86_64.whl", "x-1.0-cp313-cp313-manylinux_2_28_x86_64.whl"],
            "x-1.0-cp313-cp313-manylinux_2_28_x86_64.whl",
        ),
        (
            [
                "peft-0.5.0-py3-none-any.whl",
                "peft-0.5.0.tar.gz",
                "peft-0.5.0-cp311-cp311-macosx_11_0_arm64.whl",
            ],
            "peft-0.5.0-py3-none-any.whl",
        ),
        (
            ["x-1.0-cp311-cp311-win_amd64.whl", "x-1.0.tar.gz", "x-1.0-cp311-cp311-musllinux_1_1_x86_64.whl"],
            None,
        ),
    ],
)
def test_wheel_choice(filenames: list[str], chosen: str | None) -> None:
    files = [_entry(name) for name in filenames]
    wheel = gen.pick_wheel(files)
    assert (wheel.filename if wheel else None) == chosen


def test_yanked_wheels_are_the_last_choice() -> None:
    files = [
        _entry("x-1.0-cp311-cp311-manylinux1_x86_64.whl", yanked=True),
        _entry("x-1.0-cp310-cp310-manylinux1_x86_64.whl"),
    ]
    assert gen.pick_wheel(files).filename == "x-1.0-cp310-cp310-manylinux1_x86_64.whl"
    assert gen.pick_wheel(files[:1]).filename == "x-1.0-cp311-cp311-manylinux1_x86_64.whl"


def test_final_and_post_releases_only() -> None:
    kept = [
        v
        for v in ("2.5.1", "2.6.0rc1", "2.6.0.dev20240101", "0.0.29.post3", "2.5.1+cu121", "1.0a1")
        if gen.kept_version(Version(v))
    ]
    assert kept == ["2.5.1", "0.0.29.post3"]


def test_index_url_comes_from_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.invalid/simple/")
    assert gen.pip_index_url() == "https://mirror.invalid/simple/"
    monkeypatch.delenv("PIP_INDEX_URL")

    class Done:
        def __init__(self, code: int, out: str) -> None:
            self.returncode, self.stdout = code, out

    monkeypatch.setattr(gen.subprocess, "run", lambda *a, **k: Done(0, "https://config.invalid/simple\n"))
    assert gen.pip_index_url() == "https://config.invalid/simple"
    monkeypatch.setattr(gen.subprocess, "run", lambda *a, **k: Done(1, ""))
    from pip._internal.models.index import PyPI

    assert gen.pip_index_url() == PyPI.simple_url


# -- metadata read from the wheel through range requests --------------------------------------


def _wheel_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("demo/__init__.py", "")
        wheel.writestr("demo/big.bin", bytes(range(256)) * 4096, compress_type=zipfile.ZIP_STORED)  # 1 MiB
        wheel.writestr(
            "demo-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Python: >=3.9\n"
            "Requires-Dist: torch (==2.6.0)\nRequires-Dist: numpy\n\nLong description\n",
        )
        wheel.writestr("demo-1.0.dist-info/RECORD", "")
    return buffer.getvalue()


def test_metadata_from_the_wheel_when_the_index_has_none() -> None:
    blob = _wheel_bytes()
    ranges: list[str] = []

    def fetch(url: str, headers: Mapping[str, str]) -> bytes:
        if "Range" not in headers:
            raise gen.FetchError(url, "HTTP 404", 404)
        ranges.append(headers["Range"])
        start, stop = map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", headers["Range"]).groups())  # type: ignore[union-attr]
        return blob[start : stop + 1]

    raw = {
        "filename": "demo-1.0-py3-none-any.whl",
        "url": "https://files.index.invalid/demo-1.0-py3-none-any.whl",
        "size": len(blob),
        "core-metadata": False,
    }
    wheel = gen.parse_index_file(raw, INDEX + "/demo/", "demo")
    result = gen.fetch_metadata(fetch, gen.PackageSpec("demo"), wheel)
    assert result.error is None and result.via == "wheel"
    assert result.requires_dist == ["torch==2.6.0", "numpy"]
    assert result.requires_python == ">=3.9"
    fetched = sum(int(b) - int(a) + 1 for a, b in (r[6:].split("-") for r in ranges))
    assert fetched < len(blob) / 4  # the tail and the directory, not the 1 MiB payload


@pytest.fixture
def plain_server(tmp_path: Path) -> Iterator[str]:
    """A loopback HTTP server that ignores Range (Python's SimpleHTTPRequestHandler does)."""
    (tmp_path / "big.whl").write_bytes(b"x" * 300_000)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fetcher_refuses_a_server_that_ignores_range(plain_server: str) -> None:
    fetch = gen.UrlFetcher(timeout=10, retries=0)
    assert len(fetch(f"{plain_server}/big.whl", {})) == 300_000
    with pytest.raises(gen.FetchError, match="ignored the Range header"):
        fetch(f"{plain_server}/big.whl", {"Range": "bytes=0-99"})
    with pytest.raises(gen.FetchError) as error:
        fetch(f"{plain_server}/missing.whl.metadata", {})
    assert error.value.status == 404


# -- flash-attention: publish.yml and setup.py ------------------------------------------------


def wheels_of(tag: str) -> list[dict[str, Any]]:
    _job, _os, wheels = gen.wheels_from_workflow((PUBLISH / f"publish-{tag}.yml").read_text())
    return list(wheels)


def test_publish_v2_6_3() -> None:
    wheels = wheels_of("v2.6.3")
    assert {w["torch"] for w in wheels} == {"2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.0"}
    assert {w["cuda"] for w in wheels} == {"11.8.0", "12.3.2"}
    assert {w["python"] for w in wheels} == {"3.8", "3.9", "3.10", "3.11", "3.12"}
    assert {w["cxx11_abi"] for w in wheels} == {True, False}
    assert len(wheels) == 84  # 100, less 2.0.1 and 2.1.2 on 3.12, less 2.0.1 on CUDA 12
    assert {"torch": "2.4.0", "cuda": "12.3.2", "python": "3.12", "cxx11_abi": True} in wheels
    assert not [w for w in wheels if w["torch"] == "2.0.1" and w["cuda"] == "12.3.2"]
    assert not [w for w in wheels if w["torch"].startswith("2.5")]


def test_publish_v2_7_0() -> None:
    wheels = wheels_of("v2.7.0")
    assert {w["torch"] for w in wheels} == {"2.1.2", "2.2.2", "2.3.1", "2.4.0", "2.5.1"}
    assert len(wheels) == 96
    assert {"torch": "2.5.1", "cuda": "12.3.2", "python": "3.12", "cxx11_abi": False} in wheels


def test_publish_v2_8_3() -> None:
    job, systems, wheels = gen.wheels_from_workflow((PUBLISH / "publish-v2.8.3.yml").read_text())
    assert (job, systems) == ("build_wheels", ["ubuntu-22.04"])
    assert {w["torch"] for w in wheels} == {"2.4.0", "2.5.1", "2.6.0", "2.7.1", "2.8.0"}
    assert {w["cuda"] for w in wheels} == {"12.9.1"}
    assert {w["cxx11_abi"] for w in wheels} == {True, False}
    assert not [w for w in wheels if w["torch"] == "2.4.0" and w["python"] == "3.13"]
    assert {"torch": "2.5.1", "cuda": "12.9.1", "python": "3.13", "cxx11_abi": True} in wheels
    assert len(wheels) == 48


def test_flash_attention_facts_file(generated: tuple[Path, RecordedIndex, Any]) -> None:
    out, _index, _ = generated
    text = (out / "flash-attn-wheels.json").read_text()
    facts = json.loads(text)
    assert list(facts) == ["2.6.3", "2.7.0", "2.8.3"]  # fa4-* left out, ordered by version
    entry = facts["2.8.3"]
    assert entry["tag"] == "v2.8.3" and entry["workflow"] == ".github/workflows/publish.yml"
    assert entry["archs"] == ["sm_80", "sm_90", "sm_100", "sm_120"]
    assert entry["arch_min_cuda"] == {"sm_100": "12.8", "sm_120": "12.8", "sm_90": "11.8"}
    assert "(setup.py at v2.8.3)" in entry["arch_notes"]
    assert facts["2.6.3"]["archs"] is None and "no setup.py" in facts["2.6.3"]["arch_notes"]
    # one wheel per line
    assert text.count('{"cuda": ') == 84 + 96 + 48


def test_yaml_subset_reader() -> None:
    matrix = gen.parse_yaml_block(
        """
        os: [ubuntu-22.04]   # comment
        python-version:
          - '3.11'
          - "3.12"  # 'quoted # is not a comment' below
        torch-version: ['2.4.0', "2.5.1",
                        '2.6.0']
        cuda-version: ['12.4.1']
        tag: 'a # b'
        exclude:
          - torch-version: '2.4.0'
            python-version: '3.12'
        include:
          - torch-version: '2.6.0'
            extra: 'yes'
          - torch-version: '2.7.0'
            python-version: '3.13'
            cuda-version: '12.8.1'
        """
    )
    assert matrix.pop("tag") == "a # b"
    combos = gen.expand_matrix(matrix)
    assert {
        "os": "ubuntu-22.04",
        "python-version": "3.12",
        "torch-version": "2.4.0",
        "cuda-version": "12.4.1",
    } not in combos
    assert sum(1 for c in combos if c.get("extra") == "yes") == 2  # joined to both 2.6.0 entries
    assert combos[-1] == {"torch-version": "2.7.0", "python-version": "3.13", "cuda-version": "12.8.1"}
    assert len(combos) == 2 * 3 - 1 + 1
    # an unquoted 3.10 is the number 3.1 in YAML, as GitHub Actions reads it
    assert gen.parse_yaml_block("python-version: [3.9, 3.10, '3.10', 1.11.0]") == {
        "python-version": ["3.9", "3.1", "3.10", "1.11.0"]
    }
    with pytest.raises(gen.YamlSubsetError):
        gen.parse_yaml_block("python-version: {a: 1}")
    with pytest.raises(gen.YamlSubsetError):
        gen.parse_yaml_block("torch-version: [['2.4.0']]")


def test_gencode_archs_and_conditions() -> None:
    facts = gen.gencode_archs(SETUP_V283_EXCERPT, "v2.8.3")
    assert facts.archs == ["sm_80", "sm_90", "sm_100", "sm_120"]
    assert facts.min_cuda == {"sm_100": "12.8", "sm_120": "12.8", "sm_90": "11.8"}
    assert "sm_100 only with CUDA >= 12.8" in facts.notes
    assert "FLASH_ATTN_CUDA_ARCHS (default 80;90;100;120)" in facts.notes
    commented = gen.gencode_archs('cc_flag = []\n# cc_flag.append("arch=compute_75,code=sm_75")\n', "vX")
    assert commented.archs == [] and commented.notes.startswith("no -gencode flags")


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no flash-attention mirror on this machine")
def test_every_tag_of_the_mirror() -> None:
    facts, problems = gen.collect_flash_attention(gen.GitTags(MIRROR))
    assert problems == []
    assert all(key.startswith("2.") for key in facts) and len(facts) >= 78
    assert "2.4.0.post1" in facts and facts["2.4.0.post1"]["tag"] == "v2.4.0.post1"
    torches = {v: {w["torch"] for w in e["wheels"]} for v, e in facts.items()}
    assert {"2.2.2", "2.3.1", "2.4.0"} <= torches["2.6.3"]
    first_25 = min((Version(v) for v, t in torches.items() if any(x.startswith("2.5.") for x in t)))
    assert str(first_25) == "2.7.0"
    for version in ("2.8.3", "2.8.3.post1"):
        wheels = facts[version]["wheels"]
        assert torches[version] == {"2.4.0", "2.5.1", "2.6.0", "2.7.1", "2.8.0"}
        assert {w["cuda"] for w in wheels} == {"12.9.1"} and {w["cxx11_abi"] for w in wheels} == {True, False}
        assert not [w for w in wheels if w["torch"] == "2.4.0" and w["python"] == "3.13"]
    assert facts["2.6.3"]["archs"] == ["sm_80", "sm_90"]
    assert facts["2.2.4"]["archs"] == ["sm_80"]  # sm_90 commented out in that release's setup.py
    first_100 = min(Version(v) for v, e in facts.items() if "sm_100" in e["archs"])
    assert str(first_100) == "2.7.3"
    # the mirror agrees with what the shipped snapshot says for the tags both have
    shipped = json.loads((SNAPSHOT / "flash-attn-wheels.json").read_text())
    for version in ("2.6.3", "2.7.0", "2.8.3"):
        assert shipped[version] == facts[version]


# -- triton: the bundled ptxas ----------------------------------------------------------------


def test_toolchain_files_recorded() -> None:
    assert gen.toolchain_from_json(TOOLCHAIN_V330) == (
        "12.4.99",
        "12.8.61",
    )
    assert gen.toolchain_from_json(TOOLCHAIN_V360) == (
        "12.8.93",
        "12.9.86",
    )
    assert gen.toolchain_from_json('{"ptxas": "12.4.99", "cuobjdump": "12.4.99"}') == ("12.4.99", None)
    for bad in ('{"cuobjdump": "12.4.99"}', '{"ptxas": 12.4}', '{"ptxas": "latest"}', "[1]"):
        with pytest.raises(ValueError):
            gen.toolchain_from_json(bad)
    found = gen.triton_toolchain(RecordedTriton(), "v3.1.0")
    assert (found.file, found.ptxas, found.ptxas_blackwell, found.error) == (
        "cmake/nvidia-toolchain-version.txt",
        "12.4.99",
        None,
        None,
    )


def test_ptxas_from_setup_py() -> None:
    assert gen.ptxas_from_setup_py(SETUP_PTXAS_URL_ONLY) == "12.0.76"
    assert gen.ptxas_from_setup_py(SETUP_PTXAS_LITERAL) == "12.1.105"
    assert gen.ptxas_from_setup_py(SETUP_DOWNLOAD_CALLS) == "12.3.52"  # not cuobjdump's 12.2.140
    assert gen.ptxas_from_setup_py(SETUP_FROM_CMAKE_FILE) is None  # the version is in the cmake file
    assert gen.ptxas_from_setup_py('# download_and_copy(src_path="bin/ptxas", version="12.0.1")\n') is None


def test_ptxas_archs() -> None:
    assert gen.ptxas_archs("12.4.99", None) == ["sm_89", "sm_90"]
    assert gen.ptxas_archs("12.8.93", None) == ["sm_89", "sm_90", "sm_100", "sm_120"]
    assert gen.ptxas_archs("12.9.86", None) == ["sm_89", "sm_90", "sm_100", "sm_103", "sm_120", "sm_121"]
    # sm_100 and above are compiled by ptxas-blackwell where there is one, the others by ptxas
    assert gen.ptxas_archs("12.4.99", "12.8.61") == ["sm_89", "sm_90", "sm_100", "sm_120"]
    assert gen.ptxas_archs("11.7.99", "12.9.86") == ["sm_100", "sm_103", "sm_120", "sm_121"]
    assert gen.ptxas_archs(None, None) is None
    assert gen.CUDA_ARCHS == {
        "11.8": ["sm_89", "sm_90"],
        "12.8": ["sm_100", "sm_120"],
        "12.9": ["sm_103", "sm_121"],
    }


def test_triton_facts_file(generated: tuple[Path, RecordedIndex, Any]) -> None:
    out, _index, (_reports, problems) = generated
    text = (out / "triton-ptxas.json").read_text()
    facts = json.loads(text)
    assert list(facts) == ["cuda_archs", "cuda_archs_source", "releases", "source"]  # sorted keys
    assert facts["cuda_archs"] == gen.CUDA_ARCHS
    assert facts["cuda_archs_source"].startswith("https://docs.nvidia.com/cuda/")
    releases = facts["releases"]
    assert list(releases) == ["2.1.0", "3.1.0", "3.3.0", "3.6.0", "3.9.0"]  # no v1, no rc; by version
    assert releases["3.3.0"] == {
        "archs": ["sm_89", "sm_90", "sm_100", "sm_120"],
        "commit": RecordedTriton().commit("v3.3.0"),
        "file": "cmake/nvidia-toolchain-version.json",
        "ptxas": "12.4.99",
        "ptxas_blackwell": "12.8.61",
        "tag": "v3.3.0",
    }
    assert releases["2.1.0"]["file"] == "python/setup.py" and releases["2.1.0"]["ptxas"] == "12.1.105"
    assert releases["3.1.0"]["file"] == "cmake/nvidia-toolchain-version.txt"
    assert "sm_121" in releases["3.6.0"]["archs"] and "sm_121" not in releases["3.3.0"]["archs"]
    assert releases["3.9.0"]["ptxas"] is None and releases["3.9.0"]["archs"] is None
    assert "no ptxas version in setup.py at v3.9.0" in releases["3.9.0"]["error"]
    # one release per line, keys sorted
    assert text.count('{"archs": ') == 5
    # the recorded index has triton 0.4.1, 2.0.0 and 3.1.0
    assert "triton: triton 2.0.0 is on the index but has no tag here" in problems
    assert "triton: tag v3.3.0 has no triton release on the index" in problems
    assert not [p for p in problems if "0.4.1" in p or "tag v3.1.0" in p]


def test_triton_file_kept_without_a_clone(generated: tuple[Path, RecordedIndex, Any], tmp_path: Path) -> None:
    out, _index, _ = generated
    again = tmp_path / "again"
    again.mkdir()
    (again / "triton-ptxas.json").write_bytes((out / "triton-ptxas.json").read_bytes())
    specs = [p for p in gen.PACKAGES if p.name == "torch"]
    gen.generate(again, specs, RecordedIndex(), INDEX, RecordedTags(), "2026-01-02")
    assert (again / "triton-ptxas.json").read_bytes() == (out / "triton-ptxas.json").read_bytes()
    assert json.loads((again / "meta.json").read_text())["triton_ptxas_releases"] == 4
    alone = tmp_path / "alone"
    gen.generate(alone, specs, RecordedIndex(), INDEX, RecordedTags(), "2026-01-02")
    assert json.loads((alone / "meta.json").read_text())["triton_ptxas_releases"] is None


def test_triton_release_tags() -> None:
    tags = [
        "v3.2.0",
        "v2.0.0",
        "v1.1.2",
        "v0.4",
        "v3.3.0-rc1",
        "v3.0.0.dev1",
        "v3.10.0",
        "release/3.2.x",
        "vx",
    ]
    assert [t for t, _v in gen.triton_release_tags(tags)] == ["v2.0.0", "v3.2.0", "v3.10.0"]


class BranchHeads:
    """A fork's upstream release branches read as if their heads were the release tags."""

    def __init__(self, git_dir: Path, heads: Mapping[str, str]) -> None:
        self.git = gen.GitTags(git_dir)
        self.heads = heads

    def tags(self) -> list[str]:
        return list(self.heads)

    def read(self, tag: str, path: str) -> str | None:
        done = self.git._git("show", f"refs/heads/{self.heads[tag]}:{path}")
        return done.stdout.decode() if done.returncode == 0 else None

    def commit(self, tag: str) -> str | None:
        return self.git._git("rev-parse", f"refs/heads/{self.heads[tag]}").stdout.decode().strip()


@pytest.mark.skipif(not TRITON_FORK.is_dir(), reason="no mirror of triton's release branches here")
def test_triton_release_branches() -> None:
    # each branch head is the last release made from that branch
    heads = {
        "v3.0.0": "release/3.0.x",
        "v3.1.0": "release/3.1.x",
        "v3.2.0": "release/3.2.x",
        "v3.3.1": "release/3.3.x",
        "v3.4.0": "release/3.4.x",
        "v3.5.1": "release/3.5.x",
        "v3.6.0": "release/3.6.x",
    }
    facts, problems = gen.collect_triton(BranchHeads(TRITON_FORK, heads))
    assert problems == []
    got = {
        v: (e["file"].rsplit(".", 1)[1], e["ptxas"], e["ptxas_blackwell"])
        for v, e in facts["releases"].items()
    }
    assert got == {
        "3.0.0": ("txt", "12.4.99", None),
        "3.1.0": ("txt", "12.4.99", None),
        "3.2.0": ("json", "12.4.99", None),
        "3.3.1": ("json", "12.4.99", "12.8.61"),
        "3.4.0": ("json", "12.8.93", None),
        "3.5.1": ("json", "12.8.93", None),
        "3.6.0": ("json", "12.8.93", "12.9.86"),
    }
    read = BranchHeads(TRITON_FORK, heads).read("v3.6.0", "cmake/nvidia-toolchain-version.json")
    assert gen.toolchain_from_json(read or "") == gen.toolchain_from_json(TOOLCHAIN_V360)


@pytest.mark.skipif(not OPENAI_TRITON.is_dir(), reason="no openai/triton mirror here")
def test_triton_2x_tags_of_the_old_mirror() -> None:
    facts, problems = gen.collect_triton(gen.GitTags(OPENAI_TRITON))
    assert problems == []
    releases = facts["releases"]
    assert list(releases) == ["2.0.0", "2.1.0"]  # its only tags from v2 on (v0.x and v1.x are left out)
    assert releases["2.0.0"]["ptxas"] == "12.0.76"  # from the cuda-nvcc URL in python/setup.py
    assert releases["2.1.0"]["ptxas"] == "12.1.105"
    assert {e["file"] for e in releases.values()} == {"python/setup.py"}
    # an annotated tag: the commit it points to, not the tag object
    tag_object = subprocess.run(
        ["git", f"--git-dir={OPENAI_TRITON}", "rev-parse", "refs/tags/v2.0.0"], capture_output=True, text=True
    ).stdout.strip()
    assert releases["2.0.0"]["commit"] != tag_object
    assert releases["2.0.0"]["commit"].startswith("bd5c2117f62c")


@pytest.mark.skipif(not TRITON_MIRROR.is_dir(), reason="no triton-lang/triton mirror here")
def test_every_tag_of_the_triton_mirror() -> None:
    facts, problems = gen.collect_triton(gen.GitTags(TRITON_MIRROR))
    assert problems == []
    releases = facts["releases"]
    assert {"2.0.0", "3.2.0", "3.3.0", "3.5.0", "3.6.0"} <= set(releases)
    assert releases["2.0.0"]["ptxas"] == "12.0.76"
    assert releases["3.2.0"]["ptxas"] == "12.4.99" and releases["3.2.0"]["ptxas_blackwell"] is None
    assert releases["3.3.0"]["ptxas_blackwell"] == "12.8.61"
    assert releases["3.5.0"]["ptxas"] == "12.8.93"
    # the mirror agrees with the shipped snapshot on every release both have (commits aside: the
    # shipped commits were found on release branches, see docs/release-facts.md)
    shipped = json.loads((SNAPSHOT / "triton-ptxas.json").read_text())["releases"]
    for version in set(shipped) & set(releases):
        assert {k: v for k, v in shipped[version].items() if k != "commit"} == {
            k: v for k, v in releases[version].items() if k != "commit"
        }, version


# -- the shipped snapshot ---------------------------------------------------------------------


def shipped(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SNAPSHOT / "registry" / f"{name}.json").read_text())
    return data


def test_shipped_meta() -> None:
    meta = json.loads((SNAPSHOT / "meta.json").read_text())
    assert meta["schema"] == "attn-doctor/release-facts" and meta["schema_version"] == 1
    assert datetime.date.fromisoformat(meta["generated"]) >= datetime.date(2026, 1, 1)
    assert meta["generator"] == (
        "python tools/refresh_release_facts.py --flash-attention-git PATH --triton-git TRITON_PATH"
    )
    assert set(meta["packages"]) == {p.name for p in gen.PACKAGES}
    for name, summary in meta["packages"].items():
        releases = shipped(name)["releases"]
        assert summary["releases"] == len(releases)
        assert list(releases) == sorted(releases, key=Version), name
    assert meta["flash_attention_tags"] == len(json.loads((SNAPSHOT / "flash-attn-wheels.json").read_text()))
    triton = json.loads((SNAPSHOT / "triton-ptxas.json").read_text())["releases"]
    assert meta["triton_ptxas_releases"] == sum(1 for e in triton.values() if e["ptxas"]) >= 14


def test_shipped_registry_facts() -> None:
    torch = shipped("torch")["releases"]
    assert pins(torch["2.5.1"]["requires_dist"], "triton", LINUX_X86_311) == ["==3.1.0"]
    assert pins(torch["2.5.1"]["requires_dist"], "triton", {**LINUX_X86_311, "python_version": "3.13"}) == []
    assert pins(torch["2.6.0"]["requires_dist"], "triton", LINUX_X86_311) == ["==3.2.0"]
    xformers = shipped("xformers")["releases"]
    assert pins(xformers["0.0.29.post3"]["requires_dist"], "torch", LINUX_X86_311) == ["==2.6.0"]
    assert pins(xformers["0.0.30"]["requires_dist"], "torch", LINUX_X86_311) == ["==2.7.0"]
    assert "0.0.29rc1" not in xformers and all(Version(v).pre is None for v in xformers)
    assert shipped("flash-attn")["releases"]["2.6.3"]["files"] == ["sdist"]


def test_shipped_flash_attn_wheels() -> None:
    facts = json.loads((SNAPSHOT / "flash-attn-wheels.json").read_text())
    assert not [w for w in facts["2.6.3"]["wheels"] if Version(w["torch"]).release[:2] == (2, 5)]
    assert [w for w in facts["2.7.0"]["wheels"] if w["torch"] == "2.5.1"]
    assert facts["2.8.3"]["archs"] == ["sm_80", "sm_90", "sm_100", "sm_120"]


def test_shipped_triton_ptxas() -> None:
    facts = json.loads((SNAPSHOT / "triton-ptxas.json").read_text())
    assert facts["cuda_archs"] == gen.CUDA_ARCHS and facts["cuda_archs_source"] == gen.CUDA_ARCHS_SOURCE
    releases = facts["releases"]
    on_index = shipped("triton")["releases"]
    assert set(releases) <= set(on_index)
    assert list(releases) == sorted(releases, key=Version)
    for version, entry in releases.items():
        assert entry["tag"] == f"v{version}" and re.fullmatch(r"[0-9a-f]{40}", entry["commit"]), version
        assert entry["file"] in TOOLCHAIN_FILES and "error" not in entry, version
        assert entry["archs"] == gen.ptxas_archs(entry["ptxas"], entry["ptxas_blackwell"]), version
    # 3.2.0 (torch 2.6's triton) bundles a CUDA 12.4 ptxas: no Blackwell code
    assert releases["3.2.0"]["ptxas"].startswith("12.4.") and releases["3.2.0"]["ptxas_blackwell"] is None
    assert "sm_120" not in releases["3.2.0"]["archs"] and "sm_100" not in releases["3.2.0"]["archs"]
    # 3.3.0 adds a Blackwell ptxas from CUDA 12.8 next to the 12.4 one
    assert releases["3.3.0"]["ptxas"].startswith("12.4.")
    assert releases["3.3.0"]["ptxas_blackwell"].startswith("12.8.")
    assert {"sm_100", "sm_120"} <= set(releases["3.3.0"]["archs"]) and "sm_121" not in releases["3.3.0"][
        "archs"
    ]
    # 3.4.0 to 3.5.1: one ptxas, CUDA 12.8; 3.6.0: a CUDA 12.9 Blackwell ptxas, which knows sm_121
    assert {releases[v]["ptxas"] for v in ("3.4.0", "3.5.0", "3.5.1")} == {"12.8.93"}
    assert "sm_121" in releases["3.6.0"]["archs"] and releases["3.6.0"]["ptxas_blackwell"].startswith("12.9.")
    assert releases["2.0.0"]["ptxas"] == "12.0.76" and releases["2.0.0"]["file"] == "python/setup.py"
    # torch 2.6.0 pins that triton
    assert pins(shipped("torch")["releases"]["2.6.0"]["requires_dist"], "triton", LINUX_X86_311) == [
        "==3.2.0"
    ]


def test_no_index_host_is_written() -> None:
    from pip._internal.models.index import PyPI

    host = urllib.parse.urlsplit(PyPI.simple_url).netloc
    files = [
        *SNAPSHOT.rglob("*.json"),
        *REGISTRY.rglob("*"),
        REPO / "tools" / "refresh_release_facts.py",
    ]
    for path in [*files, REPO / "docs" / "release-facts.md", Path(__file__)]:
        if path.is_file():
            assert host not in path.read_text(errors="replace"), path
    for path in (REGISTRY / "simple").glob("*.json"):
        urls = {urllib.parse.urlsplit(f["url"]).netloc for f in json.loads(path.read_text())["files"]}
        assert urls == {"files.index.invalid"}, path


def test_markers_in_snapshot_parse() -> None:
    for path in (SNAPSHOT / "registry").glob("*.json"):
        for version, entry in json.loads(path.read_text())["releases"].items():
            for text in entry.get("requires_dist") or []:
                requirement = Requirement(text)
                if requirement.marker is not None:
                    assert isinstance(requirement.marker, Marker), (path.name, version)


def test_ngc_images_come_from_the_release_notes_table(tmp_path: Path) -> None:
    """snapshot/ngc-pytorch-images.json is tools/ngc_pytorch_images.json without the quoted words
    and notes; every fact there quotes its page; a fact without an https page is left out, and a
    tag left without torch or CUDA is left out whole (each said)."""
    assert gen.write_ngc_images(tmp_path) == []
    assert (tmp_path / "ngc-pytorch-images.json").read_text() == (
        SNAPSHOT / "ngc-pytorch-images.json"
    ).read_text()
    table = json.loads(gen.NGC_SOURCE.read_text())["images"]
    assert all(fact["quote"] for entry in table.values() for key, fact in entry.items() if key != "notes")
    source = tmp_path / "source.json"
    cited = {"value": "2.10.0a0", "source": "https://docs.nvidia.com/x.html", "quote": "q"}
    unsourced = {"value": "13.1.0", "source": "docs.nvidia.com/x.html", "quote": "q"}
    images = {"25.12": {"torch": cited, "cuda": unsourced}, "25.11": {"torch": cited, "python": cited}}
    source.write_text(json.dumps({"source": "s", "images": images}))
    assert gen.write_ngc_images(tmp_path, source) == [
        "NGC image 25.12: cuda has no value or https source; left out",
        "NGC image 25.12: no torch or CUDA with its source; left out",
        "NGC image 25.11: no torch or CUDA with its source; left out",
    ]
    assert json.loads((tmp_path / "ngc-pytorch-images.json").read_text())["images"] == {}


def test_ngc_images_alone_are_regenerated_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--ngc-images rewrites only the images file, with no clone and no index, as docs/release-facts.md
    says to after editing the table; without it, the clones are still required."""
    out = tmp_path / "new"  # made when missing
    assert gen.main(["--ngc-images", "--out", str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["ngc-pytorch-images.json"]
    shipped_images = (SNAPSHOT / "ngc-pytorch-images.json").read_text()
    assert (out / "ngc-pytorch-images.json").read_text() == shipped_images
    assert "wrote " in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:
        gen.main(["--out", str(tmp_path)])
    assert usage.value.code == 2 and "--ngc-images alone" in capsys.readouterr().err
