"""The environment: the one fact model that probing, what-if inputs, matching and reporting share.

A fact that was not (or could not be) established is ``None``; a fact that was established as
absent has its own value (no GPU: an empty ``gpus`` list with ``gpu_source="none"``). The
matcher turns missing facts into "unknown" verdicts, never into passes.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from packaging.version import Version

from attn_doctor import __version__
from attn_doctor.errors import InputError
from attn_doctor.facts.features import FeatureFact, FeatureSet, check_feature_name, check_model_family

ENV_SCHEMA_ID = "attn-doctor/environment"
ENV_SCHEMA_VERSION = 5
# 1: features was a plain list (or null), no origins or target; 2: no gfx for GPUs; 3: no cpus or
# memory_gb; 4: no model families or "searched" in features (none found; not searched)
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)
THIS_MACHINE = "this machine"
MAX_VERSION_CHARS = 64  # no release, driver or CUDA version comes near; 4,301 digits would crash int()
# origins["packages"] of a target whose package list is open: a log names only some of its packages,
# an image's record only some of the image's, so one they do not name is unknown, not absent (a
# probed machine or a requirements file is closed); each with the words for what did not name it
OPEN_PACKAGE_LIST = "the log (a package it does not name may still be installed)"
OPEN_IMAGE_PACKAGE_LIST = "the image's record (a package it does not name may still be installed)"
# a Dockerfile FROM an image whose contents are not known, or with an install line it cannot read
OPEN_DOCKERFILE_PACKAGE_LIST = (
    "the Dockerfile's lines (its base image, or an install it does not read, may hold other packages)"
)
OPEN_PACKAGE_LISTS = {
    OPEN_PACKAGE_LIST: "the log",
    OPEN_IMAGE_PACKAGE_LIST: "the image's record",
    OPEN_DOCKERFILE_PACKAGE_LIST: "the Dockerfile's lines",
}
# origins["over: torch"]: what a layer of a declared target replaced ("FILE:LINE (2.6.0)"), for -v
REPLACED = "over: "
ABSENT = "absent: "  # origins["absent: xformers"]: where the log says the package is not installed
# origins["maybe: triton"]: a package that some of the releases a stated package can be require (torch
# without a version: its old releases pin no triton): installed or not, not known
MAYBE = "maybe: "
# origins["unread: Dockerfile:35"]: a line of a declared target's file that was not read (pip install
# -e ., an image whose contents are not known): what it installs is unknown, the rest is read
UNREAD = "unread: "
# The shapes of the numeric facts: what reads them splits on "." and calls int() on the parts, so
# "9.0.0", "9.a", "¹.²" (str.isdigit, but not int) or "-1" must stop where the file is read.
# ASCII digits only: Python's \d also takes "٩".
CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]")  # NVIDIA's major.minor, as NVML and nvidia-smi print it
NUMERIC_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")  # a driver (550.54.15), CUDA or nvcc (12.4)
PYTHON_VERSION = re.compile(r"[0-9]+\.[0-9]+(?:\.[0-9]+)?[0-9A-Za-z+]*")  # 3.12.4, 3.13.0rc1, 3.14.0a1+
ROCM_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*(?:[-+][0-9A-Za-z.]+)?")  # torch.version.hip
_SHAPES = {
    CAPABILITY: "a compute capability (major.minor, e.g. 9.0)",
    NUMERIC_VERSION: "a version of digits and dots (e.g. 12.4, 550.54.15)",
    PYTHON_VERSION: "a Python version (e.g. 3.12.4)",
    ROCM_VERSION: "a ROCm version (e.g. 6.2.41133-dd7f95766)",
}


@dataclass(frozen=True)
class Package:
    """One installed (or declared) distribution.

    ``version`` is the raw version string (``None`` when declared without a pin); ``origin``
    says where the fact came from (a dist-info folder, ``requirements.txt:3``, ``--pin``).
    """

    name: str
    version: str | None
    distribution: str
    origin: str
    # version unknown, but only these releases can be it (a log's messages exist in these alone)
    releases: tuple[str, ...] = ()
    # another package's pin that disagrees with this stated version ("torch 2.7.1 pins triton==3.3.1"):
    # the stated version wins, and the disagreement is often the cause
    pinned_by: str | None = None
    # version unknown, declared with this PEP 440 specifier set ("" = unpinned): the releases it
    # admits are what the version can be (None: not stated, e.g. a VCS install)
    specifier: str | None = None
    # the wheel file the target installs (a URL or a local file: a binary already built, for the
    # torch and CUDA its name says), e.g. flash_attn-2.8.3+cu128torch2.10-cp312-cp312-linux_x86_64.whl
    wheel: str | None = None


@dataclass(frozen=True)
class TorchBuild:
    """The accelerator runtime torch was built for; both None means a CPU build."""

    cuda: str | None = None
    hip: str | None = None


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str | None  # NVIDIA: "major.minor", e.g. "9.0"
    driver: str | None = None
    gfx: str | None = None  # AMD: the LLVM target, e.g. "gfx942" (MI300X)
    # capability unknown but one of these (a log's "Hardware limit: 101376" is a 99 KiB GPU)
    capabilities: tuple[str, ...] = ()

    @property
    def sm(self) -> str:
        """``sm_90``; ``sm_?`` where the compute capability is not known."""
        return f"sm_{self.compute_capability.replace('.', '')}" if self.compute_capability else "sm_?"

    def name_and_sm(self) -> str:
        """``H100 (sm_90)``; a GPU named after its architecture (``--gpu sm_90``) only once."""
        return self.name if self.name == self.sm else f"{self.name} ({self.sm})"

    def sm_and_name(self) -> str:
        """``sm_90 (H100)``; a GPU named after its architecture only once."""
        return self.sm if self.name == self.sm else f"{self.sm} ({self.name})"


@dataclass
class Environment:
    """The facts of one target. ``origins`` says where each fact other than packages, GPUs and
    features came from (those carry their own): a fact that is None *with* an origin was
    established absent (``nvcc`` not on PATH), None without one is unknown (a declared target
    that does not state its CUDA toolkit)."""

    packages: dict[str, Package] = field(default_factory=dict)
    torch_build: TorchBuild | None = None
    gpus: list[Gpu] = field(default_factory=list)
    # how the GPU list was established: nvml | nvidia-smi | none | target | unknown
    gpu_source: str = "unknown"
    nvcc: str | None = None
    python: str | None = None
    platform: str | None = None  # linux | windows | darwin
    machine: str | None = None  # x86_64, aarch64, AMD64, arm64 (platform.machine())
    os: str | None = None
    libc: str | None = None
    cpus: int | None = None  # the host's, for sizing a source build (MAX_JOBS)
    memory_gb: float | None = None  # the host's physical memory, GiB
    features: FeatureSet = field(default_factory=FeatureSet)
    # what the facts were built from, in order: "this machine", "--env-file x.json", "--pin ..."
    sources: list[str] = field(default_factory=list)
    target: str = THIS_MACHINE  # one line for report headers: "requirements.txt (5 packages)"
    origins: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def gpu_counts(self) -> dict[Gpu, int]:
        """Each different GPU once, in the order first listed, with how many the target has: a rule
        asks each question once per kind of GPU (eight H100s, or a file of 200,000, answer as one).
        Counted on first use, after the environment is built."""
        return dict(Counter(self.gpus))

    @property
    def distinct_gpus(self) -> list[Gpu]:
        return list(self.gpu_counts)

    def absent(self, name: str) -> bool | None:
        """Whether a package missing from ``packages`` is known to be absent (None: it may be there).
        On an open package list (a log's, an image's), only what a log says is missing ("No module
        named 'x'")."""
        if MAYBE + name in self.origins:
            return None
        if self.origins.get("packages") not in OPEN_PACKAGE_LISTS:
            return True
        return True if ABSENT + name in self.origins else None

    def with_packages(self, overrides: dict[str, Package], source: str) -> Environment:
        """A copy in which ``overrides`` replace the packages of the same name."""
        packages = {**self.packages, **overrides}
        torch_build = self.torch_build
        if "torch" in overrides:
            torch_build = torch_build_from_version(overrides["torch"].version)
        return replace(self, packages=packages, torch_build=torch_build, sources=[*self.sources, source])

    def to_json_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, features=FeatureSet()))
        data["features"] = {
            "declared": self.features.declared,
            "facts": [_feature_json(fact) for fact in self.features.facts.values()],
            "models": [_feature_json(fact) for fact in self.features.models().values()],
            "searched": self.features.searched,
        }
        return {"schema": ENV_SCHEMA_ID, "schema_version": ENV_SCHEMA_VERSION, **data}

    def to_json(self) -> str:
        return json.dumps(self.to_json_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_json_dict(cls, data: Any, source: str) -> Environment:
        """Rebuild from ``probe --json`` output; ``source`` names the file in errors."""
        if not isinstance(data, dict) or data.get("schema") != ENV_SCHEMA_ID:
            raise InputError(source, f'not an attn-doctor environment (no "schema": "{ENV_SCHEMA_ID}")')
        version = data.get("schema_version")
        if isinstance(version, bool) or version not in READABLE_SCHEMA_VERSIONS:  # true == 1 in Python
            raise InputError(source, _unsupported_version(data.get("schema_version")))
        # version 4 added cpus and memory_gb: an older file's are unknown
        optional = {"cpus", "memory_gb"} if data["schema_version"] < 4 else set()
        optional |= {"target", "origins", "machine"} if data["schema_version"] == 1 else set()
        missing = [f.name for f in fields(cls) if f.name not in data and f.name not in optional]
        if missing:
            raise InputError(source, f"malformed environment: missing {', '.join(missing)}")
        try:
            packages = {
                name: Package(
                    name=name,
                    version=_package_version(p["version"], f"packages.{name}.version"),
                    distribution=_text(p["distribution"]),
                    origin=f"{source}",
                    releases=tuple(
                        _text(_package_version(_text(r), f"packages.{name}.releases"))
                        for r in _list(_mapping(p).get("releases") or [])
                    ),
                    pinned_by=_opt_str(_mapping(p).get("pinned_by")),
                    specifier=_opt_str(_mapping(p).get("specifier")),
                    wheel=_opt_str(_mapping(p).get("wheel")),
                )
                for name, p in _mapping(data["packages"]).items()
            }
            build = data["torch_build"]
            torch_build = (
                None
                if build is None
                else TorchBuild(
                    cuda=_shaped(_mapping(build)["cuda"], "torch_build.cuda", NUMERIC_VERSION),
                    hip=_shaped(_mapping(build)["hip"], "torch_build.hip", ROCM_VERSION),
                )
            )
            gpus = [
                Gpu(
                    name=_text(g["name"]),
                    compute_capability=_shaped(
                        g["compute_capability"], f"gpus[{i}].compute_capability", CAPABILITY
                    ),
                    driver=_shaped(g["driver"], f"gpus[{i}].driver", NUMERIC_VERSION),
                    gfx=_opt_str(g.get("gfx")),
                    capabilities=tuple(
                        _text(_shaped(c, f"gpus[{i}].capabilities", CAPABILITY))
                        for c in _list(_mapping(g).get("capabilities") or [])
                    ),
                )
                for i, g in enumerate(_list(data["gpus"]))
            ]
            return cls(
                packages=packages,
                torch_build=torch_build,
                gpus=gpus,
                gpu_source=_text(data["gpu_source"]),
                nvcc=_shaped(data["nvcc"], "nvcc", NUMERIC_VERSION),
                python=_shaped(data["python"], "python", PYTHON_VERSION),
                platform=_opt_str(data["platform"]),
                machine=_opt_str(data.get("machine")),
                os=_opt_str(data["os"]),
                libc=_opt_str(data["libc"]),
                cpus=_opt_number(data.get("cpus"), int, "cpus"),
                memory_gb=_opt_number(data.get("memory_gb"), float, "memory_gb"),
                features=_features(data["features"], source),
                sources=[f"--env-file {source}"],
                target=f"{source} (facts from another machine)",
                origins={str(k): f"{source} ({v})" for k, v in _mapping(data.get("origins", {})).items()},
            )
        except _BadField as exc:
            raise InputError(source, f"malformed environment: {exc}") from None
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            problem = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            raise InputError(source, f"malformed environment: {problem}") from None


class _BadField(ValueError):
    """A field whose value has the wrong shape; the message names the field."""


def _opt_number(value: Any, kind: type[int] | type[float], name: str) -> Any:
    """A positive number or null (older probe files have none)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 2**40:
        raise _BadField(f"{name}: {value!r} is not a positive number")
    return kind(value)


def _shaped(value: Any, name: str, shape: re.Pattern[str]) -> str | None:
    """A numeric fact (a capability, driver, CUDA or Python version) in its one shape, or null:
    checked here, so that no int() further on meets "9.0.0" or "1e3"."""
    text = _opt_version(value, name)
    if text is not None and not shape.fullmatch(text):
        raise _BadField(f"{name}: {text!r} is not {_SHAPES[shape]}")
    return text


def _package_version(value: Any, name: str) -> str | None:
    """A package's version: PEP 440 (what --pin and requirements files demand), or null."""
    text = _opt_version(value, name)
    if text is not None:
        try:
            Version(text)
        except ValueError:  # InvalidVersion
            raise _BadField(f"{name}: {text!r} is not a valid PEP 440 version") from None
    return text


_PLATFORM_MARKERS = {
    "linux": {"platform_system": "Linux", "sys_platform": "linux", "os_name": "posix"},
    "windows": {"platform_system": "Windows", "sys_platform": "win32", "os_name": "nt"},
    "darwin": {"platform_system": "Darwin", "sys_platform": "darwin", "os_name": "posix"},
}


def marker_environment(env: Environment) -> dict[str, str]:
    """PEP 508 marker values of the target, for reading what its releases require there; facts the
    target does not state are left out, so a marker that needs them does not apply."""
    values = dict(_PLATFORM_MARKERS.get(env.platform or "", {}))
    if env.machine:
        values["platform_machine"] = env.machine
    if env.python:
        values["python_full_version"] = env.python
        values["python_version"] = ".".join(env.python.split(".")[:2])
    values |= {"implementation_name": "cpython", "platform_python_implementation": "CPython"}
    return values


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_MARKER_NAMES = re.compile(
    r"\b(python_version|python_full_version|platform_machine|platform_system|sys_platform|os_name"
    r"|implementation_name|platform_python_implementation|platform_release|platform_version"
    r"|implementation_version)\b"
)


def marker_states(marker: str, markers: dict[str, str]) -> bool:
    """Whether ``markers`` state every fact ``marker`` reads. packaging fills the others with the
    runner's own values (its Python, its machine), which are not the target's: a marker that
    needs a fact the target does not state must not be evaluated."""
    return all(name in markers for name in _MARKER_NAMES.findall(_QUOTED.sub("", marker)))


def describe_torch_build(build: TorchBuild | None) -> str:
    """``CUDA 12.1``, ``ROCm 6.2``, ``CPU`` or ``unknown``."""
    if build is None:
        return "unknown"
    if build.cuda:
        return f"CUDA {build.cuda}"
    return f"ROCm {build.hip}" if build.hip else "CPU"


def torch_build_from_version(version: str | None) -> TorchBuild | None:
    """Read the build from a local label: ``2.5.1+cu121`` is CUDA 12.1, ``+cpu`` a CPU build.

    Without a label the build is unknown (the default wheel differs between releases).
    """
    if not version or "+" not in version:
        return None
    label = version.split("+", 1)[1].lower()
    if label == "cpu" or label.startswith("cpu."):
        return TorchBuild()
    if label.startswith("cu") and label[2:].isascii() and label[2:].isdigit() and len(label) >= 4:
        digits = label[2:]
        return TorchBuild(cuda=f"{digits[:-1]}.{digits[-1]}")
    if label.startswith("rocm"):
        return TorchBuild(hip=label[4:])
    return None


def _unsupported_version(version: Any) -> str:
    if isinstance(version, int) and version > ENV_SCHEMA_VERSION:
        return (
            f"schema_version {version} is newer than attn-doctor {__version__} reads "
            f"({ENV_SCHEMA_VERSION}): upgrade attn-doctor here, or probe with the same version there"
        )
    return (
        f"schema_version {version!r} is not supported (attn-doctor {__version__} reads {ENV_SCHEMA_VERSION})"
    )


def _features(value: Any, source: str) -> FeatureSet:
    """Version 1: a list of declared names (or null); version 2: the feature facts; later files add
    the model families found and whether the project was searched for a source tree (``searched``)."""
    if value is None:
        return FeatureSet()
    if isinstance(value, list):
        return FeatureSet.declare(value, f"{source} features")
    declared = _opt_str(_mapping(value).get("declared"))
    features = FeatureSet(declared=None if declared is None else f"{source} ({declared})")
    for key, check_name, where in (
        ("facts", check_feature_name, "features"),
        ("models", check_model_family, "features.models"),
    ):
        for item in _list(value.get(key, [])):
            fact = _mapping(item)
            check_name(fact.get("name"), f"{source} {where}")
            evidence = tuple(str(e) for e in _list(fact.get("evidence", [])))
            features.add(
                FeatureFact(str(fact["name"]), bool(fact["in_use"]), f"{source}: {fact['source']}", evidence)
            )
    searched = value.get("searched", False)
    if not isinstance(searched, bool):
        raise _BadField(f"features.searched: {searched!r} is not true or false")
    features.searched = searched
    return features


def _feature_json(fact: FeatureFact) -> dict[str, Any]:
    """A feature fact as the env file keeps it: without ``scoped``, as the scan's files (what each
    shows) stay on the machine that scanned; read back, its facts hold everywhere."""
    data = asdict(fact)
    del data["scoped"]
    return data


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _opt_version(value: Any, name: str) -> str | None:
    """A version fact (a package's, CUDA's, the driver's): a short string or null."""
    text = _opt_str(value)
    if text is not None and len(text) > MAX_VERSION_CHARS:
        raise _BadField(f"{name}: a version of {len(text):,} characters (at most {MAX_VERSION_CHARS})")
    return text


def _opt_str(value: Any) -> str | None:
    """A string fact or null; anything else (``"nvcc": true``) is malformed, never coerced."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"expected a string or null, got {type(value).__name__}")
    return value


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value
