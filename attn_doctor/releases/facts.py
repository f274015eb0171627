"""The release-facts snapshot: what each release of the stack requires and ships, as its own
metadata and build matrix state it (docs/release-facts.md; tools/refresh_release_facts.py writes it).

Loaded lazily, one package file at a time: `check` reads only the packages its rules ask about.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from attn_doctor.facts.model import marker_states
from attn_doctor.facts.names import canonical_name

if TYPE_CHECKING:  # imported where they are read: `check` on a clean machine never needs them
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    from attn_doctor.facts.model import Environment
    from attn_doctor.releases.api_changes import ApiChanges

SNAPSHOT = Path(__file__).resolve().parent / "snapshot"


@dataclass(frozen=True)
class Release:
    version: str
    uploaded: str | None
    yanked: bool
    requires_python: str | None
    requires_dist: tuple[str, ...] | None  # None: the metadata could not be read
    metadata_from: str | None


@dataclass(frozen=True)
class Wheel:
    """One prebuilt flash-attn wheel of a release's build matrix."""

    torch: str  # as the workflow writes it: "2.4.0"
    cuda: str  # "12.3.2"
    python: str  # "3.11"
    cxx11_abi: bool
    archs: tuple[str, ...] = ()  # the sm_XX it has code for (setup.py's gencodes this CUDA builds)


# a variant whose architecture list is inferred, not read from the wheel, a build script or users' output
UNCONFIRMED_VARIANT = ("inferred", "unverified")


@dataclass(frozen=True)
class TorchVariant:
    """The wheels of one torch release built with one CUDA release (``cu128``)."""

    torch: str
    name: str  # cu128
    archs: tuple[
        str, ...
    ]  # compute capabilities with code in the wheels ("8.0"); release wheels carry no PTX
    references: tuple[str, ...]


