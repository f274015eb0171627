"""flash-linear-attention: the newest release (or the one asked for) whose requirements the target
meets: its Requires-Python, and its Requires-Dist (and that of the fla-core release it pins, from
0.3.2 on) against the versions the target has. Pure-Python wheels (py3-none-any): no build."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from attn_doctor.facts.model import Environment, marker_environment
from attn_doctor.facts.names import rule_name
from attn_doctor.planner.interface import Plan, WayOut
from attn_doctor.planner.target import release_of
from attn_doctor.releases.facts import ReleaseFacts

PACKAGE = "flash-linear-attention"
# flash-linear-attention 0.3.2 and later require fla-core==<their version> (their METADATA); the
# kernels' own requirements (torch, triton) moved there
CORE = "fla-core"
# fla-core 0.5.1 and later state torch and triton under a backend extra only ('torch>=2.7.0; extra ==
# "cuda"', 'triton>=3.3; extra == "cuda"', likewise "rocm", "xpu", "cpu"; "npu" pins torch_npu): read
# with the extra of the target's torch build, they say what the kernels need there, though a plain
# `pip install flash-linear-attention` installs none of them
BACKEND_EXTRA = {"cuda": "cuda", "hip": "rocm", "cpu": "cpu"}
PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")


@dataclass(frozen=True)
class _Verdict:
    version: str
    misses: tuple[str, ...]  # "torch 2.6.0 (fla-core 0.6.0[cuda]: torch>=2.7.0)"
    specs: tuple[str, ...]  # the requirements the target misses, as pip takes them: "torch>=2.7.0"
    python: SpecifierSet | None  # Requires-Python, when the target's Python misses it
    unknown: str | None = None  # why the release cannot be judged (its metadata is not known)


class FlaPlanner:
    package = PACKAGE

    def plan(self, env: Environment, facts: ReleaseFacts, version: str | None = None) -> Plan:
        torch = release_of(env, "torch")
        if torch is None:
            return Plan(
                PACKAGE, version, None, "torch's version is not known: give it (--pin torch==2.7.1, -r)"
            )
        if env.python is None:
            return Plan(PACKAGE, version, None, "the target's Python is not known (--python 3.11)")
        releases = sorted(
            (v for v, release in facts.releases(PACKAGE).items() if not release.yanked), key=Version
        )
        if not releases:
            return Plan(PACKAGE, version, None, f"the release facts know no {PACKAGE} release")
        stack = f"Python {env.python}, torch {torch}" + "".join(
            f", {name} {release_of(env, name)}"
            for name in ("triton", "transformers")
            if release_of(env, name)
        )
        if version is not None:
            return _asked(env, facts, version, releases, stack)
        skipped: list[str] = []
        for candidate in reversed(releases):
            verdict = _judge(env, facts, candidate)
            if verdict.unknown is not None:
                skipped.append(verdict.unknown)
            elif not verdict.misses:
                why = f"{PACKAGE} {candidate} is the newest release whose requirements hold ({stack})"
                if candidate != releases[-1]:
                    last = _judge(env, facts, releases[-1])
                    why += f"; {releases[-1]} needs {'; '.join(last.misses) or last.unknown}"
                if skipped:
                    why += f"; not judged: {'; '.join(skipped)}"
                return _fits(candidate, why)
        newest = _judge(env, facts, releases[-1])
        why = f"no {PACKAGE} release's requirements hold on the target ({stack})"
        if newest.unknown is not None:
            return Plan(PACKAGE, None, None, f"{why}; {newest.unknown}")
        why += f"; the newest, {newest.version}, needs {'; '.join(newest.misses)}"
        return Plan(PACKAGE, None, None, why, ways_out=(_meet(newest),))


def _asked(env: Environment, facts: ReleaseFacts, version: str, releases: list[str], stack: str) -> Plan:
    """Release ``version`` (``fix`` chose it): its command, or why not and each way out."""
    verdict = _judge(env, facts, version)
    if verdict.unknown is None and not verdict.misses:
        return _fits(version, f"{PACKAGE} {version}'s requirements hold on the target ({stack})")
    ways = []
    fitting = _newest_fitting(env, facts, releases)
    if fitting is not None:
        ways.append(_install(fitting, f"the newest release whose requirements hold ({stack})"))
    if verdict.unknown is None:
        ways.append(_meet(verdict))
    why = verdict.unknown or f"{PACKAGE} {version} needs {'; '.join(verdict.misses)}"
    return Plan(PACKAGE, version, None, why, ways_out=tuple(ways))


def _fits(version: str, why: str) -> Plan:
    return Plan(
        PACKAGE, version, f"pip install {PACKAGE}=={version}", why, requirement=f"{PACKAGE}=={version}"
    )


def _install(version: str, why: str) -> WayOut:
    return WayOut(f"{PACKAGE} {version}", (f"pip install {PACKAGE}=={version}",), why)


def _meet(verdict: _Verdict) -> WayOut:
    """What the target would have to change for ``verdict``'s release to fit."""
    pins = " ".join(f"'{spec}'" for spec in verdict.specs)
    install = f"pip install '{PACKAGE}=={verdict.version}'" + (f" {pins}" if pins else "")
    commands = [install]
    if verdict.python is not None:
        python = next((p for p in PYTHONS if verdict.python.contains(p)), None)
        if python is not None:
            commands = [f"python{python} -m {install}"]
    title = f"{PACKAGE} {verdict.version} on what it requires"
    why = f"it needs {'; '.join(verdict.misses)}"
    if verdict.specs:
        why += "; pip moves the packages named (torch from PyPI: its default CUDA build)"
    return WayOut(title, tuple(commands), why)


