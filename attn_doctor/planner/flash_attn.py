"""flash-attn: the newest release with a prebuilt wheel for the target, its exact asset URL; or,
when none has one, each way out complete (another torch, a source build, ROCm's backends)."""

from __future__ import annotations

from packaging.version import Version

from attn_doctor.engine.release_conditions import covers
from attn_doctor.facts.model import Environment
from attn_doctor.planner.interface import Plan, WayOut
from attn_doctor.planner.target import (
    TORCH_INDEX,
    WheelTarget,
    cxx11_abi,
    is_pre_release,
    torch_release,
    wheel_target,
)
from attn_doctor.releases.facts import ReleaseFacts, Wheel
from attn_doctor.releases.wheel_names import WheelFile, flash_attn_wheel
from attn_doctor.words import counted

PACKAGE = "flash-attn"
PLATFORM = "linux_x86_64"  # the only platform flash-attn's releases have wheels for
# flash-attn's README: "If your machine has less than 96GB of RAM and lots of CPU cores, ninja
# might run too many parallel compilation jobs that could exhaust the amount of RAM" (MAX_JOBS=4);
# "With ninja compiling takes 3-5 minutes on a 64-core machine using CUDA toolkit"
SOURCE_BUILD = "pip install ninja && MAX_JOBS={jobs} pip install flash-attn=={version} --no-build-isolation"
README_JOBS = 4
# a job's memory: setup.py's own sizing counts 5 GB per nvcc thread, 4 threads a job (NVCC_THREADS;
# flash-attention#2079, measured 3-5 GB), and OOMs with no headroom: keep max(16 GB, 15%) free
# (flash-attention#2493); at most half the CPUs, as setup.py's max_num_jobs_cores
GB_PER_JOB = 5 * 4
# ROCm: no prebuilt wheels; README v2.8.3 "AMD ROCm Support": the composable_kernel backend (the
# default) for MI200/MI300 (setup.py's allowed_archs: gfx90a, gfx942, gfx950), the Triton backend
# for CDNA and RDNA, built with FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE"; ROCm 6.0 and above
CK_ARCHS = ("gfx90a", "gfx942", "gfx950")
ROCM_CK_BUILD = "GPU_ARCHS={gfx} MAX_JOBS=4 pip install flash-attn=={version} --no-build-isolation"
ROCM_TRITON_BUILD = (
    'FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE" pip install flash-attn=={version} --no-build-isolation'
)


class FlashAttnPlanner:
    package = PACKAGE

    def plan(self, env: Environment, facts: ReleaseFacts, version: str | None = None) -> Plan:
        newest = version or facts.flash_attn_versions()[-1]
        if env.torch_build is not None and env.torch_build.hip:
            return _rocm(env, newest)
        target = wheel_target(env)
        if isinstance(target, str):
            return Plan(PACKAGE, version, None, target, ways_out=_build_on_pre_release(env, newest))
        if target.platform != PLATFORM:
            why = f"flash-attn publishes wheels for {PLATFORM} only, not {target.platform}"
            build = _source_build(newest, env, target.cuda_major)
            return Plan(PACKAGE, version, None, why, ways_out=(build,))
        gpus = [gpu.compute_capability for gpu in env.distinct_gpus if gpu.compute_capability]
        for candidate in [version] if version else reversed(facts.flash_attn_versions()):
            found = _wheel(candidate, target, gpus, facts)
            if found is not None:
                wheel, asset = found
                code = f", with code for {', '.join(wheel.archs)}" if wheel.archs else ""
                which = "has" if version else "is the newest release with"
                why = f"flash-attn {candidate} {which} a wheel for {target}{code}"
                return _plan(candidate, asset, why)
        who = f"flash-attn {version} has no" if version else "no flash-attn release has a"
        why = f"{who} wheel for {target}"
        if gpus:
            why += f" with code for {', '.join('sm_' + g.replace('.', '') for g in gpus)}"
        build = _source_build(newest, env, target.cuda_major)
        ways = (*_other_torch(target, gpus, facts, version), build)
        return Plan(PACKAGE, version, None, why, ways_out=ways)


def wheel_plan(version: str, torch: str, cuda: str, python: str) -> Plan | None:
    """The wheel of ``version`` for torch ``torch`` built with ``cuda`` on ``python`` (Linux
    x86_64, torch's own ABI): what ``fix`` installs when it moves torch too."""
    minor = ".".join(torch.split(".")[:2])
    asset = flash_attn_wheel(version, minor, cuda, python, cxx11_abi(torch))
    return None if asset is None else _plan(version, asset, f"flash-attn {version}'s wheel for torch {minor}")


def _plan(version: str, asset: WheelFile, why: str) -> Plan:
    return Plan(
        PACKAGE, version, asset.pip_command(), why, url=asset.url, requirement=f"flash-attn @ {asset.url}"
    )


def _wheel(
    version: str, target: WheelTarget, gpus: list[str], facts: ReleaseFacts
) -> tuple[Wheel, WheelFile] | None:
    """The release's wheel (from its build matrix) and asset (by its setup.py's name) for the target."""
    for wheel in facts.flash_attn_wheels(version) or []:
        if _fits(wheel, target) and _covers_all(wheel, gpus):
            minor, python = target.torch_minor, target.python
            asset = flash_attn_wheel(version, minor, target.cuda, python, target.cxx11_abi)
            if asset is not None:
                return wheel, asset
    return None


