"""flash-attn: the newest release with a prebuilt wheel for the target, its exact asset URL; or,
when none has one, each way out complete (another torch, a source build, ROCm's backends)."""

from __future__ import annotations

from packaging.version import Version

from attn_doctor.engine.release_conditions import covers
from attn_doctor.facts.model import Environment
from attn_doctor.planner.interface import Plan, WayOut
from attn_doctor.planner.target import TORCH_INDEX, WheelTarget, cxx11_abi, wheel_target
from attn_doctor.releases.facts import ReleaseFacts, Wheel
from attn_doctor.releases.wheel_names import flash_attn_wheel

PLATFORM = "linux_x86_64"  # the only platform flash-attn's releases have wheels for
# flash-attn's README: "If your machine has less than 96GB of RAM and lots of CPU cores, ninja
# might run too many parallel compilation jobs that could exhaust the amount of RAM" (MAX_JOBS=4);
# "With ninja compiling takes 3-5 minutes on a 64-core machine using CUDA toolkit"
SOURCE_BUILD = "pip install ninja && MAX_JOBS=4 pip install flash-attn=={version} --no-build-isolation"
SOURCE_BUILD_WHY = (
    "setup.py compiles the CUDA kernels for the installed torch: it needs nvcc of torch's CUDA major; "
    "with ninja, 3-5 minutes on 64 cores (flash-attn's README), far longer on a few; MAX_JOBS=4 keeps "
    "it under 96 GB of RAM"
)


class FlashAttnPlanner:
    package = "flash-attn"

    def plan(self, env: Environment, facts: ReleaseFacts) -> Plan:
        target = wheel_target(env)
        if isinstance(target, str):
            return Plan(self.package, None, target)
        newest = facts.flash_attn_versions()[-1]
        if target.platform != PLATFORM:
            why = f"flash-attn publishes wheels for {PLATFORM} only, not {target.platform}"
            return Plan(self.package, None, why, ways_out=(_source_build(newest),))
        gpus = [gpu.compute_capability for gpu in env.gpus if gpu.compute_capability]
        for version in reversed(facts.flash_attn_versions()):
            for wheel in facts.flash_attn_wheels(version) or []:
                if _fits(wheel, target) and _covers_all(wheel, gpus):
                    asset = flash_attn_wheel(
                        version, target.torch_minor, target.cuda, target.python, target.cxx11_abi
                    )
                    if asset is None:
                        continue
                    code = f", with code for {', '.join(wheel.archs)}" if wheel.archs else ""
                    why = f"flash-attn {version} is the newest release with a wheel for {target}{code}"
                    return Plan(self.package, asset.pip_command(), why, url=asset.url)
        why = f"no flash-attn release has a wheel for {target}"
        if gpus:
            why += f" with code for {', '.join('sm_' + g.replace('.', '') for g in gpus)}"
        return Plan(
            self.package, None, why, ways_out=(*_other_torch(target, gpus, facts), _source_build(newest))
        )


def _fits(wheel: Wheel, target: WheelTarget) -> bool:
    torch = Version(wheel.torch)
    return (
        not torch.is_prerelease  # a wheel built on a torch nightly does not load under the release
        and f"{torch.major}.{torch.minor}" == target.torch_minor
        and wheel.cuda.split(".")[0] == target.cuda_major
        and wheel.python == target.python
        and wheel.cxx11_abi == target.cxx11_abi
    )


def _other_torch(target: WheelTarget, gpus: list[str], facts: ReleaseFacts) -> list[WayOut]:
    """The newest torch (one of its CUDA variants with code for the GPUs) that the newest
    flash-attn release with any wheel for this Python has a wheel for."""
    for version in reversed(facts.flash_attn_versions()):
        minors = sorted(
            {
                Version(w.torch).base_version.rsplit(".", 1)[0]
                for w in facts.flash_attn_wheels(version) or []
                if w.python == target.python and not Version(w.torch).is_prerelease and _covers_all(w, gpus)
            },
            key=Version,
        )
        for minor in reversed(minors):
            way = _torch_way(version, minor, target, gpus, facts)
            if way is not None:
                return [way]
    return []


def _covers_all(wheel: Wheel, gpus: list[str]) -> bool:
    return all(covers(wheel.archs, gpu) for gpu in gpus)


def _torch_way(
    version: str, minor: str, target: WheelTarget, gpus: list[str], facts: ReleaseFacts
) -> WayOut | None:
    releases = sorted((v for v in facts.releases("torch") if v.startswith(minor + ".")), key=Version)
    for torch in reversed(releases):
        for variant in sorted(facts.torch_variants(torch), key=lambda v: v.name, reverse=True):
            if not all(covers(variant.archs, gpu) for gpu in gpus):
                continue
            cuda = f"{variant.name[2:-1]}.{variant.name[-1]}"
            abi = cxx11_abi(torch)
            wheels = [
                w
                for w in facts.flash_attn_wheels(version) or []
                if _fits(w, WheelTarget(torch, minor, cuda, target.python, abi, PLATFORM))
            ]
            asset = flash_attn_wheel(version, minor, cuda, target.python, abi) if wheels else None
            if asset is None:
                continue
            return WayOut(
                title=f"torch {torch} ({variant.name}), which flash-attn {version} has a wheel for",
                commands=(
                    f"pip install torch=={torch} --index-url {TORCH_INDEX.format(variant=variant.name)}",
                    asset.pip_command(),
                ),
                why=f"its {variant.name} wheels carry {', '.join(variant.archs)}",
            )
    return None


def _source_build(version: str) -> WayOut:
    return WayOut(
        title=f"build flash-attn {version} from source against the installed torch",
        commands=(SOURCE_BUILD.format(version=version),),
        why=SOURCE_BUILD_WHY,
    )
