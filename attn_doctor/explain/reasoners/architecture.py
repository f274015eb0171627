"""Kernel image and GPU architecture failures (issue 38, item 3), reasoned from the release facts.

"no kernel image is available", "invalid device function" and torch's "cuda capability X is not
compatible" say a binary lacks code for the GPU; "Unsupported gpu architecture 'compute_NNN'" that
the CUDA toolkit building it predates the GPU; "'sm_NNN' is not a recognized processor" that
triton's compiler does. Which binary: the package the traceback raised in, or the extension the
line names, else torch. Which GPU: the one the line names, else the log's or the target's. The
release facts say which torch wheels, flash-attn wheels, CUDA toolkits and triton releases have
code for it, and the fix is the first of them; what they do not hold is said, not guessed.
"""

from __future__ import annotations

import re
from dataclasses import replace

from packaging.version import Version

from attn_doctor.engine.release_conditions import covers
from attn_doctor.explain.reasoners.interface import Evidence, Reasoned
from attn_doctor.facts.gpus import CAPABILITIES
from attn_doctor.facts.log_frames import Frame
from attn_doctor.facts.model import Gpu
from attn_doctor.planner.torch import fitting_build
from attn_doctor.releases.facts import snapshot

NEAR = 60  # lines: a traceback's frames sit just above its error line
_NO_KERNEL = re.compile(
    r"no kernel image is available for execution on the device|invalid device function|"
    r"hipErrorNoBinaryForGpu|is not compatible with the current PyTorch installation|"
    r"Minimum and Maximum cuda capability supported by this version of PyTorch"
)
_CAPABILITY = re.compile(
    r"(?:cuda capability|compute capability|sm_|capability:?)\s*([0-9]{1,2})\.?([0-9])\b"
)
_NVCC_ARCH = re.compile(r"Unsupported gpu architecture '?compute_([0-9]{2,3})")
_LLVM_ARCH = re.compile(r"'?sm_([0-9]{2,3})a?'? is not a recognized processor")
# an extension the line names -> its package
_EXTENSIONS = (
    ("flash_attn_2_cuda", "flash-attn"),
    ("flash_attn_3", "flash-attn-3"),
    ("xformers", "xformers"),
    ("vllm._C", "vllm"),
    ("sageattention", "sageattention"),
)


class ArchitectureReasoner:
    name = "architecture"

    def reason(self, evidence: Evidence) -> list[Reasoned]:
        lines = [(line, text) for line, text in evidence.lines if line not in evidence.explained]
        for line, text in reversed(lines):
            if found := _NVCC_ARCH.search(text):
                return [_toolkit(line, text, _capability(found[1]), evidence)]
            if found := _LLVM_ARCH.search(text):
                return [_triton(line, text, _capability(found[1]), evidence)]
        for line, text in reversed(lines):
            if _NO_KERNEL.search(text):
                return [_binary(line, text, evidence)]
        return []


def _capability(digits: str) -> str:
    return f"{digits[:-1]}.{digits[-1]}"


def _sm(capability: str) -> str:
    return "sm_" + capability.replace(".", "")


def _gpu(text: str, evidence: Evidence) -> tuple[str | None, str]:
    """The GPU's compute capability and where it comes from: the line, else the stack."""
    for found in _CAPABILITY.finditer(text):
        capability = f"{found[1]}.{found[2]}"
        if capability in CAPABILITIES:
            return capability, "the line"
    gpus = [gpu for gpu in evidence.environment.gpus if gpu.compute_capability]
    if gpus:
        return gpus[
            0
        ].compute_capability, f"{gpus[0].name} ({evidence.environment.gpu_source or 'the target'})"
    return None, ""


def _binary_package(line: int, text: str, frames: list[Frame]) -> str | None:
    """The package whose binary raised it: the extension the line names, the package of the
    frames just above it; None where neither says (torch or an extension it loads)."""
    for name, package in _EXTENSIONS:
        if name in text:
            return package
    near = [frame for frame in frames if line - NEAR <= frame.line < line and frame.package]
    return near[-1].package if near else None


def _binary(line: int, text: str, evidence: Evidence) -> Reasoned:
    capability, source = _gpu(text, evidence)
    package = _binary_package(line, text, evidence.frames)
    gpu = f"{_sm(capability)} (compute capability {capability}, from {source})" if capability else "this GPU"
    facts: list[str] = []
    fix = ""
    if package in (None, "torch"):
        facts, fix = _torch(capability, evidence)
    elif package == "flash-attn":
        facts, fix = _flash_attn(capability, evidence)
    binary = package or "torch or an extension it loads (flash-attn, xformers, ...)"
    if not fix:
        arch = (
            f'TORCH_CUDA_ARCH_LIST="{capability}"' if capability else "TORCH_CUDA_ARCH_LIST set to this GPU"
        )
        what = f"a {package} build" if package else "builds of torch and of each CUDA extension"
        fix = f"install {what} with code for {gpu}, or build it here with {arch}"
    elif package is None:
        fix += "; then reinstall each CUDA extension (flash-attn, xformers) built for that torch"
    return Reasoned(
        id=f"architecture:{package or 'binary'}:no-kernel-for-gpu",
        kind="install",
        title=f"no kernel for {gpu} in {binary}: a build for other GPU architectures",
        raised_by=f"{binary} (compiled kernels, as the CUDA runtime reports)",
        condition="raised when a compiled binary holds no code (SASS or PTX) for the GPU's architecture",
        facts=tuple(facts),
        fix=fix,
        line=line,
        text=text,
        reasoner=ArchitectureReasoner.name,
        evidence=(f"the GPU: {source}" if capability else "the GPU is not stated",),
    )


