"""torch's Python messages (SDPA, flex_attention, the inductor flex kernels, cpp_extension, CUDA
init, dynamo), and, from the same download, what torch_cpp reads of the compiled libraries.

The registry's default Linux wheel of torch is a CUDA build of 700 MB to 1 GB with no sdist
beside it. ``fetch`` downloads it once per release, keeps the included ``.py`` files under
CACHE/torch/<version>/torch/, and for torch_cpp the printable strings of libtorch_cuda.so and
libtorch_cpu.so (``strings -n 4``, mangled symbols dropped, gzipped), the attention headers the
wheel ships (include/ATen/native/transformers/**.h) and the release's commit (``git_version`` of
torch/version.py) under CACHE/torch-cpp/<version>/; then deletes the wheel.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tools.messages.sources.cached_trees import DONE, CachedTrees, registry_versions

TORCH_INCLUDE = (
    "nn/functional.py",  # scaled_dot_product_attention, multi_head_attention_forward
    "nn/attention/*.py",  # sdpa_kernel, flex_attention, BlockMask, _utils, bias, experimental
    "_higher_order_ops/flex_attention.py",
    # (a pattern's * crosses folders: "flex*.py" would take kernel/flex_gemm/, a GEMM)
    "_inductor/kernel/flex_attention.py",  # to 2.7
    "_inductor/kernel/flex_decoding.py",
    "_inductor/kernel/flex/*.py",  # the flex kernels' package (2.8+)
    "_inductor/kernel/*attention*.py",
    "_inductor/exc.py",  # "Cannot find a working triton installation", GPU too old for triton
    "utils/cpp_extension.py",
    "cuda/__init__.py",
    "backends/cuda/__init__.py",
    "_dynamo/exc.py",
    "_dynamo/convert_frame.py",  # recompile / cache size limit warnings users paste
    "_dynamo/eval_frame.py",  # "torch.compile is not supported on ..."
)
# manylinux1 (2.1) to manylinux_2_28 (2.6+): pip does not widen a manylinux_2_x tag by itself
LINUX_TAGS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux2014_x86_64",
)
LIBRARIES = ("torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cpu.so")
# the attention headers a wheel ships (their inline checks are source, exact for the release)
HEADERS = ("torch/include/ATen/native/transformers/", "torch/include/ATen/native/cudnn/MHA")
CPP = "torch-cpp"  # the cache folder of what torch_cpp reads
_GIT_VERSION = re.compile(r"""^git_version\s*=\s*['"]([0-9a-f]{7,40})['"]""", re.M)


def public_releases(versions: list[str]) -> list[str]:
    """The registry's own releases: a local build found beside them (2.13.0+cpu) is not one."""
    return [version for version in versions if "+" not in version]


def printable_strings(binary: Path, out: Path) -> int:
    """Write the printable strings of ``binary`` (4+ characters, no mangled symbols) to ``out``
    (gzip, one a line); the number written."""
    kept = 0
    with (
        subprocess.Popen(["strings", "-n", "4", str(binary)], stdout=subprocess.PIPE) as proc,
        gzip.open(out, "wt", encoding="utf-8") as handle,
    ):
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("latin-1").rstrip("\n")
            if line.startswith("_Z"):
                continue
            handle.write(line + "\n")
            kept += 1
    return kept


@dataclass(frozen=True)
class TorchTrees(CachedTrees):
    """CachedTrees for torch's wheel: public releases only, the wheel's tags of every era, and
    the compiled libraries' strings kept for torch_cpp."""

    platforms: tuple[str, ...] = LINUX_TAGS

    def fetch(
        self, cache: Path, versions: list[str] | None = None, log: Callable[[str], None] = print
    ) -> None:
        wanted = registry_versions(self.distribution) if versions is None else versions
        super().fetch(cache, public_releases(wanted), log)

    def files(self, cache: Path, version: str) -> Iterator[tuple[str, str]]:
        """The kept files that the include patterns still name (a tree kept under older patterns
        is read as the current ones say)."""
        for path, text in super().files(cache, version):
            if self.keeps(path) == path:
                yield path, text

    def _fetch_one(self, version: str, dest: Path) -> bool:
        binaries = dest.parent.parent / CPP / version
        with tempfile.TemporaryDirectory() as tmp:
            tags = [arg for tag in self.platforms for arg in ("--platform", tag)]
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp]
            # === : exactly this version, never a local build such as 2.13.0+cpu
            command += [f"torch==={version}", "--only-binary=:all:", "--python-version", "3.11", *tags]
            done = subprocess.run(command, capture_output=True)
            wheels = list(Path(tmp).glob("*.whl"))
            if done.returncode != 0 or not wheels:
                return False
            binaries.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(wheels[0]) as wheel:
                for info in wheel.infolist():
                    kept = self.keeps(info.filename)
                    if kept is not None:
                        (dest / kept).parent.mkdir(parents=True, exist_ok=True)
                        (dest / kept).write_bytes(wheel.read(info))
                    elif info.filename == "torch/version.py":
                        found = _GIT_VERSION.search(wheel.read(info).decode("utf-8", "replace"))
                        (binaries / "git_version").write_text((found[1] if found else "") + "\n")
                    elif info.filename.startswith(HEADERS) and info.filename.endswith(".h"):
                        header = binaries / "include" / info.filename.removeprefix("torch/include/")
                        header.parent.mkdir(parents=True, exist_ok=True)
                        header.write_bytes(wheel.read(info))
                    elif info.filename in LIBRARIES:
                        library = Path(tmp) / Path(info.filename).name
                        with wheel.open(info) as src, open(library, "wb") as out:
                            shutil.copyfileobj(src, out, 1 << 20)
                        printable_strings(library, binaries / f"{library.name}.strings.gz")
                        library.unlink()
            (binaries / "wheel").write_text(wheels[0].name + "\n")
        (binaries / DONE).write_text(f"torch=={version}\n")
        dest.mkdir(parents=True, exist_ok=True)
        (dest / DONE).write_text(f"torch=={version}\n")
        return True


TORCH = TorchTrees("torch", "torch", TORCH_INCLUDE, floor="2.1.0")
