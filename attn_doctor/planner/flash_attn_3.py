"""flash-attn-3 (FlashAttention-3, flash-attention's hopper/ folder): no usable build on PyPI, so
either transformers loads the Hub's prebuilt kernel where the target's transformers can, or hopper/
is built at a flash-attention tag; on a GPU it has no code for, each way out (FlashAttention-2,
torch's SDPA).

Facts, each read where the comment says (flash-attention's tags: ``git show TAG:path``)."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from attn_doctor.engine.release_conditions import covers
from attn_doctor.facts.model import Environment
from attn_doctor.planner.flash_attn import FlashAttnPlanner
from attn_doctor.planner.interface import Plan, WayOut
from attn_doctor.planner.target import TORCH_INDEX, WheelTarget, wheel_target
from attn_doctor.releases.facts import ReleaseFacts

PACKAGE = "flash-attn-3"
# PyPI has flash-attn-3 0.0.0 alone, yanked ("Reason for being yanked: Empty release"): a 1.5 kB
# py3-none-any wheel whose flash_attn_interface.py and flash_attn_config.py are empty (pip download
# --no-deps 'flash-attn-3==0.0.0'); `pip install flash-attn-3` finds no version. No build to plan.
NOT_ON_PYPI = "PyPI's flash-attn-3 is one yanked, empty 0.0.0"
REPOSITORY = "https://github.com/Dao-AILab/flash-attention.git"
# every flash-attention tag whose tree has hopper/setup.py: v2.6.2 is the first, v2.8.3.post1 the
# newest v2.* tag (commit a8aa52b1); hopper/ on main after it (3.0.0, #2223) is in no v2.* tag
TAGS = (
    "2.6.2", "2.6.3", "2.7.0", "2.7.0.post1", "2.7.0.post2", "2.7.1", "2.7.1.post1", "2.7.1.post2",
    "2.7.1.post3", "2.7.1.post4", "2.7.2", "2.7.2.post1", "2.7.3", "2.7.4", "2.7.4.post1", "2.8.0",
    "2.8.0.post1", "2.8.0.post2", "2.8.1", "2.8.2", "2.8.3", "2.8.3.post1",
)  # fmt: skip
NEWEST_TAG = TAGS[-1]
# hopper/__init__.py at every tag above: __version__ = "3.0.0.b1"
FA3_VERSION = "3.0.0b1"
# hopper/setup.py: cc_flag "arch=compute_90a,code=sm_90a" at every tag; from v2.7.3 (commit 7bc3f031
# "Compile for both Sm80 and Sm90") the *_sm80.cu files get "arch=compute_80,code=sm_80" too, and
# they instantiate Arch 80 and 86 kernels (instantiations/flash_fwd_hdim128_bf16_sm80.cu), so sm_80
# code serves 8.0, 8.6 and 8.9. No *_sm100.cu source is compiled (cuda_compile_sm100 is unused), and
# static_switch.h's ARCH_SWITCH sends every arch >= 90 to the sm_90a kernels: no code for 10.x, 12.x.
# tridao in flash-attention#1049 (2025-03-03): "FA3 now works on Ampere, Ada, and Hopper", built
# from hopper/ ("Yes", 2025-03-06)
SM80_FROM = Version("2.7.3")
# flash_api.cpp (v2.8.3.post1): "FlashAttention on Ampere/Ada cards only supports fp16 and bf16 data
# type" when major < 9; "FlashAttention only supports Ampere GPUs or newer." when major < 8
AMPERE_NOTE = "on 8.x FP16/BF16 only, no FP8 (flash_api.cpp), and the README names H100/H800 alone"
# hopper/setup.py PACKAGE_NAME: "flashattn-hopper" to v2.7.2.post1, "flash_attn" in v2.7.3-v2.7.4.post1
# (FA2's own name: installing it replaces FA2, flash-attention#1481), "flash_attn_3" from v2.8.0
# (commit 40cbd529 "Temporarily change package name of FA3 to allow FA2 & FA3 install")
FA2_NAME_FROM, FA3_NAME_FROM = Version("2.7.3"), Version("2.8.0")
# hopper/setup.py: `if bare_metal_version < Version("12.3"): raise RuntimeError("FlashAttention-3 is
# only supported on CUDA 12.3 and above")`; torch.utils.cpp_extension._check_cuda_version raises
# CUDA_MISMATCH_MESSAGE when nvcc's CUDA major is not torch's: so torch must be a CUDA 12 build.
# CUDA 13 toolkits: fixed by "Fix hopper cuda 13 build (#1949)" (commit 933b2c3e), on main only.
CUDA_MIN = Version("12.3")
CUDA_MAJOR = 12
# README.md at v2.8.3.post1, "FlashAttention-3 beta release": "Requirements: H100 / H800 GPU, CUDA >=
# 12.3." and "To install: cd hopper; python setup.py install"; hopper/setup.py install_requires:
# torch, einops, packaging, ninja (no torch version); it runs `git submodule update --init
# ../csrc/cutlass` itself, and unless the toolkit is 12.8 downloads nvcc 12.6.85 and ptxas 12.8.93
# (NVIDIA_TOOLCHAIN_VERSION) from NVIDIA's CUDA redist archives (download_and_copy)
SOURCE_BUILD = (
    "pip install ninja packaging einops && git clone --branch v{tag} " + REPOSITORY + " && "
    "cd flash-attention/hopper && python setup.py install"
)
BUILD_NEEDS = (
    "needs a CUDA 12 toolkit >= 12.3 (nvcc) and git; setup.py fetches csrc/cutlass and, unless the "
    "toolkit is 12.8, nvcc 12.6.85 and ptxas 12.8.93 from NVIDIA; then `import flash_attn_interface`"
)
# README.md at v2.8.3.post1, "Installation and features": "Linux. Might work for Windows starting
# v2.3.2 ... but Windows compilation still requires more testing."
PLATFORM = "linux"
# transformers' modeling_utils.py: 4.54.0's _check_and_adjust_attn_implementation is the first to
# match a bare Hub repo id (re.match(r"^[^/:]+/[^/:]+:?[^/:]+$", ...); 4.52-4.53 need "repo:function"
# and register that function as is) and wraps a kernel that has flash_attn_varlen_func in
# flash_attention_forward; from 4.56.0, integrations/hub_kernels.py's is_kernel. The kernels version
# it takes is its extra's pin (METADATA): 'kernels<0.7,>=0.6.1; extra == "hub-kernels"' in 4.54.0,
# 'kernels<=0.9,>=0.6.1; extra == "hub-kernels"' in 4.55.0-4.57.6, 'kernels<0.11,>=0.10.2; extra ==
# "hub-kernels"' in 5.0.0; the extra is "kernels" from 5.1.0 ('kernels<0.11,>=0.10.2; extra ==
# "kernels"'; 5.24.0: 'kernels<0.19,>=0.18.2; extra == "kernels"').
HUB_FROM = Version("4.54.0")
KERNELS_EXTRA_FROM = Version("5.1.0")
# huggingface.co/kernels-community/flash-attn3 (its card): functions flash_attn_func,
# flash_attn_varlen_func, ...; "CUDA Capabilities: 8.0, 9.0a" (the same code as the build)
HUB_KERNEL = "kernels-community/flash-attn3"
# README.md at v2.8.3.post1: FlashAttention-2 supports "Ampere, Ada, or Hopper GPUs (e.g., A100, RTX
# 3090, RTX 4090, H100). Support for Turing GPUs (T4, RTX 2080) is coming soon"
FA2_MIN_MAJOR = 8
# transformers 4.54.0 modeling_utils.py: `"sdpa" if attn_implementation is None` (the default)
SDPA = WayOut(
    title="torch's scaled_dot_product_attention (SDPA): nothing to install",
    commands=('from_pretrained(..., attn_implementation="sdpa")',),
    why="torch's own attention kernels, on every CUDA GPU its build has code for; transformers' default",
)


def archs(tag: str) -> tuple[str, ...]:
    """The GPU code hopper/setup.py compiles at flash-attention ``tag``."""
    return ("sm_80", "sm_90a") if Version(tag) >= SM80_FROM else ("sm_90a",)


class FlashAttn3Planner:
    package = PACKAGE

    def plan(self, env: Environment, facts: ReleaseFacts, version: str | None = None) -> Plan:
        tag = _tag(version) if version else NEWEST_TAG
        if tag is None:
            why = f"flash-attention {version} is no tag with hopper/ (v{TAGS[0]} to v{NEWEST_TAG})"
            return Plan(PACKAGE, version, None, why)
        gpus = [gpu.compute_capability for gpu in env.distinct_gpus if gpu.compute_capability]
        without = [gpu for gpu in gpus if not covers(archs(tag), gpu)]
        if without:
            return _no_code(env, facts, tag, version, without)
        platform = env.platform or PLATFORM
        if platform != PLATFORM:
            why = f"FlashAttention-3 builds on Linux (flash-attention's README), not {platform}"
            return Plan(PACKAGE, version, None, why, ways_out=_others(env, facts, gpus))
        target = wheel_target(env)
        if isinstance(target, str):
            return Plan(PACKAGE, version, None, target)
        transformers = env.packages.get("transformers")
        hub = _hub(transformers.version if transformers else None, gpus)
        if version is None and hub is not None:
            return hub
        if int(target.cuda_major) != CUDA_MAJOR:
            return _other_cuda(env, facts, target, tag, version, gpus)
        toolkit = _toolkit_problem(env.nvcc)
        if toolkit is not None:
            why = f"flash-attention v{tag}'s hopper/ {toolkit}"
            return Plan(PACKAGE, version, None, why, ways_out=_others(env, facts, gpus))
        return Plan(PACKAGE, tag, SOURCE_BUILD.format(tag=tag), _build_why(tag, target, gpus))


def _tag(version: str) -> str | None:
    try:
        wanted = Version(version.removeprefix("v"))
    except InvalidVersion:
        return None
    return next((tag for tag in TAGS if Version(tag) == wanted), None)


def _build_why(tag: str, target: WheelTarget, gpus: list[str]) -> str:
    code = " and ".join(archs(tag))
    on = f" ({', '.join(gpus)})" if gpus else " (the target's GPUs are not known)"
    ampere = f"; {AMPERE_NOTE}" if any(gpu.startswith("8.") for gpu in gpus) else ""
    which = Version(tag)
    name = "flash_attn_3" if which >= FA3_NAME_FROM else "flashattn-hopper"
    if FA2_NAME_FROM <= which < FA3_NAME_FROM:
        name = "flash_attn (FA2's name: it replaces an installed flash-attn)"
    return (
        f"{NOT_ON_PYPI}: flash-attention v{tag}'s hopper/ builds {name} {FA3_VERSION} with code for "
        f"{code}{on}, against torch {target.torch_minor} (CUDA {target.cuda}){ampere}; {BUILD_NEEDS}"
    )


def _hub(transformers: str | None, gpus: list[str]) -> Plan | None:
    """transformers' own route to FA3: the Hub kernel, fetched by ``kernels`` at load time."""
    try:
        release = Version(Version(transformers).public) if transformers else None
    except InvalidVersion:
        return None
    if release is None or release < HUB_FROM:
        return None
    extra = "kernels" if release >= KERNELS_EXTRA_FROM else "hub-kernels"
    requirement = f"transformers[{extra}]=={release}"
    on = f" ({', '.join(gpus)})" if gpus else " (the target's GPUs are not known)"
    why = (
        f"{NOT_ON_PYPI}; transformers {release} loads FA3 from the Hub: from_pretrained(..., "
        f'attn_implementation="{HUB_KERNEL}"), a prebuilt kernel with code for 8.0 and 9.0a{on}; its '
        f"{extra} extra pins the kernels release it takes, which downloads the build for the installed "
        "torch at load time (no build, network at first load)"
    )
    return Plan(PACKAGE, None, f"pip install '{requirement}'", why, requirement=requirement)