class ReleaseFacts:
    def __init__(self, folder: Path = SNAPSHOT) -> None:
        self.folder = folder
        self._releases: dict[str, dict[str, Release]] = {}
        # answers asked again and again by the fix search (one per release per rule per plan)
        self._requirements: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Requirement] | None] = {}
        self._wheels: dict[str, list[Wheel] | None] = {}

    @functools.cached_property
    def meta(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.folder / "meta.json").read_text(encoding="utf-8"))
        return data

    @property
    def generated(self) -> str:
        return str(self.meta["generated"])

    def releases(self, package: str) -> dict[str, Release]:
        """Every final release of ``package`` (a distribution name, any spelling) in the snapshot."""
        name = canonical_name(package)
        if name not in self._releases:
            self._releases[name] = self._read(name)
        return self._releases[name]

    @functools.cached_property
    def _registry(self) -> frozenset[str]:
        """The packages with a registry file, listed once: a requirements file may name 500,000
        others, and a hostile METADATA Name is no file of ours."""
        folder = self.folder / "registry"
        return frozenset(path.stem for path in folder.glob("*.json")) if folder.is_dir() else frozenset()

    def knows(self, package: str) -> bool:
        """Whether the snapshot has the releases of ``package`` (a distribution name, any spelling)."""
        return canonical_name(package) in self._registry

    def _read(self, name: str) -> dict[str, Release]:
        if name not in self._registry:
            return {}
        path = self.folder / "registry" / f"{name}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        return {
            version: Release(
                version=version,
                uploaded=entry.get("uploaded"),
                yanked=bool(entry.get("yanked")),
                requires_python=entry.get("requires_python"),
                requires_dist=None if entry.get("requires_dist") is None else tuple(entry["requires_dist"]),
                metadata_from=entry.get("metadata_from"),
            )
            for version, entry in data["releases"].items()
        }

    def release(self, package: str, version: str) -> Release | None:
        """The release a version is a build of: ``2.5.1+cu121`` is a build of 2.5.1."""
        releases = self.releases(package)
        if not releases:
            return None
        try:
            public = Version(version).public
        except ValueError:  # InvalidVersion, or a number past the int-string limit
            return None
        return releases.get(public) or next(
            (r for v, r in releases.items() if _same_version(v, public)), None
        )

    def is_newer_than_snapshot(self, package: str, version: str) -> bool:
        """Newer than every release the snapshot knows (read from meta.json: no package file)."""
        newest = self.meta["packages"].get(canonical_name(package), {}).get("newest")
        parsed = None if newest is None else _parsed(version)
        return parsed is not None and Version(parsed.public) > Version(newest)

    def newer_than_snapshot(self, env: Environment) -> list[str]:
        """A line per package of ``env`` newer than every release the snapshot knows: rules drawn
        from release facts can say nothing of it, and the report says so rather than call it clean."""
        newer = f"is newer than the release database (snapshot of {self.generated})"
        return [
            f"{package.name} {package.version} {newer}: checks drawn from release facts cannot judge it"
            for package in env.packages.values()
            if package.version and self.is_newer_than_snapshot(package.distribution, package.version)
        ]

    def requirements(self, package: str, version: str, markers: dict[str, str]) -> list[Requirement] | None:
        """What that release requires on the target ``markers`` describe; None when not known."""
        if not self.knows(package):
            return None
        key = (package, version, tuple(sorted(markers.items())))
        if key not in self._requirements:
            self._requirements[key] = self._read_requirements(package, version, markers)
        return self._requirements[key]

    def _read_requirements(
        self, package: str, version: str, markers: dict[str, str]
    ) -> list[Requirement] | None:
        from packaging.requirements import InvalidRequirement, Requirement

        release = self.release(package, version)
        if release is None or release.requires_dist is None:
            return None
        required = []
        for text in release.requires_dist:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is None or _applies(requirement.marker, markers):
                required.append(requirement)
        return required

    @functools.cached_property
    def _flash_attn(self) -> dict[str, Any]:
        return self._snapshot_file("flash-attn-wheels.json")

    def flash_attn_wheels(self, version: str) -> list[Wheel] | None:
        """The prebuilt wheels of a flash-attn release; None when the snapshot does not know it."""
        if version not in self._wheels:
            self._wheels[version] = self._read_wheels(version)
        return self._wheels[version]

    def _read_wheels(self, version: str) -> list[Wheel] | None:
        try:
            public = Version(version).public
        except ValueError:  # InvalidVersion, or a number past the int-string limit
            return None
        entry = self._flash_attn.get(public)
        if entry is None:
            return None
        minimum = entry.get("arch_min_cuda", {})

        def archs(cuda: str) -> tuple[str, ...]:
            return tuple(a for a in entry.get("archs", []) if _at_least(cuda, minimum.get(a)))

        return [
            Wheel(w["torch"], w["cuda"], w["python"], bool(w["cxx11_abi"]), archs(w["cuda"]))
            for w in entry["wheels"]
        ]

    @functools.cached_property
    def _torch_cuda_archs(self) -> dict[str, Any]:
        return self._snapshot_file("torch-cuda-archs.json")

    def torch_variant(self, version: str, cuda: str) -> TorchVariant | None:
        """The GPU architectures of torch ``version``'s wheels built with CUDA ``cuda`` ("12.8");
        None when the snapshot does not know that release and variant, or only infers its list."""
        try:
            public = Version(version).public
        except ValueError:  # InvalidVersion, or a number past the int-string limit
            return None
        name = "cu" + "".join(cuda.split(".")[:2])
        return next((v for v in self.torch_variants(public) if v.name == name), None)

    def torch_cuda_variant_names(self, version: str) -> set[str]:
        """Every CUDA variant (cu124, ...) a torch release was published in, its arch list known or not."""
        return set(self._torch_cuda_archs.get("releases", {}).get(version, {}).get("variants", {}))

    def torch_releases_with_variants(self) -> list[str]:
        return list(self._torch_cuda_archs.get("releases", {}))

    @functools.cached_property
    def _torch_cxx11_abi(self) -> dict[str, Any]:
        return self._snapshot_file("torch-cxx11-abi.json")

    def torch_cxx11_abi(self, version: str) -> bool | None:
        """Whether torch ``version``'s Linux x86_64 wheel (of its public version: 2.7.0+cu126 is 2.7.0)
        was built with the C++11 ABI, as read from the wheel itself (tools/torch_cxx11_abi.py); None
        when the snapshot did not read that release."""
        parsed = _parsed(version)
        if parsed is None:
            return None
        releases: dict[str, Any] = self._torch_cxx11_abi.get("releases", {})
        entry = next((e for v, e in releases.items() if _same_version(v, parsed.public)), None)
        return None if entry is None else bool(entry["abi"])

    def ngc_pytorch_images(self) -> dict[str, dict[str, Any]]:
        """What each NGC PyTorch image (``YY.MM``) ships, by NVIDIA's release notes."""
        images: dict[str, dict[str, Any]] = self._snapshot_file("ngc-pytorch-images.json").get("images", {})
        return images

    def torch_variants(self, version: str) -> list[TorchVariant]:
        """Every confirmed CUDA variant of a torch release (``version`` public, "2.7.0")."""
        entry = self._torch_cuda_archs.get("releases", {}).get(version, {})
        return [
            TorchVariant(
                version,
                name,
                tuple(f"sm_{arch.replace('.', '')}" for arch in variant["archs"]),
                tuple(entry["references"]),
            )
            for name, variant in entry.get("variants", {}).items()
            if variant["status"] not in UNCONFIRMED_VARIANT
        ]

    @functools.cached_property
    def _drivers(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (Path(__file__).parent / "cuda_drivers.json").read_text(encoding="utf-8")
        )
        return data

    def minimum_driver(self, cuda_major: str, platform: str) -> str | None:
        """NVIDIA's minimum driver for a CUDA major release on ``platform`` (linux, windows)."""
        value = self._drivers["minimum_driver"].get(cuda_major, {}).get(platform)
        return None if value is None else str(value)

    @functools.cached_property
    def api_changes(self) -> ApiChanges:
        from attn_doctor.releases.api_changes import ApiChanges

        return ApiChanges(self._snapshot_file("api-changes.json"))

    @functools.cached_property
    def _triton_ptxas(self) -> dict[str, Any]:
        return self._snapshot_file("triton-ptxas.json")

    def _snapshot_file(self, name: str) -> dict[str, Any]:
        """A JSON file of the snapshot; empty when this snapshot has none (an older one)."""
        path = self.folder / name
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return data

    def triton_ptxas(self, version: str, blackwell: bool) -> str | None:
        """The CUDA release of the ptxas a triton release bundles (its Blackwell one if it has one
        and ``blackwell``); None when the snapshot does not know the release."""
        try:
            public = Version(version).public
        except ValueError:  # InvalidVersion, or a number past the int-string limit
            return None
        entry = self._triton_ptxas.get("releases", {}).get(public)
        if entry is None:
            return None
        chosen = entry.get("ptxas_blackwell") if blackwell else None
        return str(chosen or entry["ptxas"])

    def ptxas_archs(self, cuda: str) -> set[str] | None:
        """The newest GPU architectures a ptxas of this CUDA release knows (NVIDIA's table, from
        the CUDA release that added each); None when the table is missing."""
        table = self._triton_ptxas.get("cuda_archs")
        if not table:
            return None
        return {arch for added, archs in table.items() if _at_least(cuda, added) for arch in archs}

    def triton_ptxas_cuda_archs(self) -> dict[str, list[str]]:
        """NVIDIA's table: the CUDA release that added each GPU architecture ("12.8": sm_100, sm_120)."""
        table: dict[str, list[str]] = self._triton_ptxas.get("cuda_archs", {})
        return table

    def first_triton_with_arch(self, sm: str) -> str | None:
        """The first triton release whose bundled ptxas knows ``sm`` (its ``archs``, read per tag)."""
        releases = self._triton_ptxas.get("releases", {})
        having = [version for version, entry in releases.items() if sm in entry.get("archs", [])]
        return min(having, key=Version, default=None)

    def archs_some_ptxas_lacks(self) -> set[str]:
        """The architectures some bundled ptxas lacks: those newer than the oldest one's CUDA."""
        releases = self._triton_ptxas.get("releases", {}).values()
        oldest = min((str(r["ptxas"]) for r in releases if r.get("ptxas")), key=Version, default="0")
        every = {arch for archs in self._triton_ptxas.get("cuda_archs", {}).values() for arch in archs}
        return every - (self.ptxas_archs(oldest) or set())

    def flash_attn_versions(self) -> list[str]:
        """The releases with a known build matrix that were published on the registry (a tag such
        as v2.7.0 has a matrix, but only 2.7.0.post2 was published)."""
        published = set(self.releases("flash-attn"))
        return sorted((v for v in self._flash_attn if v in published), key=Version)


def _applies(marker: Marker, markers: dict[str, str]) -> bool:
    """A marker the target's facts cannot decide (an ``extra``, a Python it does not state) does not
    apply."""
    from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName

    if not marker_states(str(marker), markers):
        return False
    try:
        return marker.evaluate({"extra": "", **markers})
    except (UndefinedComparison, UndefinedEnvironmentName, InvalidMarker):
        return False


def _at_least(cuda: str, minimum: str | None) -> bool:
    parsed, floor = _parsed(cuda), _parsed(minimum or "0")
    return parsed is not None and floor is not None and parsed >= floor


def _parsed(version: str) -> Version | None:
    try:
        return Version(version)
    except ValueError:  # InvalidVersion, or a number past the int-string limit
        return None


def _same_version(left: str, right: str) -> bool:
    a, b = _parsed(left), _parsed(right)
    return a is not None and b is not None and a == b


@functools.lru_cache(maxsize=1)
def snapshot() -> ReleaseFacts:
    return ReleaseFacts()
