"""Conditions decided by the release-facts snapshot rather than by ranges written in a rule:
what a release's own metadata requires, and which prebuilt wheels a release ships.

Each gives a tri-state ``Reason`` like every other condition, and where it holds, a fix computed
for the target's versions from the snapshot (``Reason.suggestion``): only releases that exist.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from packaging.version import Version

from attn_doctor.engine.api_change import api_changed
from attn_doctor.engine.matcher import (
    MISSING_DRIVER,
    MISSING_GPU,
    MISSING_RELEASE_DATA,
    MISSING_TORCH_BUILD,
    MISSING_VERSION,
    RELEASE,
    Reason,
    not_installed,
)
from attn_doctor.engine.schema import Affects
from attn_doctor.facts.missing_names import MissingName
from attn_doctor.facts.model import Environment, Gpu, Package, marker_environment
from attn_doctor.facts.names import rule_name
from attn_doctor.releases.facts import ReleaseFacts, Wheel, snapshot

if TYPE_CHECKING:  # annotations only: a clean machine's check never parses a requirement
    from packaging.requirements import Requirement


def reasons(
    affects: Affects,
    env: Environment,
    observed: tuple[MissingName, ...] = (),
    facts: ReleaseFacts | None = None,
) -> list[Reason]:
    """``observed``: the API errors a log shows (explain), for ``api_change``."""
    facts = facts or snapshot()
    found = []
    if affects.requirement_unmet is not None:
        package, on = affects.requirement_unmet
        found.append(requirement_unmet(package, on, env, facts))
    if affects.prebuilt_wheel_missing is not None:
        found.append(prebuilt_wheel_missing(affects.prebuilt_wheel_missing, env, facts))
    if affects.prebuilt_wheel_lacks_gpu is not None:
        found.append(prebuilt_wheel_lacks_gpu(affects.prebuilt_wheel_lacks_gpu, env, facts))
    if affects.driver_below_cuda_minimum:
        found.append(driver_below_cuda_minimum(env, facts))
    if affects.bundled_ptxas_lacks_gpu is not None:
        found.append(bundled_ptxas_lacks_gpu(affects.bundled_ptxas_lacks_gpu, env, facts))
    if affects.torch_variant_lacks_gpu:
        found.append(torch_variant_lacks_gpu(env, facts))
    if affects.api_change is not None:
        found.append(api_changed(affects.api_change, observed, env, facts))
    return found


def torch_variant_lacks_gpu(env: Environment, facts: ReleaseFacts) -> Reason:
    """Holds when the wheels of torch's release for its CUDA build have no code for a target GPU
    (sm_120 on cu126 wheels, sm_70 on 2.7's and 2.11's cu128): every kernel then fails with "no
    kernel image is available". The fix names the variants of that release that have it."""
    torch = env.packages.get("torch")
    if torch is None or torch.version is None:
        return Reason(
            RELEASE, False if torch is None else None, "torch version unknown", missing=MISSING_VERSION
        )
    if env.torch_build is None or env.torch_build.cuda is None:
        known = env.torch_build is not None
        return Reason(
            RELEASE,
            False if known else None,
            "torch's build is not a known CUDA build",
            missing=MISSING_TORCH_BUILD,
        )
    if not env.gpus:
        if env.gpu_source == "none":
            return Reason(RELEASE, False, "no NVIDIA GPU here: nothing to run on")
        return Reason(RELEASE, None, "GPUs not known (no --gpu target)", missing=MISSING_GPU)
    variant = facts.torch_variant(torch.version, env.torch_build.cuda)
    if variant is None:
        why = f"torch {torch.version} with CUDA {env.torch_build.cuda}: architectures not in the database"
        return Reason(RELEASE, None, why, torch.origin, missing=MISSING_RELEASE_DATA)
    for gpu in env.distinct_gpus:
        capability = gpu.compute_capability
        if capability and not covers(variant.archs, capability):
            sm = gpu.sm
            built = f"torch {variant.torch}+{variant.name} has code for {' '.join(variant.archs)}"
            text = f"{built}, not {gpu.sm_and_name()}"
            others = [v.name for v in facts.torch_variants(variant.torch) if covers(v.archs, capability)]
            # a variant is a wheel index, not a version pip resolves: said, not pinned
            suggestion = (
                f"torch {variant.torch} from the {' or '.join(others)} wheels (has {sm})"
                if others
                else f"none: no CUDA variant of torch {variant.torch} has {sm}; another torch release"
            )
            return Reason(RELEASE, True, text, torch.origin, suggestion=suggestion)
    if any(gpu.compute_capability is None for gpu in env.distinct_gpus):
        return Reason(RELEASE, None, "compute capability of a GPU is unknown", missing=MISSING_GPU)
    return Reason(RELEASE, False, f"torch {variant.torch}+{variant.name} has code for every GPU here")


