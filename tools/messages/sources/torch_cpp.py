"""torch's compiled attention checks: the TORCH_CHECK / TORCH_WARN texts of SDPA's backend choice
(sdp_utils), its input checks (attention.cpp) and the flash / memory-efficient / cuDNN paths.

No release of torch has an sdist, and its wheels carry the compiled libraries, not the .cpp/.cu
files. What is read, per release, best first:

1. ``src/``: the files at the release's own commit (``git_version`` of the wheel's
   torch/version.py), when ``fetch`` could download them from GitHub: exact.
2. ``include/``: the attention headers the wheel ships (sdp_utils_cpp.h and friends, whose
   checks are inline): exact.
3. The pool: stored versions of the same files (CACHE/torch-cpp/pool/<label>/<path>, each
   label's SOURCE naming the repository, commit and how it was read). A pooled message counts
   for a release only when every literal piece of its text is among the printable strings of
   that release's libtorch_cuda.so / libtorch_cpu.so (c10::str keeps each literal argument a
   separate string; a piece made of several is found as their concatenation), in the library
   that compiles the file (cuda/ and cudnn/ files: libtorch_cuda.so; attention.cpp and
   sdp_utils_cpp.cpp: libtorch_cpu.so; a header: either). So a release is credited only with
   wordings its binary holds (a ROCm-only or DEBUG-only check never is).
4. The binary's own strings: an attention message of the library that no source entry holds
   (a wording the pool lacks) is an entry of kind ``binary string``, file ``torch/lib/<library>``,
   with no function or guard; ``unread`` says how many each release has.
"""

from __future__ import annotations

import bisect
import gzip
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from attn_doctor.engine.matcher import is_version
from tools.messages import cpp_source
from tools.messages.python_source import FIELD, RawMessage
from tools.messages.sources.cached_trees import DONE
from tools.messages.sources.torch import CPP, TORCH

# the C++ files of the attention stack, as pytorch/pytorch lays them out
FILES = (
    "aten/src/ATen/native/transformers/attention.cpp",
    "aten/src/ATen/native/transformers/sdp_utils_cpp.h",
    "aten/src/ATen/native/transformers/sdp_utils_cpp.cpp",
    "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp",
    "aten/src/ATen/native/transformers/cuda/sdp_utils.h",
    "aten/src/ATen/native/transformers/cuda/attention.cu",
    "aten/src/ATen/native/transformers/cuda/attention_backward.cu",
    "aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp",
    "aten/src/ATen/native/transformers/cuda/flash_attn/fmha_api.cpp",
    "aten/src/ATen/native/transformers/cuda/mem_eff_attention/kernel_forward.h",
    "aten/src/ATen/native/transformers/cuda/mem_eff_attention/kernel_backward.h",
    "aten/src/ATen/native/cudnn/MHA.cpp",
)
RAW = "https://raw.githubusercontent.com/pytorch/pytorch/{commit}/{path}"
MIN_PIECE = 8  # a shorter literal run says too little (and ``strings -n 4`` drops the shortest)
# a binary string that speaks of attention (what ``unread`` counts when no entry holds it)
_ATTENTION = re.compile(
    r"[Aa]ttention|sdp|SDPA|[Ff]used kernel|head_dim|attn_mask|Mem efficient|FlashAttention|[Ff]lash|MHA"
)
_NOT_A_MESSAGE = re.compile(r"\(Tensor|Tensor\?|->|%|::|INTERNAL ASSERT FAILED at|\.(cpp|cu|h)\b")


