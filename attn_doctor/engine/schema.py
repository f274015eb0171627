"""The rule schema (docs/rules.md): parse one TOML document into a ``Rule`` or a list of problems.

Validation collects every problem of a file, each naming the field, so one run of
``rules validate`` shows them all.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.facts.features import FEATURES
from attn_doctor.facts.model_families import MODEL_FAMILIES
from attn_doctor.facts.names import rule_name
from attn_doctor.planner.interface import PLANNED

COMPONENTS = (
    "torch",
    "cuda",
    "gpu",
    "triton",
    "transformers",
    "flash-attn",
    "flash-attn-3",
    "flash-linear-attention",
    "xformers",
    "flex-attention",
    "sdpa",
)
PLATFORMS = ("linux", "windows", "darwin")
# "bug": a fault of the stack that its versions, build and hardware decide (what `check` reports);
# "install": an installation fault that versions cannot show (a binary built for another torch or
# C++ ABI, a source build without its toolchain), seen only in a log; "usage": a known user error
# (a dtype the GPU lacks, a build without torch in its environment). `explain` names all three,
# saying which; `check` reports bugs, and the usage errors a stack shows before any run: code that
# needs a package the target does not install (``absent``).
KINDS = ("bug", "install", "usage")
VERSION_CONDITIONS = ("compute_capability", "cuda", "rocm", "nvcc", "driver", "python")

_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<spec>[<>=!~].*)$")
_TOP_KEYS = {
    "id",
    "title",
    "severity",
    "kind",
    "component",
    "summary",
    "symptoms",
    "messages",
    "external_symptoms",
    "log_reasons",
    "nearest",
    "repro",
    "references",
    "affects",
    "fix",
}
RELEASE_CONDITIONS = (
    "requirement_unmet",
    "prebuilt_wheel_missing",
    "prebuilt_wheel_lacks_gpu",
    "driver_below_cuda_minimum",
    "bundled_ptxas_lacks_gpu",
    "torch_variant_lacks_gpu",
    "api_change",
)
PTXAS_PACKAGES = ("triton",)
API_TABLE_PACKAGES = ("transformers", "flash-attn", "triton", "xformers", "flash-linear-attention")
PREBUILT_WHEEL_PACKAGES = ("flash-attn",)
_AFFECTS_KEYS = {
    "packages",
    "absent",
    "platform",
    "features",
    "models",
    "gfx",
    "torch_build",
    *VERSION_CONDITIONS,
    *RELEASE_CONDITIONS,
    "unless",
}
# [[affects.unless]]: a way around the bug that a release's own code takes (fla >= 0.5.0 routes the
# gated backward to tilelang when it is installed): the packages and versions that make it hold, and
# why; where every one of them holds the rule does not apply
_UNLESS_KEYS = {"why", "packages", *VERSION_CONDITIONS}
TORCH_BUILDS = ("cpu", "cuda", "rocm")
_GFX = re.compile(r"^(gfx[0-9a-f]{3,5}|any)$")  # "any": every AMD GPU
_FIX_KEYS = {"summary", "pins", "plan"}


@dataclass(frozen=True)
class Unless:
    """One way around the bug: it is taken where every package is installed in its specifier set and
    every version condition holds (``why`` says what the release's code does then)."""

    why: str
    packages: dict[str, SpecifierSet] = field(default_factory=dict)
    versions: dict[str, SpecifierSet] = field(default_factory=dict)  # VERSION_CONDITIONS


@dataclass(frozen=True)
class Affects:
    packages: dict[str, SpecifierSet] = field(default_factory=dict)
    absent: tuple[str, ...] = ()  # packages the target does not install (the code still needs them)
    versions: dict[str, SpecifierSet] = field(default_factory=dict)  # VERSION_CONDITIONS
    platform: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    models: tuple[str, ...] = ()  # MODEL_FAMILIES: the code runs one of them (the bug is in their code)
    gfx: tuple[str, ...] = ()  # AMD GPU targets (gfx1100), or "any": a target GPU's must be one of them
    torch_build: tuple[str, ...] = ()  # TORCH_BUILDS: torch's build is one of them
    # from the release-facts snapshot (docs/release-facts.md):
    requirement_unmet: tuple[str, tuple[str, ...]] | None = None  # (package, the packages it requires)
    prebuilt_wheel_missing: str | None = None  # a package whose release has no wheel for this torch
    prebuilt_wheel_lacks_gpu: str | None = None  # its wheel for this torch has no code for the GPU
    driver_below_cuda_minimum: bool = False  # the driver is older than NVIDIA's minimum for torch's CUDA
    bundled_ptxas_lacks_gpu: str | None = None  # the package's bundled ptxas cannot compile for the GPU
    torch_variant_lacks_gpu: bool = False  # torch's wheels for its CUDA build have no code for the GPU
    api_change: str | None = None  # an API error in the log is a change this package's release made
    unless: tuple[Unless, ...] = ()  # ways around the bug: where one is taken, the rule does not apply

    @property
    def release_packages(self) -> tuple[str, ...]:
        """The packages whose versions the release-facts conditions read."""
        read = []
        if self.requirement_unmet is not None:
            read += [self.requirement_unmet[0], *self.requirement_unmet[1]]
        for package in (self.bundled_ptxas_lacks_gpu, self.api_change):
            if package is not None:
                read.append(package)
        if self.driver_below_cuda_minimum or self.torch_variant_lacks_gpu:
            read.append("torch")
        for package in (self.prebuilt_wheel_missing, self.prebuilt_wheel_lacks_gpu):
            if package is not None:
                read += [package, "torch"]
        return tuple(dict.fromkeys(read))

    @property
    def reads_torch_build(self) -> bool:
        """Whether torch's build (its CUDA or ROCm, which a torch wheel's variant fixes) decides."""
        return bool(self.torch_build) or "cuda" in self.versions or "rocm" in self.versions

    @property
    def reads(self) -> tuple[str, ...]:
        """Every package whose version can change the verdict (torch's: its variant, "+cu128")."""
        torch = ["torch"] if self.reads_torch_build else []
        around = [name for way in self.unless for name in way.packages]
        return tuple(dict.fromkeys([*self.packages, *self.release_packages, *torch, *around]))


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str
    component: str
    summary: str
    affects: Affects
    fix_summary: str
    fix_pins: tuple[str, ...]
    references: tuple[str, ...]
    # the package whose install plan (planner/) is the concrete fix: the report prints its command
    fix_plan: str | None = None
    symptoms: tuple[str, ...] = ()
    # message catalogue ids (releases/messages.py): every release's wording of them is a symptom
    messages: tuple[str, ...] = ()
    # symptoms that quote text no release's code holds (CUDA runtime, compiler, loader, pip, user
    # code), each with why: the symptom-vs-catalogue test accepts only these unmatched
    external_symptoms: dict[str, str] = field(default_factory=dict)
    # catalogue id prefixes: the log's lines traced to them say why, and are shown with the cause
    log_reasons: tuple[str, ...] = ()
    # (given, choices): regexes with one group each, run on the matched line: the name the user
    # gave, and the valid names the message lists; explain says the valid name nearest the given one
    nearest: tuple[str, str] | None = None
    repro: str | None = None
    path: str = ""
    kind: str = "bug"


class _Problems:
    """Accumulates ``field: message`` lines for one file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.lines.append(f"field '{where}': {message}")


def parse_rule(
    data: dict[str, Any], expected_id: str | None, path: str, compile_symptoms: bool = True
) -> Rule | list[str]:
    """A ``Rule``, or every problem of the document as ``field 'x': message`` lines.

    ``compile_symptoms=False`` skips compiling the symptom patterns (a fifth of `check`'s time);
    only for the shipped database, which `rules validate` and the test suite check in full.
    """
    problems = _Problems()
    for key in sorted(set(data) - _TOP_KEYS):
        problems.add(key, "unknown field (typo?)")

    rule_id = _text(data, "id", problems)
    if rule_id and not _ID.match(rule_id):
        problems.add("id", f"{rule_id!r} must be lower-case letters, digits and dashes")
    if rule_id and expected_id is not None and rule_id != expected_id:
        problems.add("id", f"{rule_id!r} does not match the file name {expected_id!r}")
    title = _text(data, "title", problems)
    summary = _text(data, "summary", problems)
    severity = _choice(data, "severity", SEVERITIES, problems)
    component = _choice(data, "component", COMPONENTS, problems)
    kind = _choice(data, "kind", KINDS, problems) if "kind" in data else "bug"
    symptoms = _symptoms(data.get("symptoms", []), problems, compile_symptoms)
    messages = _message_ids(data.get("messages", []), problems)
    external = _external(data.get("external_symptoms", {}), symptoms, problems)
    log_reasons = _log_reasons(data.get("log_reasons", []), problems)
    nearest = _nearest(data.get("nearest"), problems)
    references = _references(data.get("references"), problems)
    repro = data.get("repro")
    if repro is not None and not (isinstance(repro, str) and _ID.match(repro)):
        problems.add("repro", "must be a repro id (lower-case letters, digits and dashes)")
    affects = _affects(data.get("affects"), problems)
    fix_summary, fix_pins = _fix(data.get("fix"), problems)
    fix_plan = _fix_plan(data.get("fix"), problems)

    if problems.lines:
        return problems.lines
    assert affects is not None
    return Rule(
        id=rule_id,
        title=_prose(title),
        severity=severity,
        component=component,
        summary=_prose(summary),
        affects=affects,
        fix_summary=_prose(fix_summary),
        fix_pins=fix_pins,
        fix_plan=fix_plan,
        references=references,
        symptoms=symptoms,
        messages=messages,
        external_symptoms=external,
        log_reasons=log_reasons,
        nearest=nearest,
        repro=repro,
        path=path,
        kind=kind,
    )


def _prose(text: str) -> str:
    """Rule files wrap their prose at any column; every report (text, SARIF, GitHub, JSON) wants
    the sentences whole: line breaks inside a paragraph become spaces, blank lines stay."""
    paragraphs = [" ".join(part.split()) for part in text.strip().split("\n\n")]
    return "\n\n".join(paragraph for paragraph in paragraphs if paragraph)


def _text(data: dict[str, Any], key: str, problems: _Problems, prefix: str = "") -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        problems.add(prefix + key, "required, a non-empty string")
        return ""
    return value


def _choice(data: dict[str, Any], key: str, allowed: tuple[str, ...], problems: _Problems) -> str:
    value = data.get(key)
    if value not in allowed:
        problems.add(key, f"must be one of {', '.join(allowed)} (got {value!r})")
        return ""
    return str(value)


def _string_list(value: Any, where: str, problems: _Problems) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add(where, "must be a list of strings")
        return None
    return value


_MESSAGE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*:[A-Za-z0-9_.]+(#[^#\n]{4,200})?$")


def _message_ids(value: Any, problems: _Problems) -> tuple[str, ...]:
    """Catalogue references, ``DIST:module.function`` or ``DIST:module.function#words`` (the
    catalogue itself is read by explain only: releases/messages.py, ``Catalogue.named``)."""
    ids = _string_list(value, "messages", problems) or []
    for index, message_id in enumerate(ids):
        if not _MESSAGE_ID.match(message_id):
            problems.add(
                f"messages[{index}]",
                f"{message_id[:80]!r}: not a catalogue id (DIST:module.function, optionally #words: "
                "4 to 200 characters of the message, no #)",
            )
    return tuple(ids)


_ID_PREFIX = re.compile(r"^[a-z0-9][a-z0-9._-]*:[A-Za-z0-9_.]{3,}$")


def _log_reasons(value: Any, problems: _Problems) -> tuple[str, ...]:
    """Catalogue id prefixes, ``DIST:module.function`` or a shorter dotted start of one."""
    prefixes = _string_list(value, "log_reasons", problems) or []
    for index, prefix in enumerate(prefixes):
        if not _ID_PREFIX.match(prefix):
            problems.add(
                f"log_reasons[{index}]", f"{prefix[:80]!r}: not the start of a catalogue id (DIST:module...)"
            )
    return tuple(prefixes)


def _nearest(value: Any, problems: _Problems) -> tuple[str, str] | None:
    """``{ given = REGEX, choices = REGEX }``, each in the safe subset with exactly one group."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"given", "choices"}:
        problems.add("nearest", "must be a table with given and choices (regexes with one group each)")
        return None
    for key in ("given", "choices"):
        pattern = value[key]
        try:
            groups = re.compile(pattern).groups if isinstance(pattern, str) and len(pattern) <= 200 else -1
        except re.error:
            groups = -1
        if groups != 1:
            problems.add(
                f"nearest.{key}", "must be a regular expression (at most 200 characters) with one group"
            )
            return None
    return (value["given"], value["choices"])


def _external(value: Any, symptoms: tuple[str, ...], problems: _Problems) -> dict[str, str]:
    """``{symptom: why}``: each key one of the rule's symptoms, each why a sentence."""
    if not isinstance(value, dict) or not all(isinstance(v, str) and v.strip() for v in value.values()):
        problems.add("external_symptoms", "must be a table of symptom = why (a non-empty string)")
        return {}
    for pattern in value:
        if pattern not in symptoms:
            problems.add("external_symptoms", f"{pattern[:80]!r} is not one of the rule's symptoms")
    return dict(value)


def _symptoms(value: Any, problems: _Problems, compile_patterns: bool) -> tuple[str, ...]:
    """Each pattern must compile and stay in the safe subset that `explain` can run on any log."""
    patterns = _string_list(value, "symptoms", problems) or []
    if not compile_patterns:
        return tuple(patterns)
    from attn_doctor.engine.patterns import UnsafePattern, analyse

    for index, pattern in enumerate(patterns):
        try:
            with warnings.catch_warnings():  # "possible nested set": a FutureWarning, not an error
                warnings.simplefilter("ignore")
                analyse(pattern)  # parses it as `re` does: a syntax error is re.error
        except (re.error, RecursionError, OverflowError) as exc:
            problems.add(f"symptoms[{index}]", f"not a regular expression: {str(exc)[:200]}")
        except UnsafePattern as exc:
            problems.add(f"symptoms[{index}]", f"{pattern[:80]!r}: {exc}")
    return tuple(patterns)


def _references(value: Any, problems: _Problems) -> tuple[str, ...]:
    urls = _string_list(value, "references", problems)
    if urls is None:
        return ()
    if not urls:
        problems.add("references", "at least one upstream issue, PR or release note is required")
    for index, url in enumerate(urls):
        if not re.match(r"^https://[^\s/]+\.[^\s/]+/\S+$", url):
            problems.add(f"references[{index}]", f"{url!r} is not an https URL")
    return tuple(urls)


def _affects(value: Any, problems: _Problems) -> Affects | None:
    if not isinstance(value, dict):
        problems.add("affects", "required, a table of conditions")
        return None
    for key in sorted(set(value) - _AFFECTS_KEYS):
        problems.add(f"affects.{key}", "unknown condition (typo?)")
    packages: dict[str, SpecifierSet] = {}
    raw_packages = value.get("packages", {})
    if not isinstance(raw_packages, dict):
        problems.add("affects.packages", 'must be a table of NAME = "specifier"')
        raw_packages = {}
    for name, spec in raw_packages.items():
        parsed = _specifier(spec, f"affects.packages.{name}", problems)
        if parsed is not None:
            packages[rule_name(name)] = parsed
    absent = value.get("absent", [])
    if not isinstance(absent, list) or not all(
        isinstance(name, str) and _PACKAGE.match(name) for name in absent
    ):
        problems.add("affects.absent", 'must be a list of package names, e.g. ["flash-attn"]')
        absent = []
    versions = {}
    for key in VERSION_CONDITIONS:
        if key in value:
            parsed = _specifier(value[key], f"affects.{key}", problems)
            if parsed is not None:
                versions[key] = parsed
    platform = _members(value.get("platform", []), "affects.platform", PLATFORMS, problems)
    features = _members(value.get("features", []), "affects.features", FEATURES, problems)
    models = _members(value.get("models", []), "affects.models", tuple(MODEL_FAMILIES), problems)
    gfx = _gfx_targets(value.get("gfx", []), problems)
    torch_build = _members(value.get("torch_build", []), "affects.torch_build", TORCH_BUILDS, problems)
    return Affects(
        packages=packages,
        absent=tuple(rule_name(name) for name in absent),
        versions=versions,
        platform=platform,
        features=features,
        models=models,
        gfx=gfx,
        torch_build=torch_build,
        requirement_unmet=_requirement_unmet(value.get("requirement_unmet"), problems),
        prebuilt_wheel_missing=_prebuilt_wheel(value.get("prebuilt_wheel_missing"), "missing", problems),
        prebuilt_wheel_lacks_gpu=_prebuilt_wheel(
            value.get("prebuilt_wheel_lacks_gpu"), "lacks_gpu", problems
        ),
        driver_below_cuda_minimum=_flag(
            value.get("driver_below_cuda_minimum"), "driver_below_cuda_minimum", problems
        ),
        bundled_ptxas_lacks_gpu=_member(
            value.get("bundled_ptxas_lacks_gpu"), "bundled_ptxas_lacks_gpu", PTXAS_PACKAGES, problems
        ),
        torch_variant_lacks_gpu=_flag(
            value.get("torch_variant_lacks_gpu"), "torch_variant_lacks_gpu", problems
        ),
        api_change=_member(value.get("api_change"), "api_change", API_TABLE_PACKAGES, problems),
        unless=_unless(value.get("unless"), problems),
    )


def _unless(value: Any, problems: _Problems) -> tuple[Unless, ...]:
    """``[[affects.unless]]``: each a table of ``why`` (a sentence), ``packages`` (NAME = specifier,
    "" for any installed version) and version conditions; at least one package or condition."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(way, dict) for way in value):
        problems.add("affects.unless", "must be an array of tables ([[affects.unless]])")
        return ()
    ways = []
    for index, way in enumerate(value):
        where = f"affects.unless[{index}]"
        for key in sorted(set(way) - _UNLESS_KEYS):
            problems.add(f"{where}.{key}", f"unknown key (one of {', '.join(sorted(_UNLESS_KEYS))})")
        why = _text(way, "why", problems, prefix=f"{where}.")
        raw = way.get("packages", {})
        if not isinstance(raw, dict):
            problems.add(f"{where}.packages", 'must be a table of NAME = "specifier"')
            raw = {}
        packages = {}
        for name, spec in raw.items():
            parsed = _specifier(spec, f"{where}.packages.{name}", problems)
            if parsed is not None:
                packages[rule_name(name)] = parsed
        versions = {}
        for key in VERSION_CONDITIONS:
            if key in way:
                parsed = _specifier(way[key], f"{where}.{key}", problems)
                if parsed is not None:
                    versions[key] = parsed
        if not packages and not versions and not (set(way) - _UNLESS_KEYS):
            problems.add(where, "names no package or condition: it would clear the rule everywhere")
        ways.append(Unless(_prose(why), packages, versions))
    return tuple(ways)


def _gfx_targets(value: Any, problems: _Problems) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and _GFX.match(v) for v in value):
        problems.add(
            "affects.gfx", 'must be a list of AMD GPU targets, e.g. ["gfx1100", "gfx1030"], or ["any"]'
        )
        return ()
    return tuple(value)


def _member(value: Any, key: str, allowed: tuple[str, ...], problems: _Problems) -> str | None:
    if value is None:
        return None
    if value not in allowed:
        problems.add(f"affects.{key}", f"must be one of {', '.join(allowed)}")
        return None
    return str(value)


def _flag(value: Any, key: str, problems: _Problems) -> bool:
    if value is None:
        return False
    if value is not True:
        problems.add(f"affects.{key}", "must be true (or left out)")
        return False
    return True


def _requirement_unmet(value: Any, problems: _Problems) -> tuple[str, tuple[str, ...]] | None:
    """``{ package = "xformers", on = ["torch"] }``: that release's Requires-Dist on ``on`` is not
    met by the target's versions."""
    if value is None:
        return None
    where = "affects.requirement_unmet"
    if (
        not isinstance(value, dict)
        or set(value) != {"package", "on"}
        or not isinstance(value["package"], str)
    ):
        problems.add(where, 'must be { package = "NAME", on = ["NAME", ...] }')
        return None
    on = _string_list(value["on"], f"{where}.on", problems) or []
    return rule_name(value["package"]), tuple(rule_name(name) for name in on)


def _prebuilt_wheel(value: Any, which: str, problems: _Problems) -> str | None:
    if value is None:
        return None
    if value not in PREBUILT_WHEEL_PACKAGES:
        problems.add(
            f"affects.prebuilt_wheel_{which}", f"must be one of {', '.join(PREBUILT_WHEEL_PACKAGES)}"
        )
        return None
    return str(value)


def _specifier(value: Any, where: str, problems: _Problems) -> SpecifierSet | None:
    if not isinstance(value, str):
        problems.add(where, 'must be a PEP 440 specifier string such as ">=2.5,<2.7"')
        return None
    try:
        spec = SpecifierSet(value)
        for item in spec:
            if item.operator == "===":
                problems.add(where, "arbitrary equality (===) compares strings, not versions: use ==")
                return None
            Version(item.version.removesuffix(".*"))
    except ValueError:  # InvalidSpecifier, InvalidVersion, or a number past the int-string limit
        problems.add(where, f"{value[:60]!r} is not a PEP 440 specifier set")
        return None
    return spec


def _members(value: Any, where: str, allowed: tuple[str, ...], problems: _Problems) -> tuple[str, ...]:
    items = _string_list(value, where, problems) or []
    for item in items:
        if item not in allowed:
            problems.add(where, f"{item!r} is not one of {', '.join(allowed)}")
    return tuple(items)


def _fix_plan(value: Any, problems: _Problems) -> str | None:
    plan = value.get("plan") if isinstance(value, dict) else None
    if plan is not None and plan not in PLANNED:
        problems.add("fix.plan", f"{plan!r} is not one of {', '.join(PLANNED)}")
        return None
    return plan


def _fix(value: Any, problems: _Problems) -> tuple[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        problems.add("fix", "required, a table with summary and pins")
        return "", ()
    for key in sorted(set(value) - _FIX_KEYS):
        problems.add(f"fix.{key}", "unknown field (typo?)")
    summary = _text(value, "summary", problems, prefix="fix.")
    pins = _string_list(value.get("pins", []), "fix.pins", problems) or []
    for index, pin in enumerate(pins):
        match = _PIN.match(pin)
        if match is None:
            problems.add(f"fix.pins[{index}]", f"{pin!r} is not NAME followed by a version specifier")
        else:
            _specifier(match["spec"], f"fix.pins[{index}]", problems)
    return summary, tuple(pins)
