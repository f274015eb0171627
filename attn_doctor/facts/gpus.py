"""GPUs: probed through NVML (ctypes, no import of torch) or nvidia-smi, or named as a target.

No GPU is a fact (``gpu_source="none"``), not an error.
"""

from __future__ import annotations

import ctypes
import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from attn_doctor.errors import InputError
from attn_doctor.facts.model import CAPABILITY, NUMERIC_VERSION, Gpu

NVIDIA_SMI_TIMEOUT_S = 5.0
NVML_LIBRARY = "libnvidia-ml.so.1"  # the driver's, where the dynamic loader finds it

# Every compute capability NVIDIA has shipped (CUDA GPUs table, CUDA 13 release notes); a target
# outside it is a typo (sm_999, 0.0), not a GPU.
CAPABILITIES = [
    "3.0",
    "3.2",
    "3.5",
    "3.7",
    "5.0",
    "5.2",
    "5.3",
    "6.0",
    "6.1",
    "6.2",
    "7.0",
    "7.2",
    "7.5",
    "8.0",
    "8.6",
    "8.7",
    "8.8",
    "8.9",
    "9.0",
    "10.0",
    "10.1",
    "10.3",
    "11.0",
    "12.0",
    "12.1",
]

_SM_FORM = re.compile(r"(?:sm_?|compute_?)?([0-9]{2,3})[af]?", re.I)  # ASCII: \d takes "٩" too
_DOTTED_FORM = re.compile(r"([0-9]{1,2})\.([0-9])")


def target_gpu(spec: str, source: str = "--gpu") -> Gpu:
    """A target GPU: ``sm_90``, ``sm_90a``, ``90``, ``9.0``, a name such as ``H100``; or an AMD
    one, ``gfx942`` or a name such as ``MI300X`` (its gfx target, no compute capability)."""
    text = spec.strip()
    dotted, sm_form = _DOTTED_FORM.fullmatch(text), _SM_FORM.fullmatch(text)
    if dotted or sm_form:
        digits = f"{dotted[1]}{dotted[2]}" if dotted else sm_form[1]  # type: ignore[index]
        capability = f"{digits[:-1]}.{digits[-1]}"
        if capability not in CAPABILITIES:
            raise InputError(
                f"{source} {spec!r}",
                f"no GPU has compute capability {capability} (known: {', '.join(CAPABILITIES)})",
            )
        return Gpu(name=f"sm_{digits}", compute_capability=capability)
    named = capability_from_name(text)
    if named is not None:
        return Gpu(name=text, compute_capability=named)
    gfx = gfx_from_name(text)
    if gfx is None:
        raise InputError(
            f"{source} {spec!r}",
            "not a compute capability (sm_90, 9.0), a gfx target (gfx942) or a known GPU name "
            "(A100, H100, L40S, RTX 4090, T4, MI300X, RX 7900 XTX, ...)",
        )
    return Gpu(name=text, compute_capability=None, gfx=gfx)


def capability_from_name(name: str) -> str | None:
    """Compute capability of an NVIDIA product name as NVML, nvidia-smi or a user writes it, if known."""
    return _lookup(name, "nvidia")


def gfx_from_name(name: str) -> str | None:
    """LLVM target (``gfx942``) of an AMD product name (``AMD Instinct MI300X``), or of a gfx target."""
    target = name.strip().lower()
    if _GFX_TARGET.fullmatch(target):
        return target
    return _lookup(name, "amd")


def gpus_in_text(line: str) -> list[tuple[str, str]]:
    """GPU names in a log line, each as written with its capability (``9.0``) or gfx target (``gfx942``).

    One pass over the line's words (the line is cut at ``MAX_LINE``): no regular expression runs over
    the whole line but a plain word split, so a long or hostile line costs linear time.
    """
    text = line[:MAX_LINE]
    every = _words(text)
    kept = [place for place, word in enumerate(every) if not _is_filler(word[0])]
    words = [every[place] for place in kept]
    index = _index()
    found: list[tuple[str, str]] = []
    position = 0
    while position < len(words):
        word = words[position][0]
        if _GFX_TARGET.fullmatch(word.lower()):
            found.append((text[words[position][1] : words[position][2]], word.lower()))
            position += 1
            continue
        hit = _longest_at(words, position, index)
        if hit is None or (
            len(hit[0]) == 1 and _needs_vendor(hit[0][0]) and not _after_vendor(words, position)
        ):
            position += 1
            continue
        key, (_, value) = hit
        first, last = kept[position], kept[position + len(key) - 1]
        while (
            first > 0
            and every[first - 1][0] in _VENDOR_WORDS
            and _joined(text, every[first - 1], every[first])
        ):
            first -= 1
        while (
            last + 1 < len(every)
            and _is_descriptor(every[last + 1][0], every[last][0])
            and _joined(text, every[last], every[last + 1])
        ):
            last += 1
        found.append((text[every[first][1] : every[last][2]], value))
        position += len(key)
        while position < len(words) and kept[position] <= last:
            position += 1
    return found


