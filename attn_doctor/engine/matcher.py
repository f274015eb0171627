"""Match rules against an environment: a tri-state verdict with one reason per condition.

Each condition is True (holds), False (does not hold) or None (a needed fact is missing).
Any False makes the rule "not affected"; otherwise any None makes it "unknown".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from attn_doctor.engine.schema import Affects, Rule, Unless
from attn_doctor.facts.features import EVIDENT_FEATURES
from attn_doctor.facts.missing_names import MissingName
from attn_doctor.facts.model import MAYBE, OPEN_PACKAGE_LIST, OPEN_PACKAGE_LISTS, Environment, Package
from attn_doctor.facts.model_families import model_phrase
from attn_doctor.probes.observation import Observation, ProbeVerdict
from attn_doctor.words import counted

RELEASE = "release"  # the condition of every reason the release-facts snapshot decides
USE_CONDITIONS = ("features", "models")  # what the user's code does, not what is installed


class Verdict(str, enum.Enum):
    AFFECTED = "affected"
    UNKNOWN = "unknown"
    NOT_AFFECTED = "not-affected"


@dataclass(frozen=True)
class Reason:
    condition: str  # "transformers", "compute_capability", "features", ...
    holds: bool | None
    text: str
    origin: str | None = None  # where the fact came from, e.g. "requirements.txt:3"
    unknown_features: tuple[str, ...] = ()  # "applies if you use ...": the features not known
    evidence: tuple[str, ...] = ()  # file:line where the project shows the features in use
    suggestion: str | None = None  # a fix computed for these versions from the release facts
    suggested_pins: tuple[str, ...] = ()  # its versions, NAME==VERSION, each a real release
    missing: str = ""  # when holds is None: the fact whose absence leaves it open (a MISSING key)


# What an unknown reason lacks, as ``Reason.missing``: reports group unknown rules by it and say how
# to supply it once ("7 rules need the GPU: pass --gpu").
MISSING_GPU = "gpu"
MISSING_DRIVER = "driver"
MISSING_NVCC = "nvcc"
MISSING_TORCH_BUILD = "torch_build"
MISSING_PYTHON = "python"
MISSING_PLATFORM = "platform"
MISSING_VERSION = "version"  # a package named without a version, or one that is not a version
MISSING_RELEASE_DATA = "release_data"  # a release the snapshot does not hold
MISSING_FROM_LOG = "log"  # a package a log does not name
MISSING_FROM_IMAGE = "image"  # a package an image's record does not name
MISSING_API_ERROR = "api_error"  # explain's API tables need the error a log shows


@dataclass(frozen=True)
class Finding:
    rule: Rule
    verdict: Verdict  # the versions' verdict, or the probe's where a probe gave one
    reasons: tuple[Reason, ...]
    ignored: str | None = None  # the reason given in [tool.attn-doctor.ignore]
    probe: Observation | None = None

    @property
    def version_verdict(self) -> Verdict:
        """What the facts alone say, before any probe."""
        return _verdict_of(self.reasons)


def match(
    rule: Rule, env: Environment, ignored: str | None = None, observed: tuple[MissingName, ...] = ()
) -> Finding:
    """``observed``: API errors a log shows (explain), which the ``api_change`` condition reads."""
    reasons = tuple(_conditions(rule, env, observed))
    return Finding(rule=rule, verdict=_verdict_of(reasons), reasons=reasons, ignored=ignored)


def with_probe(finding: Finding, observation: Observation, env: Environment) -> Finding:
    """A probe that saw the code path decide overrides the versions; a skipped or failed one does not.

    A probe shows what the installed library does, not what the user's code calls: a bug it saw
    still needs the rule's features in use and one of its model families (unknown use stays
    unknown, as for the versions). Where the versions decided before these were asked, they are
    asked now."""
    verdict, reasons = finding.verdict, finding.reasons
    if observation.verdict is ProbeVerdict.NOT_AFFECTED:
        verdict = Verdict.NOT_AFFECTED
    elif observation.verdict is ProbeVerdict.AFFECTED:
        uses = tuple(reason for reason in reasons if reason.condition in USE_CONDITIONS)
        if not uses:
            uses = tuple(_uses(finding.rule.affects, env))
            reasons = (*reasons, *uses)
        verdict = _verdict_of(uses)
    return replace(finding, verdict=verdict, reasons=reasons, probe=observation)


def needs_model(finding: Finding) -> bool:
    """Whether ``finding`` is left unknown by a model family that the code is not known to run."""
    return any(reason.condition == "models" and reason.holds is None for reason in finding.reasons)


def _verdict_of(reasons: tuple[Reason, ...]) -> Verdict:
    outcomes = [reason.holds for reason in reasons]
    if False in outcomes:
        return Verdict.NOT_AFFECTED
    if None in outcomes:
        return Verdict.UNKNOWN
    return Verdict.AFFECTED


def _conditions(rule: Rule, env: Environment, observed: tuple[MissingName, ...]) -> list[Reason]:
    affects = rule.affects
    reasons = [_package(name, spec, env) for name, spec in affects.packages.items()]
    reasons += [_absent(name, env) for name in affects.absent]
    for key, spec in affects.versions.items():
        reasons.append(_VERSION_CHECKS[key](spec, env))
    if affects.platform:
        reasons.append(_platform(affects.platform, env))
    if affects.gfx:
        reasons.append(_gfx(affects.gfx, env))
    if affects.torch_build:
        reasons.append(_torch_build(affects.torch_build, env))
    if affects.unless and not any(reason.holds is False for reason in reasons):
        reasons.append(_unless(affects.unless, env))
    # what costs a project scan or a snapshot read is asked only when it can still matter
    if not any(reason.holds is False for reason in reasons):
        reasons += _uses(affects, env)
    decided = any(reason.holds is False for reason in reasons)
    if affects.release_packages and not decided:
        subject = affects.release_packages[0]
        if subject not in env.packages:
            return [*reasons, not_installed(subject, RELEASE, env)]
        from attn_doctor.engine import release_conditions

        reasons += release_conditions.reasons(affects, env, observed)
    return reasons


def _contains(version: str, spec: SpecifierSet) -> bool | None:
    """Whether ``version`` is in ``spec``; None when that cannot be told.

    Unparsable versions cannot be told. Neither can a nightly or pre-release of a version the
    rule names as a boundary: ``2.6.0.dev20240901`` is before 2.6.0 by PEP 440, but whether the
    fix (or the bug) released in 2.6.0 was already on main that day, only the code knows.
    """
    try:
        parsed = Version(version)
    except ValueError:  # InvalidVersion, or a number past the int-string limit
        return None
    if parsed.is_prerelease and parsed.base_version in _boundaries(spec):
        return None
    return spec.contains(parsed, prereleases=True)


def _boundaries(spec: SpecifierSet) -> set[str]:
    """Final releases the rule names; a boundary written as a nightly is taken at its word."""
    versions = [Version(s.version) for s in spec if not s.version.endswith(".*")]
    return {v.base_version for v in versions if not v.is_prerelease}


def _in_spec(condition: str, label: str, version: str, spec: SpecifierSet) -> Reason:
    holds = _contains(version, spec)
    if holds is None:
        why = (
            "is not a valid version"
            if not is_version(version)
            else f"is a pre-release at a boundary of {spec}: which side it is on is unknown"
        )
        return Reason(condition, None, f"{label} {version!r} {why}", missing=MISSING_VERSION)
    relation = "is in" if holds else "is not in"
    return Reason(condition, holds, f"{label} {version} {relation} {str(spec) or 'any version'}")


def is_version(text: str) -> bool:
    """A PEP 440 version (``nightly`` or a number past the int-string limit is not)."""
    try:
        Version(text)
    except ValueError:  # InvalidVersion, or a number past the int-string limit
        return False
    return True


def _package(name: str, spec: SpecifierSet, env: Environment) -> Reason:
    package = env.packages.get(name)
    if package is None:
        return not_installed(name, name, env)
    if package.version is None and package.releases:
        return _in_releases(name, package, spec)
    if package.version is None and not str(spec):  # any version: the one it will have is one
        return Reason(
            name, True, f"{name} (version not stated, {package.origin}) is in any version", package.origin
        )
    if package.version is None:
        # a package a log names without its version is whatever is installed there, no pick of pip's
        admitted = () if package.origin.startswith(FROM_THE_LOG) else admitted_releases(package, env.python)
        if admitted:
            return _in_admitted(name, package, spec, admitted)
        return Reason(
            name,
            None,
            f"{name} version unknown ({package.origin}: no version)",
            package.origin,
            missing=MISSING_VERSION,
        )
    return replace(_in_spec(name, name, package.version, spec), origin=package.origin)


def _absent(name: str, env: Environment) -> Reason:
    """Holds where the target does not install ``name``: the reverse of a package condition."""
    package = env.packages.get(name)
    if package is not None:
        return Reason(
            name, False, f"{name} {package.version or ''} is installed".replace("  ", " "), package.origin
        )
    missing = not_installed(name, name, env)
    return replace(missing, holds=True) if missing.holds is False else missing


FROM_THE_LOG = "from the log"  # the origin of a package a log names (facts/log_facts.py)
# a release newer than every one the snapshot holds: a range open above admits it too
AFTER_SNAPSHOT = "after the release database"
_ADMITTED: dict[tuple[str, str | None, str | None], tuple[str, ...]] = {}


def admitted_releases(package: Package, python: str | None) -> tuple[str, ...]:
    """The releases a package declared without a version can be: those of the release database that
    its specifier admits (every one, unpinned or not stated), as pip picks them (no yanked ones, no
    pre-releases unless the specifier names one, none whose Requires-Python excludes the target's),
    oldest first, with AFTER_SNAPSHOT last where the range is open above. Empty: the database does
    not hold the package."""
    key = (package.distribution, package.specifier, python)
    if key not in _ADMITTED:
        _ADMITTED[key] = _admitted(package, python)
    return _ADMITTED[key]


def _admitted(package: Package, python: str | None) -> tuple[str, ...]:
    from attn_doctor.releases.facts import snapshot

    facts = snapshot()
    releases = facts.releases(package.distribution) or facts.releases(package.name)
    if not releases:
        return ()
    try:
        spec = SpecifierSet(package.specifier or "")
    except ValueError:  # InvalidSpecifier, or a number past the int-string limit
        return ()
    kept = []
    for version, release in releases.items():
        if release.yanked or not spec.contains(version):
            continue
        if python and release.requires_python and not _python_fits(release.requires_python, python):
            continue
        kept.append(version)
    kept.sort(key=Version)
    if kept and spec.contains(str(Version(kept[-1]).major + 1000)):
        kept.append(AFTER_SNAPSHOT)
    return tuple(kept)


def _python_fits(requires: str, python: str) -> bool:
    try:
        return SpecifierSet(requires).contains(python, prereleases=True)
    except ValueError:  # a Requires-Python packaging cannot read: pip would not skip the release
        return True


def _in_admitted(name: str, package: Package, spec: SpecifierSet, admitted: tuple[str, ...]) -> Reason:
    """A range decides a rule when every release it admits lies on one side of the rule's range;
    where they fall on both sides, which one pip picks decides, and the reason names them."""
    final = AFTER_SNAPSHOT if admitted[-1] == AFTER_SNAPSHOT else None
    known = [version for version in admitted if version != AFTER_SNAPSHOT]
    inside = [version for version in known if _contains(version, spec)]
    # a release after the snapshot is past every known one: inside a range open above
    after_inside = final is not None and bool(spec.contains(str(Version(known[-1]).major + 1000)))
    declared = (
        "version not stated"
        if package.specifier is None
        else "unpinned"
        if not package.specifier
        else f"declared {package.specifier}"
    )
    count = counted(len(known), "release")
    span = known[0] if len(known) == 1 else f"{known[0]}–{known[-1]}"
    label = f"{name} ({declared}, {package.origin}: {count} of the release database admitted, {span})"
    if len(inside) == len(known) and (final is None or after_inside):
        return Reason(name, True, f"{label}: every one is in {spec}", package.origin)
    if not inside and not after_inside:
        return Reason(name, False, f"{label}: none is in {spec}", package.origin)
    picked = f"{inside[0]}–{inside[-1]}" if len(inside) > 1 else inside[0] if inside else "a newer release"
    newest = known[-1]
    where = "is in it" if _contains(newest, spec) else "is not"
    text = (
        f"{label}: applies if pip picks {picked} ({counted(len(inside), 'release')} in {spec}; "
        f"the newest it admits, {newest}, {where})"
    )
    return Reason(name, None, text, package.origin, missing=MISSING_VERSION)


def _in_releases(name: str, package: Package, spec: SpecifierSet) -> Reason:
    """A version known only as one of some releases: the condition holds when it holds for all of
    them, fails when it fails for all, and is unknown between (the rule's boundary is inside)."""
    outcomes = {_contains(version, spec) for version in package.releases}
    span = (
        package.releases[0] if len(package.releases) == 1 else f"{package.releases[0]}–{package.releases[-1]}"
    )
    label = f"{name} {span} ({counted(len(package.releases), 'release')}, {package.origin})"
    if outcomes == {True}:
        return Reason(name, True, f"{label} is in {spec}", package.origin)
    if outcomes == {False}:
        return Reason(name, False, f"{label} is not in {spec}", package.origin)
    return Reason(
        name, None, f"{label}: some are in {spec}, some not", package.origin, missing=MISSING_VERSION
    )


def not_installed(name: str, condition: str, env: Environment) -> Reason:
    """Absent where the target's package list is closed; unknown where a log or an image's record
    just does not name it."""
    if env.absent(name):
        return Reason(condition, False, f"{name} is not installed")
    if MAYBE + name in env.origins:
        origin = env.origins[MAYBE + name]
        return Reason(condition, None, f"{name}: installed or not ({origin})", missing=MISSING_VERSION)
    listed_by = env.origins["packages"]
    return Reason(
        condition,
        None,
        f"{name}: not named in {OPEN_PACKAGE_LISTS[listed_by]} (installed or not)",
        listed_by,
        missing=MISSING_FROM_LOG if listed_by == OPEN_PACKAGE_LIST else MISSING_FROM_IMAGE,
    )


def _unless(ways: tuple[Unless, ...], env: Environment) -> Reason:
    """The rule's ways around the bug: one that every fact shows taken clears the rule (does not
    hold); one that a missing fact leaves open leaves it unknown; none taken holds, each with the
    fact that rules it out."""
    open_ways: list[tuple[Unless, list[Reason]]] = []
    missed: list[str] = []
    for way in ways:
        checks = [_package(name, spec, env) for name, spec in way.packages.items()]
        checks += [_VERSION_CHECKS[key](spec, env) for key, spec in way.versions.items()]
        if all(check.holds for check in checks):
            shown = "; ".join(check.text for check in checks)
            return Reason("unless", False, f"{way.why}: {shown}", _first_origin(checks))
        if any(check.holds is False for check in checks):
            failed = next(check for check in checks if check.holds is False)
            missed.append(failed.text)
        else:
            open_ways.append((way, checks))
    if open_ways:
        way, checks = open_ways[0]
        unknown = next(check for check in checks if check.holds is None)
        text = f"not known whether the way around it is taken ({way.why}): {unknown.text}"
        return Reason("unless", None, text, unknown.origin, missing=unknown.missing)
    return Reason("unless", True, f"no way around it is taken: {'; '.join(dict.fromkeys(missed))}")


def _first_origin(reasons: list[Reason]) -> str | None:
    return next((reason.origin for reason in reasons if reason.origin), None)


def _gfx(targets: tuple[str, ...], env: Environment) -> Reason:
    """Holds when a target GPU is an AMD GPU of one of ``targets``; NVIDIA GPUs do not hold."""
    if not env.gpus:
        missing = "no GPU found and no --gpu target" if env.gpu_source == "none" else "GPUs not known"
        return Reason("gfx", False if env.gpu_source == "none" else None, missing, missing=MISSING_GPU)
    hit = [gpu for gpu in env.distinct_gpus if gpu.gfx and (gpu.gfx in targets or "any" in targets)]
    if hit:
        return Reason("gfx", True, f"{hit[0].name} is {hit[0].gfx}, one of {', '.join(targets)}")
    if any(gpu.gfx is None and gpu.compute_capability is None for gpu in env.distinct_gpus):
        return Reason("gfx", None, "a GPU of unknown architecture", missing=MISSING_GPU)
    written = ", ".join(f"{gpu.name} ({gpu.gfx or 'NVIDIA'})" for gpu in env.distinct_gpus)
    return Reason("gfx", False, f"{written}: not one of {', '.join(targets)}")


def _compute_capability(spec: SpecifierSet, env: Environment) -> Reason:
    if not env.gpus:
        missing = "no GPU found and no --gpu target" if env.gpu_source == "none" else "GPUs not known"
        return Reason("compute_capability", None, missing, missing=MISSING_GPU)
    wanted = f"compute capability {spec}" if str(spec) else "any compute capability"
    gpus = env.distinct_gpus
    # each capability judged once: thousands of differently named GPUs share a handful
    known = {gpu.compute_capability for gpu in gpus if gpu.compute_capability}
    inside = {capability: _contains(capability, spec) for capability in known}
    hit = next((gpu for gpu in gpus if gpu.compute_capability and inside[gpu.compute_capability]), None)
    if hit is not None:
        return Reason("compute_capability", True, f"{hit.name_and_sm()} is in {wanted}")
    for gpu in gpus:  # a class of GPUs (a log's shared-memory limit): all in, or all out
        outcomes = {_contains(capability, spec) for capability in gpu.capabilities}
        if outcomes == {True}:
            return Reason("compute_capability", True, f"{gpu.name}: each is in {wanted}")
        if outcomes and outcomes != {False}:
            return Reason(
                "compute_capability", None, f"{gpu.name}: some are in {spec}, some not", missing=MISSING_GPU
            )
    if any(gpu.compute_capability is None and gpu.gfx is None and not gpu.capabilities for gpu in gpus):
        return Reason(
            "compute_capability", None, "compute capability of a GPU is unknown", missing=MISSING_GPU
        )
    names = ", ".join(sorted({f"{gpu.name} ({gpu.compute_capability or gpu.gfx})" for gpu in gpus}))
    return Reason("compute_capability", False, f"no GPU in {wanted}: {names}")


def _cuda(spec: SpecifierSet, env: Environment) -> Reason:
    if "torch" not in env.packages or env.torch_build is None:
        return Reason("cuda", None, "torch's CUDA build is unknown", missing=MISSING_TORCH_BUILD)
    if env.torch_build.cuda is None:
        build = f"ROCm {env.torch_build.hip}" if env.torch_build.hip else "CPU"
        return Reason("cuda", False, f"torch is a {build} build, not a CUDA build")
    return _in_spec("cuda", "torch's CUDA", env.torch_build.cuda, spec)


def _torch_build(kinds: tuple[str, ...], env: Environment) -> Reason:
    if "torch" not in env.packages and env.absent("torch"):
        return Reason("torch_build", False, "torch is not installed")
    if env.torch_build is None:
        return Reason("torch_build", None, "torch's build is unknown", missing=MISSING_TORCH_BUILD)
    build = env.torch_build
    kind = "cuda" if build.cuda else "rocm" if build.hip else "cpu"
    label = {"cuda": f"a CUDA {build.cuda}", "rocm": f"a ROCm {build.hip}", "cpu": "a CPU"}[kind]
    relation = "is" if kind in kinds else "is not"
    return Reason("torch_build", kind in kinds, f"torch is {label} build ({relation} {' or '.join(kinds)})")


def _rocm(spec: SpecifierSet, env: Environment) -> Reason:
    if "torch" not in env.packages and env.absent("torch"):
        return Reason("rocm", False, "torch is not installed")
    if env.torch_build is None:
        return Reason("rocm", None, "torch's build (CUDA or ROCm) is unknown", missing=MISSING_TORCH_BUILD)
    if env.torch_build.hip is None:
        build = f"CUDA {env.torch_build.cuda}" if env.torch_build.cuda else "CPU"
        return Reason("rocm", False, f"torch is a {build} build, not a ROCm build")
    return _in_spec("rocm", "torch's ROCm", env.torch_build.hip, spec)


def _nvcc(spec: SpecifierSet, env: Environment) -> Reason:
    if env.nvcc is None:
        if "nvcc" in env.origins:
            return Reason("nvcc", False, f"no CUDA toolkit (nvcc) on {env.origins['nvcc']}")
        return Reason("nvcc", None, "CUDA toolkit (nvcc) version unknown", missing=MISSING_NVCC)
    return _in_spec("nvcc", "nvcc", env.nvcc, spec)


def _driver(spec: SpecifierSet, env: Environment) -> Reason:
    drivers = sorted({gpu.driver for gpu in env.distinct_gpus if gpu.driver})
    if not drivers:
        if env.gpu_source == "none" or (env.gpus and all(gpu.gfx for gpu in env.distinct_gpus)):
            return Reason("driver", False, "no NVIDIA GPU, so no NVIDIA driver in use")
        return Reason("driver", None, "NVIDIA driver version unknown", missing=MISSING_DRIVER)
    return _in_spec("driver", "NVIDIA driver", drivers[0], spec)


def _python(spec: SpecifierSet, env: Environment) -> Reason:
    if env.python is None:
        return Reason("python", None, "Python version unknown", missing=MISSING_PYTHON)
    return _in_spec("python", "Python", env.python, spec)


def _platform(platforms: tuple[str, ...], env: Environment) -> Reason:
    if env.platform is None:
        return Reason("platform", None, "platform unknown", missing=MISSING_PLATFORM)
    holds = env.platform in platforms
    return Reason(
        "platform",
        holds,
        f"platform {env.platform} {'is' if holds else 'is not'} one of {', '.join(platforms)}",
    )


def _features(features: tuple[str, ...], env: Environment) -> Reason:
    """Not in use wins over unknown: "applies if you use X" only when nothing rules it out. The
    features known from file names alone (a source tree) are asked first, and a feature not in use
    ends the question before a project's contents are read."""
    states: dict[str, tuple[bool | None, str]] = {}
    for feature in sorted(features, key=lambda name: name not in EVIDENT_FEATURES):
        states[feature] = env.features.state(feature)
        if states[feature][0] is False:
            break
    if refuted := [text for holds, text in states.values() if holds is False]:
        return Reason("features", False, "; ".join(refuted))
    if unknown := tuple(feature for feature, (holds, _) in states.items() if holds is None):
        return Reason(
            "features", None, f"applies if you use {' and '.join(unknown)}", unknown_features=unknown
        )
    evidence = tuple(place for feature in features for place in env.features.evidence(feature))
    return Reason("features", True, "; ".join(text for _, text in states.values()), evidence=evidence)


def _uses(affects: Affects, env: Environment) -> list[Reason]:
    """What the user's code must do for the bug to bite: its features, then its model family
    (not asked once the features rule it out)."""
    reasons = [_features(affects.features, env)] if affects.features else []
    if affects.models and not any(reason.holds is False for reason in reasons):
        reasons.append(_models(affects.models, env))
    if reasons and all(reason.holds for reason in reasons) and (tied := _together(affects, env)):
        reasons.append(tied)
    return reasons


def _together(affects: Affects, env: Environment) -> Reason | None:
    """A project scan's finds count together only where one file shows them: FlashAttention-2 in
    one config and a Gemma-2 model in another are two code paths, not one (a source tree is the
    build's, and a declared feature or model holds everywhere). None: nothing needs tying."""
    features = tuple(name for name in affects.features if name not in EVIDENT_FEATURES)
    where = env.features.together(features, affects.models)
    if where:
        return Reason("features", True, f"used together in {where}")  # the evidence: the features' reasons
    if where == "":
        return None
    found = env.features.models()
    names = (*features, *(family for family in affects.models if family in found))
    places = "; ".join(
        f"{name} {_places(found[name].evidence if name in found else env.features.evidence(name))}".strip()
        for name in names
    )
    return Reason(
        "features",
        None,
        f"applies if {' and '.join(names)} are used together: the project shows them only in "
        f"separate files ({places})",
        unknown_features=names,
    )


def _models(families: tuple[str, ...], env: Environment) -> Reason:
    """Holds when the code runs one of ``families``; does not when it runs only others; unknown when
    no model family is known (as for a feature: "applies if you use a gemma2 model")."""
    found = env.features.models()
    needed = model_phrase(families)
    if hits := [found[family] for family in families if family in found]:
        evidence = tuple(place for fact in hits for place in fact.evidence)
        text = "; ".join(f"{fact.name} model in use: {fact.source}{_places(fact.evidence)}" for fact in hits)
        return Reason("models", True, text, evidence=evidence)
    if found:
        runs = ", ".join(f"{fact.name}{_places(fact.evidence)}" for fact in found.values())
        return Reason("models", False, f"not {needed}: the code runs {runs}")
    text = f"applies if you use {needed} (which model the code runs is not known)"
    return Reason("models", None, text, unknown_features=(needed,))


def _places(evidence: tuple[str, ...]) -> str:
    return f" ({', '.join(evidence[:2])})" if evidence else ""


def pending_features(finding: Finding) -> tuple[str, ...]:
    """The features whose unknown use alone keeps ``finding`` from a verdict (else empty): the
    rule applies if you use them, and every other condition holds."""
    if finding.verdict is not Verdict.UNKNOWN:
        return ()
    unknown = [reason for reason in finding.reasons if reason.holds is None]
    if not unknown or any(not reason.unknown_features for reason in unknown):
        return ()
    return tuple(feature for reason in unknown for feature in reason.unknown_features)


_VERSION_CHECKS = {
    "compute_capability": _compute_capability,
    "cuda": _cuda,
    "rocm": _rocm,
    "nvcc": _nvcc,
    "driver": _driver,
    "python": _python,
}