@dataclass
class BinaryStrings:
    """The printable strings of one release's libraries: is a literal piece among them?"""

    lines: set[str]
    _sorted: list[str] | None = None
    _reversed: list[str] | None = None
    _known: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def read(cls, paths: Iterable[Path]) -> BinaryStrings:
        lines: set[str] = set()
        for path in paths:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                lines.update(line for line in handle.read().split("\n") if len(line) >= MIN_PIECE)
        return cls(lines)

    def holds(self, piece: str) -> bool:
        """Whether ``piece`` is a string of the binary; the head or the tail of one (the
        linker keeps one copy of a string that ends another; ``#cond " INTERNAL ASSERT FAILED
        at " __FILE__`` is one literal; a string stored right after bytes with no NUL between
        reads as the end of a longer one); or several strings one after another (the literal
        arguments of one c10::str: the first may end a longer line, the last begin one), a run
        shorter than MIN_PIECE, too short to have been kept, allowed between two of them or at
        either end."""
        if piece not in self._known:
            self._known[piece] = (
                piece in self.lines or self._head(piece) or self._tail(piece) or self._made_of(piece)
            )
        return self._known[piece]

    def _made_of(self, piece: str) -> bool:
        # (position, how it was reached): "start", "string", "gap" (a short run after a
        # string), "start-gap" (one at the start); never a gap after a gap; one string needed
        todo, seen = [(0, "start")], {(0, "start")}
        while todo:
            start, how = todo.pop()
            for end in range(len(piece), start, -1):
                steps = []
                part = piece[start:end]
                if end - start >= MIN_PIECE and (
                    part in self.lines
                    or (start == 0 and self._tail(part))  # the first string, right after other bytes
                    or (end == len(piece) and self._head(part))  # the last, right before other bytes
                ):
                    steps.append("string")
                elif end - start < MIN_PIECE and how in ("start", "string"):
                    steps.append("gap" if how == "string" else "start-gap")
                for step in steps:
                    if end == len(piece) and step in ("string", "gap"):
                        return True
                    if (end, step) not in seen:
                        seen.add((end, step))
                        todo.append((end, step))
        return False

    def _head(self, part: str) -> bool:
        if self._sorted is None:
            self._sorted = sorted(self.lines)
        index = bisect.bisect_left(self._sorted, part)
        return index < len(self._sorted) and self._sorted[index].startswith(part)

    def _tail(self, part: str) -> bool:
        if self._reversed is None:
            self._reversed = sorted(line[::-1] for line in self.lines)
        backwards = part[::-1]
        index = bisect.bisect_left(self._reversed, backwards)
        return index < len(self._reversed) and self._reversed[index].startswith(backwards)


def pieces(template: str) -> list[str]:
    """The literal pieces of a template that a binary's strings can show (MIN_PIECE or longer)."""
    return [part for part in template.split(FIELD) if len(part.strip()) >= MIN_PIECE]


def carried(template: str, binary: BinaryStrings) -> bool:
    """Whether a release whose libraries hold ``binary`` carries a message of ``template``."""
    found = pieces(template)
    return bool(found) and all(binary.holds(piece) for piece in found)


def attention_strings(binary: BinaryStrings) -> list[str]:
    """The strings of a binary that read as attention messages: words (16+ characters, a space),
    an attention term, not an operator schema, TorchScript or an INTERNAL ASSERT's file:line, not
    another string with one more byte."""
    return sorted(
        line
        for line in binary.lines
        if len(line) >= 16
        and " " in line
        and line[0].isalpha()
        and _ATTENTION.search(line)
        and not _NOT_A_MESSAGE.search(line)
        and line[:-1] not in binary.lines  # a string and the byte after it: noise
    )


def library_of(path: str) -> str | None:
    """The library a C++ file is compiled into (None: a header, inlined in either)."""
    if path.endswith((".h", ".cuh")):
        return None
    if "/cuda/" in path or "/cudnn/" in path or path.endswith(".cu"):
        return "libtorch_cuda.so"
    return "libtorch_cpu.so"


@dataclass(frozen=True)
class Analysis:
    messages: list[RawMessage]
    from_binary: int  # messages read only as strings of a library


_ANALYSED: dict[tuple[str, str], Analysis] = {}