def _toolkit_problem(nvcc: str | None) -> str | None:
    if nvcc is None:
        return None
    try:
        toolkit = Version(nvcc)
    except InvalidVersion:
        return None
    if toolkit.major != CUDA_MAJOR or toolkit < CUDA_MIN:
        return f"needs a CUDA 12 toolkit >= {CUDA_MIN}; the target's nvcc is {nvcc}"
    return None


def _no_code(
    env: Environment, facts: ReleaseFacts, tag: str, version: str | None, without: list[str]
) -> Plan:
    names = ", ".join(f"{gpu} ({_gpu_name(env, gpu)})" for gpu in without)
    why = (
        f"FlashAttention-3 (v{tag}'s hopper/) has code for {' and '.join(archs(tag))} only, none for {names}"
    )
    ways = []
    if all(covers(archs(NEWEST_TAG), gpu) for gpu in without):
        code = " and ".join(archs(NEWEST_TAG))
        title = f"build flash-attention v{NEWEST_TAG}'s hopper/, which has code for {code}"
        ways.append(WayOut(title, (SOURCE_BUILD.format(tag=NEWEST_TAG),), BUILD_NEEDS))
    gpus = [gpu.compute_capability for gpu in env.distinct_gpus if gpu.compute_capability]
    return Plan(PACKAGE, version, None, why, ways_out=(*ways, *_others(env, facts, gpus)))