def _newest_fitting(env: Environment, facts: ReleaseFacts, releases: list[str]) -> str | None:
    for candidate in reversed(releases):
        verdict = _judge(env, facts, candidate)
        if verdict.unknown is None and not verdict.misses:
            return candidate
    return None


def _judge(env: Environment, facts: ReleaseFacts, version: str) -> _Verdict:
    """What of ``version``'s requirements (and its fla-core's) the target misses."""
    release = facts.release(PACKAGE, version)
    if release is None:
        return _Verdict(version, (), (), None, f"{PACKAGE} {version} is not in the release facts")
    markers = marker_environment(env)
    own = facts.requirements(PACKAGE, version, markers)
    if own is None:
        return _Verdict(version, (), (), None, f"{PACKAGE} {version}'s requirements are not known")
    misses: list[str] = []
    specs: list[str] = []
    python = None
    if release.requires_python and env.python:
        python = SpecifierSet(release.requires_python)
        if python.contains(env.python, prereleases=True):
            python = None
        else:
            misses.append(f"Python {release.requires_python} (the target's is {env.python})")
    required = [(f"{PACKAGE} {version}", r) for r in own]
    for core in (r for r in own if canonicalize_name(r.name) == CORE):
        pinned = _pinned(core)
        if pinned is None:
            continue
        extra = _backend_extra(env)
        core_markers = {**markers, "extra": extra}
        theirs = facts.requirements(CORE, pinned, core_markers)
        if theirs is None:
            known = "not in the release facts" if facts.release(CORE, pinned) is None else "not known"
            return _Verdict(version, (), (), None, f"{CORE} {pinned}'s requirements are {known}")
        required += [(f"{CORE} {pinned}[{extra}]", r) for r in theirs]
    for source, requirement in required:
        name = rule_name(requirement.name)
        if name in (rule_name(PACKAGE), rule_name(CORE)) or not requirement.specifier:
            continue
        have = release_of(env, name)
        if have is not None and not requirement.specifier.contains(have, prereleases=True):
            misses.append(f"{name} {requirement.specifier} ({source}; the target has {have})")
            specs.append(f"{requirement.name}{requirement.specifier}")
    return _Verdict(version, tuple(misses), tuple(dict.fromkeys(specs)), python)


def _pinned(requirement: Requirement) -> str | None:
    """The release an exact pin names ("fla-core==0.6.0")."""
    pins = [spec.version for spec in requirement.specifier if spec.operator in ("==", "===")]
    return pins[0] if len(pins) == 1 and "*" not in pins[0] else None


def _backend_extra(env: Environment) -> str:
    """fla-core's extra for the target's torch build; an unknown build reads as CUDA, PyPI's
    Linux default (the extras cuda, rocm, xpu and cpu state the same torch and triton floors)."""
    build = env.torch_build
    if build is None or build.cuda:
        return BACKEND_EXTRA["cuda"]
    return BACKEND_EXTRA["hip"] if build.hip else BACKEND_EXTRA["cpu"]
