"""Facts stated in a log: the versions, GPU, Python and platform a user's pasted log names.

Users paste more than the traceback: a ``pip freeze`` or ``pip list`` block, ``collect_env`` or
``transformers env`` output, ``ds_report``, an nvidia-smi table, wheel file names, and every
traceback frame names the folder it ran from. Each of those is a fact about the stack that
produced the log, labelled "from the log, line N", and fills what ``--pin``/``-r``/``--gpu`` did
not give. A frame in ``site-packages/flash_attn/`` proves flash-attn is installed, version unknown.

Cost is bounded like the symptom scan: candidate lines (at most FACT_LINE_CAP bytes) are found by
substring search of a few literals over whole blocks, each candidate meets a handful of regexes
that are linear in the line, and collection stops after MAX_CANDIDATE_LINES candidates (a 100 MB
log of frames says nothing more after the first ones).
The first statement of a fact wins, except that a listing (freeze, collect_env, pip list) beats a
passing mention and a passing mention beats a frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from attn_doctor.explain.reader import Block
from attn_doctor.explain.symptoms import LiteralIndex
from attn_doctor.facts import log_features, missing_names
from attn_doctor.facts.gpus import CAPABILITIES, gpus_in_text
from attn_doctor.facts.log_frames import MAX_FRAMES, MODULES, Frame, frame_of
from attn_doctor.facts.missing_names import MissingName
from attn_doctor.facts.model import Gpu, Package
from attn_doctor.facts.model_families import families_in
from attn_doctor.facts.names import WATCHED, installed_name, rule_name

MAX_CANDIDATE_LINES = 10_000
MAX_MISSING_NAMES = 32  # distinct API errors kept: a log repeating one per rank says nothing new
FROM_THE_LOG = "from the log, "  # every origin this module gives starts so: "from the log, line 12"
FACT_LINE_CAP = 1024  # a version, frame or GPU is stated in a short line; longer ones are not read
_NAMED_GPU_LINE = 512  # nvidia-smi rows and messages naming a GPU are short; a name lookup is not free
_GPU_WORDS = ("NVIDIA", "Tesla", "GeForce", "AMD", "Radeon", "Instinct", "gfx")

# how a version was stated, strongest first: a listing beats a mention beats a frame
LISTING, MENTION, FRAME = 0, 1, 2

_LITERALS = (
    b"==",
    b"ersion",  # "version", "Version": collect_env, transformers env, ds_report, "torch version"
    b"site-packages",
    b"dist-packages",
    b".whl",
    b"-info",  # .dist-info, .egg-info
    b"installed",  # "Successfully installed a-1 b-2"
    b"satisfied",  # "Requirement already satisfied: torch in ... (2.5.1)"
    b"sm_",
    b"apability",  # "CUDA capability 7.5", "compute capability"
    b"cuda:",
    b"arch=",
    b"NVIDIA",
    b"Tesla",
    b"GeForce",
    b"Radeon",
    b"Instinct",
    b"gfx",
    b"Cuda compilation tools",
    b".so",
    b"[conda]",
    b"CUDA used to build",
    b'File "',
    # package names in prose ("torch 2.6.0", "- PyTorch: 2.3.1+cu121", "flash_attn  2.7.4.post1")
    b"orch",
    b"lash",
    b"ransformers",
    b"riton",
    b"formers",
    b"ython",
    b"fla",
    b"ccelerate",
    b"peft",
    *missing_names.LITERALS,
    *log_features.LITERALS,
    b"Hardware limit: ",
    b"as it is not installed",
)

# names users write for the stack's packages, lower-case -> distribution
_SPOKEN = {
    "pytorch": "torch",
    "torch": "torch",
    "triton": "triton",
    "pytorch-triton": "triton",
    "transformers": "transformers",
    "flash-attn": "flash-attn",
    "flash_attn": "flash-attn",
    "flash-attention": "flash-attn",
    "flashattention": "flash-attn",
    "flash-attn-3": "flash-attn-3",
    "flash_attn_3": "flash-attn-3",
    "xformers": "xformers",
    "fla-core": "flash-linear-attention",
    "flash-linear-attention": "flash-linear-attention",
    "fla": "flash-linear-attention",
    "accelerate": "accelerate",
    "peft": "peft",
    "deepspeed": "deepspeed",
    "vllm": "vllm",
    "liger-kernel": "liger-kernel",
    "liger_kernel": "liger-kernel",
}
_WATCHED = {rule_name(name) for name in WATCHED}

_MODULES = MODULES  # top-level import names -> distribution (log_frames)

_VERSION = r"v?([0-9]+\.[0-9]+(?:\.[0-9A-Za-z]+)*(?:\+[0-9A-Za-z.]+)?)"
# a name starts a token and is short, so each start position costs a bounded number of steps
_NAME = r"(?<![A-Za-z0-9._-])([A-Za-z][A-Za-z0-9._-]{0,60})"
_PINNED = re.compile(_NAME + r"\s?==\s?" + _VERSION)
# "torch version: 2.5.1", "PyTorch version (GPU?): 2.4.0+cu121", "torch version ...... 2.1.0",
# "- `transformers` version: 4.44.0", "flash_attn version 2.6.3", "Torch: 2.1.2"
_STATED = re.compile(r"`?" + _NAME + r"`?(?: version)?(?: \([^)]{0,40}\))?[ \t]?[:=.][ \t.]{0,60}" + _VERSION)
# in prose only a full release counts: "torch 2.5 wheels" names a series, not the installed version
_SPOKEN_VERSION = re.compile(_NAME + r" v?([0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+]*)")
# pip list / conda list: "torch            2.5.1", "[conda] pytorch   2.5.1   py3.10_cuda12.1_0   pytorch"
_LISTED = re.compile(r"^\s*(?:\[(?:pip3?|conda)\]\s+)?" + _NAME + r"\s{2,}" + _VERSION + r"(?:\s|$)")
# wheel / dist-info names: flash_attn-2.6.3+cu123torch2.4cxx11abiFALSE-cp310-..., torch-2.5.1.dist-info
_ARTIFACT = re.compile(_NAME + r"-" + _VERSION + r"(?:\.dist-info|\.egg-info|-cp3|-py3|\.tar\.gz)")
_INSTALLED = re.compile(r"Successfully installed (.{1,4000})")
_SATISFIED = re.compile(r"Requirement already satisfied: " + _NAME + r"[^(]{0,300}\(" + _VERSION + r"\)")
_FRAME_PATH = re.compile(r"(?:site|dist)-packages[/\\]([A-Za-z_][A-Za-z0-9_]*)")
_PYTHON_PATH = re.compile(r"[Pp]ython(3)\.?([0-9]{1,2})[/\\](?:site|dist)-packages")
_CPYTHON = re.compile(r"cpython-3([0-9]{1,2})-|-cp3([0-9]{1,2})-")
_PYTHON_STATED = re.compile(r"\b[Pp]ython(?: version)?:? ?3\.([0-9]{1,2})\b")
_TORCH_CUDA = re.compile(r"CUDA used to build PyTorch: ([0-9]+\.[0-9]+)")
_NVCC = re.compile(r"Cuda compilation tools, release ([0-9]+\.[0-9]+)")
_DRIVER = re.compile(r"(?:Driver Version|[Dd]river version): ?([0-9]{3,4}\.[0-9]+(?:\.[0-9]+)?)")
_SM = re.compile(
    r"[Cc]apability:? sm_([0-9]{2,3})|[Cc]apability:? ([0-9]{1,2})\.([0-9])"
    r"|Value 'sm_([0-9]{2,3})a?' is not defined|GPUTarget\(backend='cuda', arch=([0-9]{2,3})"
    r"|\bcuda:([0-9]{2,3})\b"
)


@dataclass
class LogFacts:
    """What a log states about its stack; every fact's origin is "from the log, line N"."""

    packages: dict[str, Package] = field(default_factory=dict)
    strength: dict[str, int] = field(default_factory=dict)  # package -> LISTING | MENTION | FRAME
    gpus: list[Gpu] = field(default_factory=list)
    gpu_origin: str = ""
    python: str | None = None
    platform: str | None = None
    driver: str | None = None
    torch_cuda: str | None = None
    nvcc: str | None = None
    origins: dict[str, str] = field(default_factory=dict)
    innermost_package: str | None = None  # the package of the last traceback frame read
    frames: list[Frame] = field(default_factory=list)  # the last MAX_FRAMES traceback frames
    missing: list[MissingName] = field(default_factory=list)  # API errors: names the stack lacks
    # feature (or model family) -> the first line that shows it
    features: dict[str, int] = field(default_factory=dict)
    mentioned: set[str] = field(default_factory=set)  # packages whose names the log holds anywhere
    absent: dict[str, str] = field(default_factory=dict)  # packages the log says are missing -> origin

    def add_package(self, name: str, version: str | None, line: int, strength: int) -> None:
        name = installed_name(name, version)
        if name not in _WATCHED:
            return
        known = self.strength.get(name)
        if known is not None and known <= strength:
            return
        origin = f"{FROM_THE_LOG}line {line}"
        self.packages[name] = Package(name, version, name, origin)
        self.strength[name] = strength

    def imply(self, distribution: str, releases: tuple[str, ...], line: int) -> None:
        """The package is one of ``releases`` (only they print the message on ``line``): a fact
        where the log names no version, never over one it states."""
        name = installed_name(distribution, None)
        known = self.packages.get(name)
        if name not in _WATCHED or not releases or (known is not None and known.version is not None):
            return
        origin = f"from the message, line {line}"
        self.packages[name] = Package(name, None, name, origin, releases=releases)
        self.strength.setdefault(name, FRAME)

    def state(self, fact: str, value: str, line: int) -> None:
        """Set a scalar fact (python, platform, driver, torch_cuda, nvcc) once, at its first statement."""
        if getattr(self, fact) is None:
            setattr(self, fact, value)
            self.origins[fact] = f"{FROM_THE_LOG}line {line}"