def _gpu_name(env: Environment, capability: str) -> str:
    return next(gpu.name for gpu in env.distinct_gpus if gpu.compute_capability == capability)


def _other_cuda(
    env: Environment, facts: ReleaseFacts, target: WheelTarget, tag: str, version: str | None, gpus: list[str]
) -> Plan:
    """torch built with CUDA 11 or 13: hopper/ at a v2.* tag builds with a CUDA 12 toolkit only."""
    later = " (CUDA 13 from #1949, on main only)" if int(target.cuda_major) > CUDA_MAJOR else ""
    why = (
        f"flash-attention v{tag}'s hopper/ builds with a CUDA 12 toolkit >= {CUDA_MIN}{later}, and torch "
        f"{target.torch} is a CUDA {target.cuda} build: torch's cpp_extension refuses an nvcc of another "
        "CUDA major"
    )
    ways = []
    torch = _cuda12_torch(target.torch, gpus, facts)
    if torch is not None:
        release, variant = torch
        title = f"torch {release} ({variant}), then build flash-attention v{tag}'s hopper/ against it"
        commands = (
            f"pip install torch=={release} --index-url {TORCH_INDEX.format(variant=variant)}",
            SOURCE_BUILD.format(tag=tag),
        )
        ways.append(WayOut(title, commands, f"torch's {variant} wheels are CUDA 12 builds; {BUILD_NEEDS}"))
    return Plan(PACKAGE, version, None, why, ways_out=(*ways, *_others(env, facts, gpus)))