# A line longer than this is cut before it is searched: no log line names a GPU past it.
MAX_LINE = 4096

_DATA_FILE = Path(__file__).with_name("gpu_names.json")
_GFX_TARGET = re.compile(r"gfx[0-9]{2,4}[0-9a-f]")
_WORD = re.compile(r"[A-Za-z0-9]+")
# Vendor and family words that may stand before a product (``NVIDIA GeForce RTX 4090``) and are
# dropped from the table's names to make their keys (``Quadro RTX 6000`` -> ``RTX 6000``).
_VENDOR_WORDS = frozenset({"NVIDIA", "GEFORCE", "TESLA", "QUADRO", "AMD", "RADEON", "INSTINCT", "JETSON"})
# Words that only say which edition or package a product comes in: removed from names and from what
# is looked up alike, so ``RTX 4000 SFF Ada Generation`` and ``RTX PRO 6000 Blackwell Max-Q
# Workstation Edition`` meet the table's rows.
_FILLER_WORDS = frozenset({"EDITION", "GENERATION", "SFF", "MAX", "Q", "WORKSTATION", "SERVER", "BLACKWELL"})
_DESCRIPTORS = frozenset(
    {"LAPTOP", "GPU", "MOBILE", "NVL", "PCIE", "OAM", "SUPER", "D", "ADA", "DUAL", "SLOT", "TI"}
    | _FILLER_WORDS
)
_MEMORY = re.compile(r"[0-9]+G[B]?")
_FORM = re.compile(r"(?:SXM|HBM)[0-9]*E?")
# ``3080Ti``, ``4090D``, ``RTX4090``: a number glued to its suffix or its family, split in two.
_GLUED_SUFFIX = re.compile(r"([0-9]{3,4})(TI|SUPER|D|M|S|XT|XTX|GRE)")
_GLUED_FAMILY = re.compile(r"(RTX|GTX|RX)([0-9]{3,4}[A-Z]*)")

_Key = tuple[str, ...]
_Index = dict[_Key, tuple[str, str]]


def _is_filler(word: str) -> bool:
    """Edition and memory-size words, skipped when names are compared."""
    return word in _FILLER_WORDS or bool(_MEMORY.fullmatch(word))


def _plain(text: str) -> list[tuple[str, int, int]]:
    """The words of ``text`` that names are compared on."""
    return [word for word in _words(text) if not _is_filler(word[0])]


def _is_descriptor(word: str, before: str) -> bool:
    """A word that still belongs to the product name just matched (``80GB``, ``Laptop GPU``)."""
    if word == "GPU":
        return before == "LAPTOP"
    return word in _DESCRIPTORS or bool(_MEMORY.fullmatch(word) or _FORM.fullmatch(word))


def _joined(text: str, left: tuple[str, int, int], right: tuple[str, int, int]) -> bool:
    """Two words of one name: only blanks, hyphens or underscores between them, on one line."""
    return all(ch in " \t-_" for ch in text[left[2] : right[1]])


def _words(text: str) -> list[tuple[str, int, int]]:
    """Upper-cased words with their spans, glued suffixes (``3080Ti``) split in two."""
    words: list[tuple[str, int, int]] = []
    for match in _WORD.finditer(text):
        word, start, end = match.group().upper(), match.start(), match.end()
        family = _GLUED_FAMILY.fullmatch(word)
        if family:
            cut = start + len(family[1])
            words.append((family[1], start, cut))
            word, start = family[2], cut
        glued = _GLUED_SUFFIX.fullmatch(word)
        if glued:
            cut = start + len(glued[1])
            words += [(glued[1], start, cut), (glued[2], cut, end)]
        else:
            words.append((word, start, end))
    return words


def _keys(name: str, vendor: str) -> list[_Key]:
    """The word sequences that name a table row: its name less vendor words, and short forms."""
    words = tuple(word for word, _, _ in _plain(name.split("(")[0]))
    aside = name.partition("(")[2].rstrip(")")  # ``NVIDIA GB10 (DGX Spark)``
    core = words
    while len(core) > 1 and core[0] in _VENDOR_WORDS:
        core = core[1:]
    if len(core) == 1 and not any(ch.isdigit() for ch in core[0]):
        core = words[-2:]  # ``Jetson Nano``, ``Radeon VII``: one bare word is too easily met in text
    keys = [core]
    if aside and not _MEMORY.fullmatch(aside.upper()):
        keys.append(tuple(word for word, _, _ in _plain(aside)))
    if vendor == "nvidia" and len(core) == 2 and core[0] == "RTX" and core[1].startswith("A"):
        keys.append(core[1:])  # ``RTX A6000`` is written ``A6000``
    if vendor == "amd":
        for lead in (("AI", "PRO"), ("PRO",), ("RX",)):
            if core[: len(lead)] == lead and len(core) > len(lead):
                rest = core[len(lead) :]
                if len(rest) > 1 or any(ch.isdigit() for ch in rest[0]):
                    keys.append(rest)
    return keys


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    with _DATA_FILE.open(encoding="utf-8") as handle:
        table: dict[str, Any] = json.load(handle)
    return table