def _build_on_pre_release(env: Environment, version: str) -> tuple[WayOut, ...]:
    """A pre-release CUDA torch (an NGC image's, whose image carries the CUDA toolkit): the build
    against it is the way; no prebuilt wheel was built against its commit."""
    torch, build = torch_release(env), env.torch_build
    if torch is None or not is_pre_release(torch) or build is None or build.cuda is None:
        return ()
    return (_source_build(version, env, build.cuda.split(".")[0]),)


def _fits(wheel: Wheel, target: WheelTarget) -> bool:
    torch = Version(wheel.torch)
    return (
        not torch.is_prerelease  # a wheel built on a torch nightly does not load under the release
        and f"{torch.major}.{torch.minor}" == target.torch_minor
        and wheel.cuda.split(".")[0] == target.cuda_major
        and wheel.python == target.python
        and wheel.cxx11_abi == target.cxx11_abi
    )


def _other_torch(
    target: WheelTarget, gpus: list[str], facts: ReleaseFacts, version: str | None
) -> list[WayOut]:
    """The newest torch (one of its CUDA variants with code for the GPUs) that the newest
    flash-attn release (or ``version``) with any wheel for this Python has a wheel for."""
    for release in [version] if version else reversed(facts.flash_attn_versions()):
        minors = sorted(
            {
                Version(w.torch).base_version.rsplit(".", 1)[0]
                for w in facts.flash_attn_wheels(release) or []
                if w.python == target.python and not Version(w.torch).is_prerelease and _covers_all(w, gpus)
            },
            key=Version,
        )
        for minor in reversed(minors):
            way = _torch_way(release, minor, target, gpus, facts)
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
            other = WheelTarget(torch, minor, cuda, target.python, cxx11_abi(torch), PLATFORM)
            found = _wheel(version, other, [], facts)
            if found is None:
                continue
            return WayOut(
                title=f"torch {torch} ({variant.name}), which flash-attn {version} has a wheel for",
                commands=(
                    f"pip install torch=={torch} --index-url {TORCH_INDEX.format(variant=variant.name)}",
                    found[1].pip_command(),
                ),
                why=f"its {variant.name} wheels carry {', '.join(variant.archs)}",
            )
    return None


def _source_build(version: str, env: Environment, cuda_major: str) -> WayOut:
    """The build with MAX_JOBS sized to the host where its CPUs and memory are known, and the
    nvcc it needs (torch's CUDA major: torch's cpp_extension refuses another)."""
    if env.cpus and env.memory_gb:
        free = env.memory_gb - max(16, 0.15 * env.memory_gb)
        jobs = max(1, min(env.cpus // 2, int(free / GB_PER_JOB)))
        sizing = (
            f"MAX_JOBS={jobs} for {counted(env.cpus, 'CPU')} and {env.memory_gb:g} GiB: about 20 GB a job "
            "(5 GB per nvcc thread, 4 threads; flash-attention#2079) with max(16 GB, 15%) kept free (#2493)"
        )
    else:
        jobs = README_JOBS
        sizing = "MAX_JOBS=4 keeps it under 96 GB of RAM (flash-attn's README; the host's memory is unknown)"
    nvcc = f"nvcc of CUDA {cuda_major}.x, torch's"
    if env.nvcc is not None:
        have = "has" if env.nvcc.split(".")[0] == cuda_major else "has another:"
        nvcc += f" (the target {have} {env.nvcc})"
    elif "nvcc" in env.origins:
        nvcc += " (the target has no nvcc on PATH: install that CUDA toolkit first)"
    return WayOut(
        title=f"build flash-attn {version} from source against the installed torch",
        commands=(SOURCE_BUILD.format(jobs=jobs, version=version),),
        why=f"setup.py compiles the CUDA kernels for the installed torch: it needs {nvcc}; with ninja, "
        f"3-5 minutes on 64 cores (flash-attn's README), far longer on a few; {sizing}",
    )


def _rocm(env: Environment, version: str) -> Plan:
    """ROCm: no prebuilt wheel; the CK backend for the GPUs it supports, else the Triton backend."""
    gfx = sorted({gpu.gfx for gpu in env.distinct_gpus if gpu.gfx})
    ck = [g for g in gfx if g in CK_ARCHS]
    ways = []
    if ck and len(ck) == len(gfx):
        ways.append(
            WayOut(
                title=f"build flash-attn {version}'s composable_kernel backend for {', '.join(ck)}",
                commands=(ROCM_CK_BUILD.format(gfx=";".join(ck), version=version),),
                why="CK is the default ROCm backend (MI200, MI300: gfx90a, gfx942, gfx950; ROCm 6.0+)",
            )
        )
    ways.append(
        WayOut(
            title=f"build flash-attn {version}'s Triton backend",
            commands=(ROCM_TRITON_BUILD.format(version=version),),
            why="the Triton backend runs on CDNA (MI200, MI300) and RDNA GPUs; it needs the env var at run "
            "time too (flash-attn's README, AMD ROCm Support)",
        )
    )
    unknown = "" if gfx else " (the GPU's gfx target is not known: --gpu MI300X)"
    why = f"flash-attn publishes no ROCm wheels: it builds on the target{unknown}"
    return Plan(PACKAGE, version, None, why, ways_out=tuple(ways))