def bundled_ptxas_lacks_gpu(package_name: str, env: Environment, facts: ReleaseFacts) -> Reason:
    """Holds when the ptxas a triton release bundles (its Blackwell one for Blackwell GPUs, where
    it has one) comes from a CUDA release older than the GPU's architecture: compiling any kernel
    fails with "Value 'sm_120' is not defined for option 'gpu-name'"."""
    package = env.packages.get(package_name)
    if package is None or package.version is None:
        return Reason(
            RELEASE,
            False if package is None else None,
            f"{package_name} version unknown",
            missing=MISSING_VERSION,
        )
    if not env.gpus:
        if env.gpu_source == "none":
            return Reason(RELEASE, False, "no NVIDIA GPU here: nothing to compile for")
        return Reason(RELEASE, None, "GPUs not known (no --gpu target)", missing=MISSING_GPU)
    late = facts.archs_some_ptxas_lacks()
    for gpu in env.distinct_gpus:
        sm = gpu.sm
        if sm not in late:
            continue  # an architecture every bundled ptxas knows (Hopper and older), or unknown
        ptxas = facts.triton_ptxas(package.version, blackwell=True)
        archs = None if ptxas is None else facts.ptxas_archs(ptxas)
        if ptxas is None or archs is None:
            return _not_known(facts, package)
        if sm not in archs:
            text = f"{package.name} {package.version} bundles ptxas {ptxas}, which has no {gpu.sm_and_name()}"
            none = f"none: no {package.name} release in the database bundles a ptxas with {sm}"
            reason = Reason(RELEASE, True, text, package.origin)
            return _with_options(reason, _ptxas_with(package, sm, facts), none)
    return Reason(RELEASE, False, f"{package.name} {package.version}'s bundled ptxas knows every GPU here")


def _ptxas_with(package: Package, sm: str, facts: ReleaseFacts) -> list[Option]:
    assert package.version is not None
    installed = Version(Version(package.version).public)
    fitting = []
    for version in facts.releases(package.distribution):
        ptxas = facts.triton_ptxas(version, blackwell=True)
        if Version(version) > installed and ptxas and sm in (facts.ptxas_archs(ptxas) or set()):
            fitting.append(Version(version))
    return [(package.name, str(min(fitting)), f"bundles a ptxas with {sm}")] if fitting else []


def driver_below_cuda_minimum(env: Environment, facts: ReleaseFacts) -> Reason:
    """Holds when the NVIDIA driver is older than NVIDIA's minimum for torch's CUDA major release."""
    if env.torch_build is None or env.torch_build.cuda is None:
        known = env.torch_build is not None
        return Reason(
            RELEASE,
            False if known else None,
            "torch's build is not a known CUDA build",
            missing=MISSING_TORCH_BUILD,
        )
    drivers = sorted({gpu.driver for gpu in env.distinct_gpus if gpu.driver}, key=driver_key)
    if not drivers:
        if env.gpu_source == "none":
            return Reason(RELEASE, False, "no NVIDIA GPU, so no NVIDIA driver in use")
        return Reason(RELEASE, None, "NVIDIA driver version unknown", missing=MISSING_DRIVER)
    major = env.torch_build.cuda.split(".")[0]
    minimum = facts.minimum_driver(major, env.platform or "linux")
    if minimum is None:
        why = f"no minimum driver known for CUDA {major}.x on {env.platform}"
        return Reason(RELEASE, None, why, missing=MISSING_RELEASE_DATA)
    oldest = drivers[0]
    holds = driver_key(oldest) < driver_key(minimum)
    relation = "is older than" if holds else "meets"
    text = (
        f"NVIDIA driver {oldest} {relation} the minimum for CUDA {major}.x ({minimum}; "
        f"torch is built with CUDA {env.torch_build.cuda})"
    )
    return Reason(RELEASE, holds, text, suggestion=f"an NVIDIA driver >= {minimum}" if holds else None)