def _cuda12_torch(torch: str, gpus: list[str], facts: ReleaseFacts) -> tuple[str, str] | None:
    """The target's torch release in its newest CUDA 12 variant with code for the GPUs, else the
    newest torch release that has one."""
    releases = sorted(facts.torch_releases_with_variants(), key=Version, reverse=True)
    for release in [torch, *releases]:
        variants = [
            variant.name
            for variant in facts.torch_variants(release)
            if variant.name.startswith(f"cu{CUDA_MAJOR}")
            and Version(f"{variant.name[2:4]}.{variant.name[4:]}") >= CUDA_MIN
            and all(covers(variant.archs, gpu) for gpu in gpus)
        ]
        if variants:
            return release, max(variants)
    return None


def _others(env: Environment, facts: ReleaseFacts, gpus: list[str]) -> tuple[WayOut, ...]:
    """FlashAttention-2 (on Ampere and newer) as flash-attn's planner finds it, then SDPA."""
    ways = []
    if all(int(gpu.split(".")[0]) >= FA2_MIN_MAJOR for gpu in gpus):
        fa2 = FlashAttnPlanner().plan(env, facts)
        if fa2.command is not None:
            ways.append(WayOut(f"FlashAttention-2: flash-attn {fa2.version}", (fa2.command,), fa2.why))
        elif fa2.ways_out:
            first = fa2.ways_out[0]
            why = f"{fa2.why}; {first.why}"
            ways.append(WayOut(f"FlashAttention-2 (flash-attn): {first.title}", first.commands, why))
    return (*ways, SDPA)