@dataclass(frozen=True)
class TorchCpp:
    distribution: str = "torch"
    folder: str = CPP

    def releases(self, cache: Path) -> list[str]:
        root = cache / self.folder
        found = [
            child.name
            for child in (root.iterdir() if root.is_dir() else [])
            if (child / DONE).exists() and is_version(child.name)
        ]
        return sorted(found, key=Version)

    def sources(self, cache: Path, version: str) -> Iterator[tuple[str, str, bool]]:
        """(path, text, exact) of every file read for ``version``: its own (exact), then the
        pool's versions of the files it has no own copy of."""
        own: dict[str, Path] = {}
        release = cache / self.folder / version
        for sub, prefix in (("src", ""), ("include", "aten/src/")):
            base = release / sub
            for path in sorted(base.rglob("*")) if base.is_dir() else []:
                if path.is_file() and path.suffix in (".h", ".cpp", ".cu"):
                    own.setdefault(prefix + path.relative_to(base).as_posix(), path)
        for name, path in sorted(own.items()):
            yield name, path.read_text(encoding="utf-8", errors="replace"), True
        for label in self.pool_labels(cache):
            base = cache / self.folder / "pool" / label
            for path in sorted(base.rglob("*")):
                name = path.relative_to(base).as_posix()
                if path.is_file() and name != "SOURCE" and name not in own:
                    yield name, path.read_text(encoding="utf-8", errors="replace"), False

    def files(self, cache: Path, version: str) -> Iterator[tuple[str, str]]:
        for name, text, _exact in self.sources(cache, version):
            yield name, text

    def pool_labels(self, cache: Path) -> list[str]:
        """The pool's labels, newest first (a label starts with its year: 2026-main-...)."""
        base = cache / self.folder / "pool"
        return sorted((p.name for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []

    def binaries(self, cache: Path, version: str) -> dict[str, BinaryStrings]:
        """Each library's strings: {"libtorch_cuda.so": ..., "libtorch_cpu.so": ...}."""
        found = sorted((cache / self.folder / version).glob("*.strings.gz"))
        return {path.name.removesuffix(".strings.gz"): BinaryStrings.read([path]) for path in found}

    def analyse(self, cache: Path, version: str) -> Analysis:
        key = (str(cache.resolve()), version)
        if key not in _ANALYSED:
            _ANALYSED[key] = self._analyse(cache, version)
        return _ANALYSED[key]

    def _analyse(self, cache: Path, version: str) -> Analysis:
        binaries = self.binaries(cache, version)
        seen: dict[tuple[str, str, str, str], RawMessage] = {}
        for name, text, exact in self.sources(cache, version):
            library = library_of(name)
            # a file's checks are in the library that compiles it; a header's in either
            where = (
                list(binaries.values())
                if library is None
                else [b for n, b in binaries.items() if n == library]
            )
            for message in cpp_source.extract(text, name):
                key = (message.file, message.function, message.kind, message.template)
                if key in seen:
                    continue
                if exact or any(carried(message.template, binary) for binary in where):
                    seen[key] = message
        texts = [message.template for message in seen.values()]
        from_binary = 0
        for library, binary in sorted(binaries.items()):
            for line in attention_strings(binary):
                if not any(line.strip() in text for text in texts):
                    message = RawMessage(f"torch/lib/{library}", "", "binary string", line, "")
                    seen.setdefault((message.file, "", message.kind, line), message)
                    from_binary += 1
        return Analysis(list(seen.values()), from_binary)

    def messages(self, cache: Path, version: str) -> list[RawMessage]:
        """The release's messages: its own files' all, the pool's those its binary holds (the
        newest pooled wording first; one entry per file, function, kind and text), then the
        binary's attention strings that none of these holds."""
        return self.analyse(cache, version).messages

    def uncovered(self, cache: Path, version: str) -> list[str]:
        """The binary's attention strings that no source entry of the release holds."""
        return [m.template for m in self.messages(cache, version) if m.kind == "binary string"]

    def unread(self, cache: Path) -> list[str]:
        out = []
        for version in self.releases(cache):
            release = cache / self.folder / version
            if not (release / "src").is_dir():
                out.append(
                    f"torch {version} (C++): the .cpp/.cu files at its commit could not be downloaded; "
                    "read from the wheel's headers and the pool, each message checked against the "
                    "binary's strings"
                )
            missing = self.uncovered(cache, version)
            if missing:
                out.append(
                    f"torch {version} (C++): {len(missing)} attention messages read only as strings of "
                    f"libtorch_cuda/cpu.so (no source of that wording), e.g. {missing[0]!r}"
                )
        return out

    def fetch(
        self, cache: Path, versions: list[str] | None = None, log: Callable[[str], None] = print
    ) -> None:
        """torch's wheels (shared with the Python source), then each release's own C++ files
        from GitHub at its commit where the network allows."""
        TORCH.fetch(cache, versions, log)
        for version in self.releases(cache):
            release = cache / self.folder / version
            marker = release / "git_version"
            commit = marker.read_text().strip() if marker.exists() else ""
            if not commit or (release / "src" / DONE).exists():
                continue
            got, unreachable = 0, False
            for path in FILES:
                try:
                    with urllib.request.urlopen(RAW.format(commit=commit, path=path), timeout=30) as response:
                        data = response.read()
                except urllib.error.HTTPError:
                    continue  # GitHub answered: the file is not at that commit
                except (urllib.error.URLError, TimeoutError, OSError):
                    unreachable = True
                    break
                (release / "src" / path).parent.mkdir(parents=True, exist_ok=True)
                (release / "src" / path).write_bytes(data)
                got += 1
            if unreachable:
                log("torch (C++): GitHub cannot be reached; the releases' own .cpp/.cu files are not read")
                return
            if got:
                (release / "src" / DONE).write_text(f"pytorch/pytorch@{commit}\n")
            log(f"torch {version} (C++ at {commit[:12]}): {got} of {len(FILES)} files")


TORCH_CPP = TorchCpp()
