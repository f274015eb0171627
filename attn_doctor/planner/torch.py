"""torch: the CUDA variant whose wheels carry code for every target GPU and whose CUDA major the
target's NVIDIA driver runs (NVIDIA's minimum per major), with its index; the nearest newer torch
release when the wanted one has no such variant; the driver to install when only it stands in the
way."""

from __future__ import annotations

from dataclasses import dataclass, replace

from packaging.version import Version

from attn_doctor.engine.release_conditions import covers, driver_key
from attn_doctor.facts.model import Environment
from attn_doctor.planner.interface import Plan, WayOut
from attn_doctor.planner.target import PRE_RELEASE, TORCH_INDEX, is_pre_release, torch_release
from attn_doctor.releases.facts import ReleaseFacts, TorchVariant

PACKAGE = "torch"


@dataclass(frozen=True)
class TorchBuildChoice:
    """One torch release in one CUDA variant: what ``fix`` installs when the build must change."""

    release: str  # "2.7.1"
    variant: TorchVariant

    @property
    def cuda(self) -> str:
        """The variant's CUDA as torch reports it: cu128 -> "12.8"."""
        digits = self.variant.name.removeprefix("cu")
        return f"{digits[:-1]}.{digits[-1]}"

    @property
    def index(self) -> str:
        return TORCH_INDEX.format(variant=self.variant.name)

    @property
    def requirement(self) -> str:
        """The local version only that index has: a requirements file cannot pick another build."""
        return f"torch=={self.release}+{self.variant.name}"


class TorchPlanner:
    package = PACKAGE

    def plan(self, env: Environment, facts: ReleaseFacts, version: str | None = None) -> Plan:
        wanted = version or torch_release(env) or _newest(facts)
        if is_pre_release(wanted):
            why = f"torch {wanted} is {PRE_RELEASE}: no index serves it, and installing a release replaces it"
            return Plan(PACKAGE, None, None, why)
        if env.torch_build is not None and env.torch_build.hip:
            index = TORCH_INDEX.format(variant=f"rocm{env.torch_build.hip}")
            why = f"torch's ROCm {env.torch_build.hip} build, from its index (no CUDA variant applies)"
            return Plan(PACKAGE, wanted, f"pip install torch=={wanted} --index-url {index}", why, index=index)
        if not env.gpus and env.gpu_source == "none":
            index = TORCH_INDEX.format(variant="cpu")
            why = f"the target has no GPU: torch {wanted}'s CPU wheels, the smallest"
            command = f"pip install torch=={wanted} --index-url {index}"
            return Plan(PACKAGE, wanted, command, why, requirement=f"torch=={wanted}+cpu", index=index)
        choice, why = fitting_build(env, facts, wanted)
        if choice is None:
            return Plan(PACKAGE, version, None, why, ways_out=_driver_way(env, facts, wanted))
        command = f"pip install torch=={choice.release} --index-url {choice.index}"
        return Plan(PACKAGE, choice.release, command, why, requirement=choice.requirement, index=choice.index)


def fitting_build(env: Environment, facts: ReleaseFacts, wanted: str) -> tuple[TorchBuildChoice | None, str]:
    """The build of ``wanted`` (or of the nearest newer release) that runs on the target, and why;
    None and why not. The installed variant when it fits, else the lowest CUDA that does (the
    oldest driver it needs)."""
    gpus = [gpu.compute_capability for gpu in env.distinct_gpus if gpu.compute_capability]
    driver = _oldest_driver(env)
    platform = env.platform or "linux"
    current = env.torch_build.cuda if env.torch_build and env.torch_build.cuda else None
    blocked_by_driver = []
    for release in _from(wanted, facts):
        variants = sorted(facts.torch_variants(release), key=lambda v: _cuda_key(v.name))
        fitting = [v for v in variants if all(covers(v.archs, gpu) for gpu in gpus)]
        runnable = [v for v in fitting if _driver_runs(facts, driver, v, platform)]
        blocked_by_driver += [v for v in fitting if v not in runnable]
        if not runnable:
            continue
        own = [v for v in runnable if current and v.name == "cu" + "".join(current.split(".")[:2])]
        choice = TorchBuildChoice(release, (own or runnable)[0])
        return choice, _why(choice, wanted, gpus, driver)
    if blocked_by_driver:
        variant = blocked_by_driver[0]
        major = _major(variant)
        minimum = facts.minimum_driver(major, platform)
        return None, (
            f"every torch {wanted}+ variant with code for the GPUs needs CUDA {major}, whose "
            f"minimum driver is {minimum}; the target's is {driver}: upgrade the NVIDIA driver"
        )
    gpu_names = ", ".join(f"sm_{g.replace('.', '')}" for g in gpus) or "the target"
    return None, f"no torch release from {wanted} on has a CUDA variant (release facts) for {gpu_names}"


def _why(choice: TorchBuildChoice, wanted: str, gpus: list[str], driver: str | None) -> str:
    why = f"torch {choice.release}'s {choice.variant.name} wheels"
    if gpus:
        why += f" carry {', '.join(choice.variant.archs)}, code for every target GPU"
    if driver:
        why += f"{' and' if gpus else ''} run on NVIDIA driver {driver}"
    if not gpus and not driver:
        why += " (no GPU or driver given: --gpu, --env-file)"
    if choice.release != wanted:
        why += f"; torch {wanted} has no such variant"
    return why


def _driver_way(env: Environment, facts: ReleaseFacts, wanted: str) -> tuple[WayOut, ...]:
    """When only the driver stands in the way: the driver that runs the build that fits."""
    driver = _oldest_driver(env)
    if driver is None:
        return ()
    unbounded = replace(env, gpus=[replace(gpu, driver=None) for gpu in env.distinct_gpus])
    choice, _ = fitting_build(unbounded, facts, wanted)
    if choice is None:
        return ()
    minimum = facts.minimum_driver(choice.cuda.split(".")[0], env.platform or "linux")
    return (
        WayOut(
            title=f"upgrade the NVIDIA driver to {minimum} or newer, then install torch {choice.release} "
            f"({choice.variant.name})",
            commands=(f"pip install torch=={choice.release} --index-url {choice.index}",),
            why=f"NVIDIA's minimum driver for CUDA {choice.cuda.split('.')[0]}.x is {minimum}",
        ),
    )


def _from(wanted: str, facts: ReleaseFacts) -> list[str]:
    """``wanted``, then each newer minor release line oldest first, its newest patch first."""
    lines: dict[tuple[int, ...], list[str]] = {}
    for release in sorted(facts.torch_releases_with_variants(), key=Version):
        if Version(release) > Version(wanted):
            lines.setdefault(Version(release).release[:2], []).insert(0, release)
    return [wanted, *(release for line in lines.values() for release in line)]


def _newest(facts: ReleaseFacts) -> str:
    return max(facts.torch_releases_with_variants(), key=Version)


def _oldest_driver(env: Environment) -> str | None:
    drivers = sorted({gpu.driver for gpu in env.distinct_gpus if gpu.driver}, key=driver_key)
    return drivers[0] if drivers else None


def _driver_runs(facts: ReleaseFacts, driver: str | None, variant: TorchVariant, platform: str) -> bool:
    if driver is None:
        return True  # not known: the plan says it assumed nothing about it
    minimum = facts.minimum_driver(_major(variant), platform)
    return minimum is None or driver_key(driver) >= driver_key(minimum)


def _major(variant: TorchVariant) -> str:
    return str(_cuda_key(variant.name)[0])


def _cuda_key(name: str) -> tuple[int, int]:
    digits = name.removeprefix("cu")
    return int(digits[:-1]), int(digits[-1])