def driver_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def _not_known(facts: ReleaseFacts, package: Package) -> Reason:
    assert package.version is not None
    if facts.is_newer_than_snapshot(package.distribution, package.version):
        why = f"is newer than the release database (snapshot of {facts.generated})"
    else:
        why = f"is not in the release database (snapshot of {facts.generated})"
    return Reason(
        RELEASE, None, f"{package.name} {package.version} {why}", package.origin, missing=MISSING_RELEASE_DATA
    )


def requirement_unmet(
    package_name: str, on: tuple[str, ...], env: Environment, facts: ReleaseFacts
) -> Reason:
    """Holds when ``package_name``'s release requires a version of one of ``on`` that the target
    does not have (xformers 0.0.29.post3 requires torch==2.6.0; the target has torch 2.7.0)."""
    condition = RELEASE
    package = env.packages.get(package_name)
    if package is None:
        return not_installed(package_name, condition, env)
    if package.version is None:
        return Reason(
            condition, None, f"{package_name} version unknown", package.origin, missing=MISSING_VERSION
        )
    markers = marker_environment(env)
    required = facts.requirements(package.distribution, package.version, markers)
    if required is None:
        return _not_known(facts, package)
    checked: list[str] = []
    for requirement in required:
        dependency = env.packages.get(rule_name(requirement.name))
        if rule_name(requirement.name) not in on or dependency is None:
            continue
        if dependency.version is None:
            return Reason(
                condition,
                None,
                f"{dependency.name} version unknown",
                dependency.origin,
                missing=MISSING_VERSION,
            )
        if not requirement.specifier.contains(dependency.version, prereleases=True):
            needs = f"{package.name} {package.version} requires {requirement.name}{requirement.specifier}"
            if _declared(package) and _declared(dependency):
                # both pinned in a file: not a broken install that may fail, an install that cannot happen
                pinned = f"{dependency.origin} pins {dependency.version}"
                text = f"pip cannot install these together: {needs}; {pinned}"
            else:
                text = f"{needs} (its metadata); the target has {dependency.name} {dependency.version}"
            options = _pairing(package, requirement, dependency, env, facts)
            none = f"none: no release in the database pairs {package.name} with {dependency.name}"
            return _with_options(Reason(condition, True, text, package.origin), options, none)
        checked.append(f"{requirement.name}{requirement.specifier}")
    met = f"met ({', '.join(checked)})" if checked else f"none on {', '.join(on)}"
    return Reason(condition, False, f"{package.name} {package.version} requirements: {met}", package.origin)


Option = tuple[str, str, str]  # (package, version, why)


def _declared(package: Package) -> bool:
    """Pinned in a file or on the command line, not read from an installation (dist-info, env file)."""
    return not (package.origin.endswith(("dist-info", "egg-info")) or package.origin.startswith("--env-file"))


def _with_options(reason: Reason, options: list[Option], none: str | None = None) -> Reason:
    """The reason with its computed fix: each option a real release, and why it fits; where the
    search found none, ``none`` says so (a report never points at a fix it does not show)."""
    if not options:
        return reason if none is None else replace(reason, suggestion=none)
    text = " or ".join(f"{name}=={version} ({why})" for name, version, why in options)
    pins = tuple(f"{name}=={version}" for name, version, _ in options)
    return replace(reason, suggestion=text, suggested_pins=pins)


def _pairing(
    package: Package, requirement: Requirement, dependency: Package, env: Environment, facts: ReleaseFacts
) -> list[Option]:
    """The dependency the release asks for, and the nearest release of the package whose
    requirement the target's dependency meets (newer first)."""
    options: list[Option] = []
    exact = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
    if exact:
        options.append((dependency.name, exact[0], f"what {package.name} {package.version} requires"))
    markers = marker_environment(env)
    assert dependency.version is not None and package.version is not None
    installed = Version(Version(package.version).public)
    matching = []
    for version, release in facts.releases(package.distribution).items():
        if release.yanked:
            continue
        needs = facts.requirements(package.distribution, version, markers) or []
        ours = [r for r in needs if rule_name(r.name) == dependency.name]
        if ours and all(r.specifier.contains(dependency.version, prereleases=True) for r in ours):
            matching.append(Version(version))
    if matching:
        newer = sorted(v for v in matching if v > installed)
        best = newer[0] if newer else max(matching)
        options.append((package.name, str(best), f"its release for {dependency.name} {dependency.version}"))
    return options