def _rows() -> list[tuple[str, str, str]]:
    """(vendor, name as the source writes it, capability or gfx target) for every entry."""
    table = _table()
    rows = [
        ("nvidia", name, capability)
        for group in table["nvidia"].values()
        for capability, names in group.items()
        for name in names
    ]
    rows += [("nvidia", variant["name"], variant["capability"]) for variant in table["nvidia_variants"]]
    rows += [("amd", name, gfx) for gfx, names in table["amd"].items() for name in names]
    return rows


@functools.lru_cache(maxsize=1)
def _index() -> _Index:
    index: _Index = {}
    for vendor, name, value in _rows():
        for key in _keys(name, vendor):
            index.setdefault(key, (vendor, value))
    return index


@functools.lru_cache(maxsize=1)
def _longest_key() -> int:
    return max(len(key) for key in _index())


def _longest_at(
    words: list[tuple[str, int, int]], position: int, index: _Index
) -> tuple[_Key, tuple[str, str]] | None:
    for length in range(min(_longest_key(), len(words) - position), 0, -1):
        key = tuple(word for word, _, _ in words[position : position + length])
        if key in index:
            return key, index[key]
    return None


def _needs_vendor(word: str) -> bool:
    """Short bare words (``T4``, ``A2``, ``L4``) count in free text only after a vendor word."""
    return len(word) <= 3 or not any(ch.isdigit() for ch in word)


def _after_vendor(words: list[tuple[str, int, int]], position: int) -> bool:
    return position > 0 and words[position - 1][0] in _VENDOR_WORDS


def _lookup(name: str, vendor: str) -> str | None:
    words = _plain(name[:MAX_LINE])
    index = _index()
    best: tuple[_Key, tuple[str, str]] | None = None
    for position in range(len(words)):
        hit = _longest_at(words, position, index)
        if hit and hit[1][0] == vendor and (best is None or len(hit[0]) > len(best[0])):
            best = hit
    return best[1][1] if best else None


def known_gpus() -> dict[str, str]:
    """Every NVIDIA name in the data file and its compute capability (read on first use)."""
    return {name: value for vendor, name, value in _rows() if vendor == "nvidia"}


def __getattr__(name: str) -> Any:
    # ``KNOWN_GPUS`` is built from the data file when first asked for, not at import
    if name == "KNOWN_GPUS":
        return known_gpus()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def probe_gpus() -> tuple[list[Gpu], str]:
    """The GPUs of this machine and how they were found (``nvml``, ``nvidia-smi`` or ``none``)."""
    gpus = _from_nvml()
    if gpus is not None:
        return gpus, "nvml" if gpus else "none"
    gpus = _from_nvidia_smi()
    if gpus is not None:
        return gpus, "nvidia-smi" if gpus else "none"
    return [], "none"


def _from_nvml() -> list[Gpu] | None:
    """None when NVML is not there or fails; the driver library is all this needs."""
    try:
        nvml = ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        driver_buffer = ctypes.create_string_buffer(96)
        nvml.nvmlSystemGetDriverVersion(driver_buffer, 96)
        driver = driver_buffer.value.decode(errors="replace") or None
        gpus = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return None
            name_buffer = ctypes.create_string_buffer(96)
            nvml.nvmlDeviceGetName(handle, name_buffer, 96)
            major, minor = ctypes.c_int(), ctypes.c_int()
            status = nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor))
            name = name_buffer.value.decode(errors="replace")
            capability = f"{major.value}.{minor.value}" if status == 0 else None
            if capability is None or not CAPABILITY.fullmatch(capability):
                capability = capability_from_name(name)
            gpus.append(Gpu(name=name, compute_capability=capability, driver=_driver(driver)))
        return gpus
    finally:
        nvml.nvmlShutdown()


def _from_nvidia_smi() -> list[Gpu] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    rows = _query_nvidia_smi("name,compute_cap,driver_version")
    if rows is None:  # drivers before 510 do not know the compute_cap field
        rows = [[name, "", driver] for name, driver in _query_nvidia_smi("name,driver_version") or []]
    gpus = []
    for row in rows:
        if len(row) != 3:
            return None
        name, capability, driver = row
        if not CAPABILITY.fullmatch(capability):
            capability = capability_from_name(name) or ""
        gpus.append(Gpu(name=name, compute_capability=capability or None, driver=_driver(driver)))
    return gpus


def _driver(text: str | None) -> str | None:
    """The driver version in the one shape an environment file may hold ("[N/A]" is unknown)."""
    return text if text and NUMERIC_VERSION.fullmatch(text) else None


def _query_nvidia_smi(fields: str) -> list[list[str]] | None:
    try:
        result = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in result.stdout.splitlines() if line.strip()]