# the log says a package is missing: Python could not import its top-level module, pip has none
_NOT_INSTALLED = re.compile(
    r"No module named '([A-Za-z_][A-Za-z0-9_]*)'"
    r"|WARNING: Skipping ([A-Za-z0-9_.-]{1,60}) as it is not installed"
)
# triton: "out of resource: shared memory, Required: 131072, Hardware limit: 101376": the limit is
# the GPU's opt-in shared memory per block (CUDA C++ Programming Guide, technical specifications)
_SHARED_MEMORY = re.compile(r"Hardware limit: ([0-9]{4,7})\b")
SHARED_MEMORY_PER_BLOCK = {
    65536: ("7.5",),  # 64 KiB: Turing
    98304: ("7.0", "7.2"),  # 96 KiB: Volta
    101376: ("8.6", "8.9", "12.0", "12.1"),  # 99 KiB: consumer Ampere, Ada, consumer Blackwell
    166912: ("8.0", "8.7"),  # 163 KiB: A100, Orin
    232448: ("9.0", "10.0", "10.3"),  # 227 KiB: Hopper, datacenter Blackwell
}


def gpu_of_shared_memory(limit: int) -> Gpu | None:
    """The GPU a shared-memory limit names: one capability, or the class it can be."""
    capabilities = SHARED_MEMORY_PER_BLOCK.get(limit)
    if capabilities is None:
        return None
    classes = "/".join(f"sm_{c.replace('.', '')}" for c in capabilities)
    name = f"{classes} class ({limit // 1024} KiB shared memory per block)"
    if len(capabilities) == 1:
        return Gpu(name=name, compute_capability=capabilities[0])
    return Gpu(name=name, compute_capability=None, capabilities=capabilities)