def prebuilt_wheel_missing(package_name: str, env: Environment, facts: ReleaseFacts) -> Reason:
    """Holds when the release's build matrix has no wheel for the target's torch (major.minor),
    CUDA major and Python: pip then builds it from source (nvcc, a long build) or the user forces
    a wheel built for another torch (``undefined symbol`` at import)."""
    condition = RELEASE
    package, torch = env.packages.get(package_name), env.packages.get("torch")
    if package is None:
        return not_installed(package_name, condition, env)
    if torch is None:
        return not_installed("torch", condition, env)
    if package.wheel is not None:
        return _installed_wheel(package, torch, condition)
    if package.version is None or torch.version is None:
        return Reason(
            condition, None, "versions unknown (no version given)", package.origin, missing=MISSING_VERSION
        )
    wheels = facts.flash_attn_wheels(package.version)
    if wheels is None:
        return _not_known(facts, package)
    if env.torch_build is None or env.torch_build.cuda is None:
        holds = None if env.torch_build is None else False
        why = "torch's CUDA build is unknown" if holds is None else "torch is not a CUDA build"
        return Reason(condition, holds, why, package.origin, missing=MISSING_TORCH_BUILD)
    target = _TargetWheel(_minor(torch.version), env.torch_build.cuda.split(".")[0], _minor(env.python))
    if any(target.fits(wheel) for wheel in wheels):
        return Reason(
            condition, False, f"{package.name} {package.version} has a wheel for {target}", package.origin
        )
    text = f"{package.name} {package.version} has no prebuilt wheel for {target} (its publish.yml)"
    options = _nearest_wheel(package, target, facts)
    none = f"none: no {package.name} release in the database has a wheel for {target}"
    return _with_options(Reason(condition, True, text, package.origin), options, none)


# flash-attn's wheel labels: +cu12torch2.6cxx11abiFALSE (its releases), +cu128torch2.10 (builds of others)
_WHEEL_BUILD = re.compile(r"\+cu(?P<cuda>[0-9]+)torch(?P<torch>[0-9]+\.[0-9]+)")


def _installed_wheel(package: Package, torch: Package, condition: str) -> Reason:
    """A package installed from a prebuilt wheel (a lock's URL, a local file) builds nothing: the
    wheel is the binary. Its name says the torch it was built for; one built for another torch
    fails at import instead (flash-attn-binary-torch-mismatch, named from the log)."""
    wheel = package.wheel or ""
    text = f"{package.name} is installed from a prebuilt wheel ({wheel}): nothing is built from source"
    build = _WHEEL_BUILD.search(wheel)
    if build and torch.version is not None and _minor(torch.version) not in (None, build["torch"]):
        text += f"; it was built for torch {build['torch']}, the target has {torch.version}"
    elif build:
        cuda = build["cuda"]
        shown = f"{cuda[:2]}.{cuda[2:]}" if len(cuda) > 2 else cuda
        text += f" (built for torch {build['torch']} with CUDA {shown})"
    return Reason(condition, False, text, package.origin)


class _TargetWheel:
    def __init__(self, torch: str | None, cuda_major: str, python: str | None) -> None:
        self.torch, self.cuda_major, self.python = torch, cuda_major, python

    def fits(self, wheel: Wheel, ignore_python: bool = False) -> bool:
        # a wheel built against a torch nightly does not load under the release (undefined symbol)
        return (
            not _prerelease(wheel.torch)
            and _minor(wheel.torch) == self.torch
            and wheel.cuda.split(".")[0] == self.cuda_major
            and (ignore_python or self.python is None or wheel.python == self.python)
        )

    def __str__(self) -> str:
        python = f", Python {self.python}" if self.python else ""
        return f"torch {self.torch} with CUDA {self.cuda_major}{python}"