def _torch(capability: str | None, evidence: Evidence) -> tuple[list[str], str]:
    """What torch's wheels carry for the GPU, and the build `wheel` would plan for it (the stated
    release's variant that runs on it, else the nearest newer release's)."""
    env = evidence.environment
    torch = env.packages.get("torch")
    build = env.torch_build
    facts_db = snapshot()
    facts = []
    if torch is not None and torch.version and build is not None and build.cuda and capability:
        variant = facts_db.torch_variant(torch.version, build.cuda)
        if variant is not None:
            runs = covers(variant.archs, capability)
            facts.append(
                f"torch {torch.version} wheels ({variant.name}) carry code for {', '.join(variant.archs)}: "
                f"{'they run' if runs else 'nothing runs'} on {_sm(capability)}"
            )
            if runs:
                return facts, ""
    if not capability:
        return facts, ""
    known = sorted(facts_db.torch_releases_with_variants(), key=Version)
    wanted = Version(torch.version).public if torch and torch.version else known[0] if known else None
    if wanted is None:
        return facts, ""
    target = replace(env, gpus=[Gpu(name=_sm(capability), compute_capability=capability)])
    choice, why = fitting_build(target, facts_db, wanted)
    if choice is None:
        return [*facts, why], ""
    if torch is None or not torch.version:  # no release stated: the first that runs on it
        line = ".".join(str(part) for part in Version(choice.release).release[:2])
        why = (
            f"torch {choice.release}'s {choice.variant.name} wheels carry code for {_sm(capability)} "
            f"(the {line} line is the first whose wheels do)"
        )
    command = f"pip install torch=={choice.release} --index-url {choice.index}"
    return [*facts, why], f"install torch {choice.release} built with {choice.variant.name}: {command}"


def _flash_attn(capability: str | None, evidence: Evidence) -> tuple[list[str], str]:
    """Whether any prebuilt wheel of the stated flash-attn release has code for the GPU."""
    package = evidence.environment.packages.get("flash-attn")
    if package is None or not package.version or not capability:
        return [], ""
    wheels = snapshot().flash_attn_wheels(package.version)
    if not wheels:
        return [], ""
    archs = sorted(
        {arch for wheel in wheels for arch in wheel.archs}, key=lambda a: int(re.sub(r"\D", "", a))
    )
    if not archs:
        return [], ""
    runs = covers(tuple(archs), capability)
    fact = (
        f"flash-attn {package.version}'s prebuilt wheels carry code for {', '.join(archs)}: "
        f"{'one runs' if runs else 'none runs'} on {_sm(capability)}"
    )
    if runs:
        return [fact], ""
    return [fact], (
        f"build flash-attn from source on a machine with the GPU (pip install flash-attn "
        f"--no-build-isolation --no-binary flash-attn), for {_sm(capability)}, or run attention with SDPA"
    )


def _toolkit(line: int, text: str, capability: str, evidence: Evidence) -> Reasoned:
    """nvcc refuses an architecture newer than its CUDA release."""
    first = _first_cuda(capability)
    nvcc = evidence.environment.nvcc
    facts = [f"nvcc {nvcc} ({evidence.environment.origins.get('nvcc', 'the stack')})"] if nvcc else []
    if first:
        facts.append(f"the first CUDA toolkit that knows {_sm(capability)} is {first} (NVIDIA's table)")
    newer = f"CUDA {first} or later" if first else "a CUDA toolkit that knows it"
    return Reasoned(
        id="architecture:nvcc:unsupported-arch",
        kind="install",
        title=f"the CUDA toolkit building the extension predates {_sm(capability)}",
        raised_by="nvcc (the CUDA toolkit on PATH or CUDA_HOME)",
        condition=f"raised when the build asks nvcc for {_sm(capability)}, which it does not know",
        facts=tuple(facts),
        fix=f"build with {newer}, or leave {capability} out of TORCH_CUDA_ARCH_LIST",
        line=line,
        text=text,
        reasoner=ArchitectureReasoner.name,
    )


def _first_cuda(capability: str) -> str | None:
    table = snapshot().triton_ptxas_cuda_archs()
    sm = _sm(capability)
    return next(
        (cuda for cuda, archs in sorted(table.items(), key=lambda item: Version(item[0])) if sm in archs),
        None,
    )


def _triton(line: int, text: str, capability: str, evidence: Evidence) -> Reasoned:
    """triton's compiler (its LLVM and bundled ptxas) predates the GPU."""
    first = snapshot().first_triton_with_arch(_sm(capability))
    triton = evidence.environment.packages.get("triton")
    facts = [f"triton {triton.version} ({triton.origin})"] if triton and triton.version else []
    if first:
        facts.append(f"the first triton release whose bundled ptxas knows {_sm(capability)} is {first}")
    fix = f"upgrade triton to {first} or later (with the torch that pins it)" if first else "upgrade triton"
    return Reasoned(
        id="architecture:triton:unknown-arch",
        kind="install",
        title=f"triton's compiler does not know {_sm(capability)}: a release older than the GPU",
        raised_by="triton (its LLVM backend, compiling a kernel for this GPU)",
        condition=f"raised when triton compiles for {_sm(capability)} and its LLVM has no such target",
        facts=tuple(facts),
        fix=fix,
        line=line,
        text=text,
        reasoner=ArchitectureReasoner.name,
    )
