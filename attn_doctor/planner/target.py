"""The facts of a target that decide which wheel fits, each said once (and what is missing)."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from attn_doctor.facts.model import Environment, torch_build_from_version

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"
# torch's Linux wheels are built with the pre-C++11 ABI up to 2.6 and with the C++11 ABI from 2.7
# (pytorch/pytorch#143962: "we do expect 2.7 to be cxx11 ABI by default")
FIRST_CXX11_ABI_TORCH = Version("2.7")


@dataclass(frozen=True)
class WheelTarget:
    torch: str  # "2.6.0", the public version
    torch_minor: str  # "2.6"
    cuda: str  # torch's CUDA, "12.4"
    python: str  # "3.11"
    cxx11_abi: bool
    platform: str  # "linux_x86_64"

    @property
    def cuda_major(self) -> str:
        return self.cuda.split(".")[0]

    @property
    def variant(self) -> str:
        """torch's CUDA variant name, "cu124": the index the matching wheels are on."""
        return "cu" + "".join(self.cuda.split(".")[:2])

    def __str__(self) -> str:
        abi = "TRUE" if self.cxx11_abi else "FALSE"
        return (
            f"torch {self.torch_minor}, CUDA {self.cuda_major}, Python {self.python}, "
            f"C++11 ABI {abi} (torch {self.torch_minor}'s wheels), {self.platform}"
        )


def variant_index(version: str) -> str | None:
    """The download.pytorch.org index of the variant a local version names ("2.7.1+cu128":
    .../whl/cu128, the only index that has it); None for a version PyPI serves."""
    if torch_build_from_version(version) is None:
        return None
    return TORCH_INDEX.format(variant=Version(version).local)


# an NGC image's torch (2.7.0a0+6c54963f75) or a nightly: built from a commit, served by no index,
# and its symbols need not match the release a wheel was built against
PRE_RELEASE = "a pre-release build (an NGC image's or a nightly)"


def is_pre_release(torch: str) -> bool:
    try:
        return Version(torch).is_prerelease
    except InvalidVersion:
        return False


def cxx11_abi(torch: str) -> bool:
    """Whether torch ``torch``'s Linux wheels use the C++11 ABI (see FIRST_CXX11_ABI_TORCH)."""
    return Version(torch) >= FIRST_CXX11_ABI_TORCH


def release_of(env: Environment, name: str) -> str | None:
    """The target's ``name`` (the rules' name) as a public release ("2.6.0" for torch
    2.6.0+cu124), or None when unknown."""
    package = env.packages.get(name)
    if package is None or package.version is None:
        return None
    try:
        return Version(package.version).public
    except InvalidVersion:
        return None


def torch_release(env: Environment) -> str | None:
    return release_of(env, "torch")


def torch_install(torch: str, env: Environment) -> str:
    """``pip install torch==X`` from the index of the target's CUDA variant when it is known."""
    build = env.torch_build
    if build is None or build.cuda is None:
        return f"pip install torch=={torch}"
    variant = "cu" + "".join(build.cuda.split(".")[:2])
    return f"pip install torch=={torch} --index-url {TORCH_INDEX.format(variant=variant)}"


def wheel_target(env: Environment) -> WheelTarget | str:
    """The target, or one sentence saying which fact is missing."""
    torch = env.packages.get("torch")
    if torch is None or torch.version is None:
        return "torch's version is not known: give it (--pin torch==2.6.0+cu124, -r, --env-file)"
    release = torch_release(env)
    if release is None:
        return f"torch's version {torch.version!r} is not a PEP 440 version: no wheel can be matched to it"
    if env.torch_build is None or env.torch_build.cuda is None:
        build = env.torch_build and ("a ROCm build" if env.torch_build.hip else "a CPU build")
        build = build or "of an unknown build"
        return f"torch {torch.version} is {build}: no CUDA wheel fits (--pin torch==X+cu124 for a CUDA one)"
    if env.python is None:
        return "the target's Python is not known (--python 3.11)"
    public = Version(release)
    if public.is_prerelease:
        return f"torch {torch.version} is {PRE_RELEASE}: prebuilt wheels are built against torch releases"
    machine = env.machine or "x86_64"
    platform = f"{env.platform or 'linux'}_{machine}".lower().replace("amd64", "x86_64")
    return WheelTarget(
        torch=str(public),
        torch_minor=f"{public.major}.{public.minor}",
        cuda=env.torch_build.cuda,
        python=".".join(env.python.split(".")[:2]),
        cxx11_abi=cxx11_abi(str(public)),
        platform=platform,
    )