def prebuilt_wheel_lacks_gpu(package_name: str, env: Environment, facts: ReleaseFacts) -> Reason:
    """Holds when the release's wheel for the target's torch has no code for a target GPU: its
    kernels are compiled per architecture (sm_80 code runs on every 8.x GPU; sm_90 only on 9.0),
    and a wheel built with a CUDA too old for Blackwell has none for sm_100 / sm_120."""
    gate = prebuilt_wheel_missing(package_name, env, facts)
    if gate.holds is not False or "has a wheel for" not in gate.text:
        return replace(gate, holds=False if gate.holds else gate.holds, suggestion=None, suggested_pins=())
    if not env.gpus:
        return Reason(RELEASE, None, "GPUs not known (no --gpu target)", missing=MISSING_GPU)
    package, torch = env.packages[package_name], env.packages["torch"]
    assert package.version is not None and torch.version is not None and env.torch_build is not None
    target = _TargetWheel(
        _minor(torch.version), (env.torch_build.cuda or "").split(".")[0], _minor(env.python)
    )
    wheel = next(w for w in facts.flash_attn_wheels(package.version) or [] if target.fits(w))
    # below sm_80 no flash-attn 2 build has kernels at all: flash-attn-pre-ampere-gpu says so
    older: list[Gpu] = []
    supported: list[Gpu] = []
    for candidate in env.distinct_gpus:
        capability = candidate.compute_capability
        (older if capability and _capability(capability) < (8, 0) else supported).append(candidate)
    missing = [
        gpu for gpu in supported if gpu.compute_capability and not covers(wheel.archs, gpu.compute_capability)
    ]
    if not missing and older and not supported:
        names = ", ".join(sorted({gpu.name for gpu in older}))
        return Reason(RELEASE, False, f"{names}: older than any flash-attn 2 build supports", package.origin)
    if not missing:
        return Reason(
            RELEASE,
            False,
            f"its wheel has code for every GPU here ({', '.join(wheel.archs)})",
            package.origin,
        )
    gpu = missing[0]
    text = (
        f"{package.name} {package.version}'s wheel for {target} (built with CUDA {wheel.cuda}) has code for "
        f"{', '.join(wheel.archs)}, not {gpu.name_and_sm()}"
    )
    newer = [
        Version(v)
        for v in facts.flash_attn_versions()
        if Version(v) > Version(Version(package.version).public)
        and any(
            target.fits(w) and covers(w.archs, gpu.compute_capability or "")
            for w in facts.flash_attn_wheels(v) or []
        )
    ]
    options: list[Option] = [(package.name, str(min(newer)), f"its wheel has {gpu.sm} code")] if newer else []
    none = f"none: no newer {package.name} release has a wheel with {gpu.sm} code for {target}"
    return _with_options(Reason(RELEASE, True, text, package.origin), options, none)


def _capability(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else (99, 0)


def covers(archs: tuple[str, ...], capability: str) -> bool:
    """Code for sm_XY runs on X.Z for Z >= Y (same major): sm_80 serves 8.6 and 8.9."""
    major, _, minor = capability.partition(".")
    for arch in archs:
        digits = arch.removeprefix("sm_").rstrip("af")
        if digits[:-1] == major and int(digits[-1]) <= int(minor or 0):
            return True
    return False


def _nearest_wheel(package: Package, target: _TargetWheel, facts: ReleaseFacts) -> list[Option]:
    """The nearest release (newer first) with a wheel for the target, and the newest torch this
    release has a wheel for (on the target's CUDA major)."""
    assert package.version is not None
    installed = Version(Version(package.version).public)
    fitting = [
        Version(v)
        for v in facts.flash_attn_versions()
        if any(target.fits(wheel) for wheel in facts.flash_attn_wheels(v) or [])
    ]
    options: list[Option] = []
    if fitting:
        newer = sorted(v for v in fitting if v > installed)
        options.append((package.name, str(newer[0] if newer else max(fitting)), f"has a wheel for {target}"))
    wheels = facts.flash_attn_wheels(package.version) or []
    own = {wheel.torch for wheel in wheels if wheel.cuda.split(".")[0] == target.cuda_major}
    if own:
        newest = max(own, key=Version)
        options.append(
            ("torch", newest, f"the newest torch {package.name} {package.version} has a wheel for")
        )
    return options


@functools.lru_cache(maxsize=4096)
def _prerelease(version: str) -> bool:
    """Whether a wheel's torch is a nightly; parsed once, not once per target per release."""
    return Version(version).is_prerelease


@functools.lru_cache(maxsize=4096)  # asked for each wheel of each release, for every target checked
def _minor(version: str | None) -> str | None:
    if version is None:
        return None
    try:
        release = Version(version).release
    except ValueError:  # InvalidVersion, or a number past the int-string limit
        return None
    return ".".join(str(part) for part in release[:2])
