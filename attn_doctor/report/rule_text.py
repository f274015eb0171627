"""A rule in full, for `attn-doctor rules show`, with its conditions said in words."""

from __future__ import annotations

import difflib

from packaging.specifiers import SpecifierSet

from attn_doctor.engine.schema import Affects, Rule
from attn_doctor.facts.model_families import model_phrase

_VERSION_LABELS = {
    "compute_capability": "GPU compute capability",
    "cuda": "torch built for CUDA",
    "rocm": "torch built for ROCm",
    "nvcc": "CUDA toolkit (nvcc)",
    "driver": "NVIDIA driver",
    "python": "Python",
}


def describe(rule: Rule) -> str:
    lines = [
        f"{rule.id} [{rule.severity}, {rule.component}]",
        rule.title,
        "",
        rule.summary,
        "",
        "Affects (all must hold):",
        *(f"  {condition}" for condition in conditions(rule.affects)),
    ]
    if rule.symptoms:
        lines += ["", "Symptoms (regular expressions):", *(f"  {s}" for s in rule.symptoms)]
    lines += ["", f"Fix: {rule.fix_summary}"]
    if rule.fix_pins:
        lines.append(f"Pins: {' '.join(rule.fix_pins)}")
    lines += ["", "References:", *(f"  {url}" for url in rule.references)]
    if rule.repro:
        lines += ["", f"Repro: attn-doctor repro {rule.id}"]
    lines.append(f"File: {rule.path}")
    return "\n".join(lines)


def conditions(affects: Affects) -> list[str]:
    """Each condition of ``affects`` as a phrase."""
    said = [f"{name} {spec_text(spec)}" for name, spec in affects.packages.items()]
    said += [f"{_VERSION_LABELS.get(key, key)}: {spec_text(spec)}" for key, spec in affects.versions.items()]
    if affects.platform:
        said.append(f"platform: {', '.join(affects.platform)}")
    if affects.gfx:
        said.append(f"AMD GPU target: {', '.join(affects.gfx)}")
    if affects.torch_build:
        said.append(f"torch build: {' or '.join(affects.torch_build)}")
    if affects.features:
        said.append(f"features in use: {', '.join(affects.features)}")
    if affects.models:
        said.append(f"the code runs {model_phrase(affects.models)}")
    if affects.requirement_unmet is not None:
        package, on = affects.requirement_unmet
        said.append(f"{package}'s release requires a version of {', '.join(on)} the target lacks")
    if affects.prebuilt_wheel_missing:
        said.append(
            f"no prebuilt {affects.prebuilt_wheel_missing} wheel for the target's torch, CUDA, Python"
        )
    if affects.prebuilt_wheel_lacks_gpu:
        said.append(f"the {affects.prebuilt_wheel_lacks_gpu} wheel for the target has no code for its GPU")
    if affects.driver_below_cuda_minimum:
        said.append("the NVIDIA driver is older than the minimum for torch's CUDA")
    if affects.bundled_ptxas_lacks_gpu:
        said.append(f"the ptxas {affects.bundled_ptxas_lacks_gpu} bundles does not know the GPU")
    if affects.torch_variant_lacks_gpu:
        said.append("torch's wheels for its CUDA build have no code for the GPU")
    if affects.api_change:
        said.append(f"an API error in the log is a change of the {affects.api_change} release")
    for way in affects.unless:
        needs = [f"{name} {spec_text(spec)}" for name, spec in way.packages.items()]
        needs += [f"{_VERSION_LABELS.get(key, key)}: {spec_text(spec)}" for key, spec in way.versions.items()]
        said.append(f"unless {', '.join(needs)} ({way.why})")
    return said


def spec_text(spec: SpecifierSet) -> str:
    """``>=8.6,<13.0,!=9.0`` as ">=8.6 and <13.0, except 9.0"; "" as "any version"."""
    bounds = sorted((s for s in spec if s.operator != "!="), key=lambda s: s.operator[0] != ">")
    excluded = sorted((s.version for s in spec if s.operator == "!="), key=_numeric)
    text = " and ".join(str(bound) for bound in bounds) or "any version"
    return f"{text}, except {', '.join(excluded)}" if excluded else text


def _numeric(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def no_such_rule(name: str, rules: list[Rule]) -> str:
    """The error for an unknown rule id, with the nearest ids when there are any."""
    guesses = difflib.get_close_matches(name[:200], [rule.id for rule in rules], n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(guesses)}? " if guesses else ""
    return f"no such rule, and no rule cites it as an issue ({hint}see `attn-doctor rules list`)"
