"""tools/refresh_release_facts.py, offline: recorded registry answers, recorded publish.yml files,
the flash-attention mirror where this machine has one, and the snapshot shipped in the package.

tests/fixtures/registry/README.md says what was recorded and how it was trimmed.
"""

from __future__ import annotations

import datetime
import functools
import http.server
import importlib.util
import io
import json
import re
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


# setup.py at v2.8.3: cuda_archs() and the cc_flag block, lines copied unchanged (others left out)
SETUP_V283_EXCERPT = """
def cuda_archs() -> str:
    return os.getenv("FLASH_ATTN_CUDA_ARCHS", "80;90;100;120").split(";")

if not SKIP_CUDA_BUILD and not IS_ROCM:
    check_if_cuda_home_none("flash_attn")
    # Check, if CUDA11 is installed for compute capability 8.0
    cc_flag = []
    if CUDA_HOME is not None:
        _, bare_metal_version = get_cuda_bare_metal_version(CUDA_HOME)
        if bare_metal_version < Version("11.7"):
            raise RuntimeError(
                "FlashAttention is only supported on CUDA 11.7 and above.  "
                "Note: make sure nvcc has a supported version by running nvcc -V."
            )

    if "80" in cuda_archs():
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_80,code=sm_80")
    if CUDA_HOME is not None:
        if bare_metal_version >= Version("11.8") and "90" in cuda_archs():
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_90,code=sm_90")
        if bare_metal_version >= Version("12.8") and "100" in cuda_archs():
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_100,code=sm_100")
        if bare_metal_version >= Version("12.8") and "120" in cuda_archs():
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_120,code=sm_120")
"""


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
    reports, problems = gen.generate(out, specs, index, INDEX, RecordedTags(), "2026-01-02", workers=4)
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
    gen.generate(again, specs, RecordedIndex(), INDEX, RecordedTags(), "2026-01-02", workers=1)
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


# -- the shipped snapshot ---------------------------------------------------------------------


def shipped(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SNAPSHOT / "registry" / f"{name}.json").read_text())
    return data


def test_shipped_meta() -> None:
    meta = json.loads((SNAPSHOT / "meta.json").read_text())
    assert meta["schema"] == "attn-doctor/release-facts" and meta["schema_version"] == 1
    assert datetime.date.fromisoformat(meta["generated"]) >= datetime.date(2026, 1, 1)
    assert meta["generator"] == "python tools/refresh_release_facts.py --flash-attention-git PATH"
    assert set(meta["packages"]) == {p.name for p in gen.PACKAGES}
    for name, summary in meta["packages"].items():
        releases = shipped(name)["releases"]
        assert summary["releases"] == len(releases)
        assert list(releases) == sorted(releases, key=Version), name
    assert meta["flash_attention_tags"] == len(json.loads((SNAPSHOT / "flash-attn-wheels.json").read_text()))


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


def test_no_index_host_is_written() -> None:
    from pip._internal.models.index import PyPI

    host = urllib.parse.urlsplit(PyPI.simple_url).netloc
    files = [*SNAPSHOT.rglob("*.json"), *REGISTRY.rglob("*"), REPO / "tools" / "refresh_release_facts.py"]
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