class LogFactCollector:
    """Fed the log's blocks (the same ones the symptom scan reads), collects LogFacts."""

    def __init__(self) -> None:
        self.facts = LogFacts()
        self.candidates = 0
        # one pass a block for all the literals (a search per literal steps a byte at a time
        # through a run of spaces, as explain's symptom scan did: issue 28)
        self._index = LiteralIndex(list(dict.fromkeys(_LITERALS)))

    def feed(self, block: Block) -> None:
        if len(self.facts.mentioned) < len(log_features.MENTIONS):
            self.facts.mentioned |= log_features.mentioned_in(block.text)
        for family, offset in families_in(block.text):  # every block: past the candidates' cap too
            line = block.first_line + block.text.count(b"\n", 0, offset)
            self.facts.features.setdefault(family, line)
        if self.candidates >= MAX_CANDIDATE_LINES:
            return
        lines: dict[bytes, list[tuple[int, int]]] = {}
        for start, end, literal in self._index.lines(block.text):
            lines.setdefault(literal, []).append((start, end))
        starts: dict[int, int] = {}
        for literal in _LITERALS:  # in this order, as the cap below has always counted them
            for start, end in lines.get(literal, ()):
                if end - start > FACT_LINE_CAP:
                    continue
                starts[start] = end
                if len(starts) + self.candidates >= MAX_CANDIDATE_LINES:
                    break
        counted_to, line_number = 0, block.first_line
        for start in sorted(starts):
            line_number += block.text.count(b"\n", counted_to, start)
            counted_to = start
            self._read_line(block.text[start : starts[start]].decode("utf-8", "replace"), line_number)
        self.candidates += len(starts)

    def _read_line(self, line: str, number: int) -> None:
        facts = self.facts
        self._versions(line, number)
        for feature in log_features.features_of(line):
            facts.features.setdefault(feature, number)
        if found := _NOT_INSTALLED.search(line):
            name = _MODULES.get(found[1]) or _distribution(found[2] or "")
            if name in _WATCHED and name not in facts.packages:
                facts.absent.setdefault(name, f"{FROM_THE_LOG}line {number}")
        if 'File "' in line:
            frame = frame_of(line, number)
            facts.innermost_package = frame.package if frame else None
            if frame is not None:
                facts.frames.append(frame)
                del facts.frames[:-MAX_FRAMES]
        for module in _FRAME_PATH.findall(line):
            if module in _MODULES:
                facts.add_package(_MODULES[module], None, number, FRAME)
        if found := _PYTHON_PATH.search(line) or _CPYTHON.search(line) or _PYTHON_STATED.search(line):
            minor = next(group for group in found.groups()[::-1] if group and group != "3")
            facts.state("python", f"3.{minor}", number)
        if "site-packages\\" in line or "win_amd64" in line or "\\lib\\site-packages" in line:
            facts.state("platform", "windows", number)
        elif "macosx_" in line or "/Users/" in line and "site-packages" in line:
            facts.state("platform", "darwin", number)
        elif "linux-gnu.so" in line or "linux_x86_64" in line or "/site-packages/" in line:
            facts.state("platform", "linux", number)
        if found := _TORCH_CUDA.search(line):
            facts.state("torch_cuda", found[1], number)
        if found := _NVCC.search(line):
            facts.state("nvcc", found[1], number)
        if found := _DRIVER.search(line):
            facts.state("driver", found[1], number)
        self._gpus(line, number)
        self._missing(line, number)

    def _versions(self, line: str, number: int) -> None:
        add = self.facts.add_package
        for name, version in _PINNED.findall(line):
            add(_distribution(name), version, number, LISTING)
        if found := _LISTED.match(line):
            add(_distribution(found[1]), found[2], number, LISTING)
        if found := _SATISFIED.search(line):
            add(_distribution(found[1]), found[2], number, LISTING)
        if found := _INSTALLED.search(line):
            for token in found[1].split():
                name, _, version = token.rpartition("-")
                if name and version[:1].isdigit():
                    add(_distribution(name), version, number, LISTING)
        for name, version in _ARTIFACT.findall(line):
            add(_distribution(name), _wheel_version(version), number, MENTION)
        for pattern in (_STATED, _SPOKEN_VERSION):
            for name, version in pattern.findall(line):
                add(_distribution(name), version, number, MENTION)

    def _missing(self, line: str, number: int) -> None:
        """API errors; the module an import error names proves its package installed."""
        facts = self.facts
        for seen in missing_names.missing_in(line, f"{FROM_THE_LOG}line {number}"):
            if len(facts.missing) < MAX_MISSING_NAMES and all(
                (seen.kind, seen.owner, seen.name) != (m.kind, m.owner, m.name) for m in facts.missing
            ):
                facts.missing.append(seen)
            top = (seen.package_module or "").split(".")[0]
            if top in _MODULES:
                facts.add_package(_MODULES[top], None, number, FRAME)

    def _gpus(self, line: str, number: int) -> None:
        facts = self.facts
        if facts.gpus:
            return
        if (limit := _SHARED_MEMORY.search(line)) and (gpu := gpu_of_shared_memory(int(limit[1]))):
            facts.gpus, facts.gpu_origin = [gpu], f"{FROM_THE_LOG}line {number}"
            return
        name, capability = "", None
        if found := _SM.search(line):
            groups = found.groups()
            digits = groups[0] or groups[3] or groups[4] or groups[5]
            capability = f"{digits[:-1]}.{digits[-1]}" if digits else f"{groups[1]}.{groups[2]}"
            name = f"sm_{capability.replace('.', '')}"
        if len(line) <= _NAMED_GPU_LINE and any(word in line for word in _GPU_WORDS):
            named = gpus_in_text(line)
            nvidia = [(written, cc) for written, cc in named if cc in CAPABILITIES]
            if nvidia and capability in (None, nvidia[0][1]):
                name, capability = nvidia[0]
            elif capability is None and (amd := [(w, gfx) for w, gfx in named if gfx.startswith("gfx")]):
                facts.gpus = [Gpu(name=amd[0][0], compute_capability=None, gfx=amd[0][1])]
        if capability in CAPABILITIES:
            facts.gpus = [Gpu(name=name, compute_capability=capability)]
        if facts.gpus:
            facts.gpu_origin = f"{FROM_THE_LOG}line {number}"


def _distribution(written: str) -> str:
    """The distribution a name as written in a log means (``PyTorch`` -> torch)."""
    lowered = written.strip("`'\"").lower()
    return _SPOKEN.get(lowered, _SPOKEN.get(lowered.replace("_", "-"), rule_name(lowered)))


def _wheel_version(version: str) -> str:
    """flash-attn's wheel labels (``2.6.3+cu123torch2.4cxx11abiFALSE``) are not the version."""
    return version.split("+", 1)[0] if "torch" in version else version
