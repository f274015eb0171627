"""Plans that hold together: when torch itself must change (its variant has no code for the GPUs,
or the driver cannot run its CUDA), every other package is planned on the torch the torch plan
installs, and install commands group what comes from torch's index."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from packaging.version import Version

from attn_doctor.facts.model import Environment, TorchBuild
from attn_doctor.planner.interface import Plan
from attn_doctor.planner.registry import PLANNERS
from attn_doctor.planner.target import TORCH_INDEX, is_pre_release, torch_release
from attn_doctor.planner.torch import TorchBuildChoice, fitting_build
from attn_doctor.releases.facts import ReleaseFacts

# what download.pytorch.org's CUDA indexes hold beside torch (an --index-url install finds them)
FROM_TORCH_INDEX = ("torch", "triton", "xformers")


def plan_stack(
    env: Environment, facts: ReleaseFacts, packages: Iterable[str], versions: Mapping[str, str] | None = None
) -> list[Plan]:
    """One plan per package (``versions``: the release to plan where one is chosen), each on the
    torch the torch plan leaves; the torch plan first when torch must move."""
    versions = versions or {}
    names = list(packages)
    moved = torch_move(env, facts, versions.get("torch"))
    if moved is None:
        return [PLANNERS[name].plan(env, facts, versions.get(name)) for name in names]
    target = with_torch(env, f"{moved.release}+{moved.variant.name}")
    plans = [PLANNERS["torch"].plan(env, facts, versions.get("torch"))]
    for name in names:
        if name != "torch":
            plan = PLANNERS[name].plan(target, facts, versions.get(name))
            plans.append(replace(plan, why=f"{plan.why} (on {moved.requirement}, the torch plan)"))
    return plans


def torch_move(env: Environment, facts: ReleaseFacts, version: str | None = None) -> TorchBuildChoice | None:
    """The torch build to install instead of the target's (release ``version`` when given), or
    None when the target's own fits or no CUDA build is known. A CPU build moves only where an
    NVIDIA GPU is known: on a machine without one it may be meant."""
    installed = torch_release(env)
    build = env.torch_build
    if installed is None or build is None or build.hip or is_pre_release(installed):
        return None  # a pre-release torch is the image's own: the plans build on it, not replace it
    if build.cuda is None and not any(gpu.compute_capability for gpu in env.gpus):
        return None
    choice, _ = fitting_build(env, facts, version or installed)
    if choice is None:
        return None
    if build.cuda is None:
        return choice
    same_cuda = Version(choice.cuda).release[:2] == Version(build.cuda).release[:2]
    return None if choice.release == installed and same_cuda else choice


def install_commands(
    env: Environment, facts: ReleaseFacts, changes: Mapping[str, tuple[str, str]]
) -> list[str]:
    """The pip commands that make these changes (package -> (distribution, version); torch's
    version may name its variant, "2.7.1+cu128"): torch and what its index holds in one command
    from that index, the rest from PyPI with direct wheel URLs where the planner has one."""
    target = with_torch(env, changes["torch"][1]) if "torch" in changes else env
    index = _index(target.torch_build)
    # triton comes from torch's index only beside torch: alone, PyPI's is the same release
    grouped = [n for n in FROM_TORCH_INDEX if n in changes and (n != "triton" or "torch" in changes)]
    from_index = grouped if index else []
    commands = []
    if from_index:
        pins = " ".join(f"'{changes[n][0]}=={Version(changes[n][1]).public}'" for n in from_index)
        commands.append(f"pip install {pins} --index-url {index}")
    rest = []
    for name, (distribution, version) in changes.items():
        if name in from_index:
            continue
        plan = PLANNERS[name].plan(target, facts, version) if name in PLANNERS else None
        rest.append(f"'{plan.url}'" if plan is not None and plan.url else f"'{distribution}=={version}'")
    if rest:
        commands.append("pip install " + " ".join(rest))
    return commands


def with_torch(env: Environment, version: str) -> Environment:
    """``env`` with torch at ``version``; a "+cu128" local version sets its CUDA build too."""
    torch = replace(env.packages["torch"], version=version)
    moved = env.with_packages({"torch": torch}, f"plan: torch=={version}")
    return moved if "+" in version else replace(moved, torch_build=env.torch_build)


def _index(build: TorchBuild | None) -> str | None:
    if build is None or build.cuda is None:
        return None
    return TORCH_INDEX.format(variant="cu" + "".join(build.cuda.split(".")[:2]))
