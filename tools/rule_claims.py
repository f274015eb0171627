"""Each rule's claims checked against the releases, so the next audit finds nothing.

- Ranges against messages: where a rule's symptoms (or its `messages`) quote a package's own
  words, every release in the rule's range for that package that the message catalogue read must
  print one of them; a range reaching releases that print other words, or none, is wrong (the
  2026-11 audit found "seems to be not installed" claimed for releases that word it otherwise).
- Fixes against releases: a fix pin must be met by a published release (the release facts), and
  the first such release must be outside the rule's own range for that package (a fix the rule
  still matches does not fix).
- ROCm rules: a rule whose title is about ROCm or AMD GPUs alone needs a `rocm` or `gfx`
  condition (without one it fires for every CUDA user).
- Versioned references: a link into a repository's files or release page cites a commit or a tag
  of a published release (the release facts), never a moving branch (main) or a tag nobody
  released.

    python -m tools.rule_claims      # one line per claim that does not hold
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from attn_doctor.engine.loader import load_rules
from attn_doctor.engine.matcher import is_version
from attn_doctor.engine.patterns import analyse
from attn_doctor.engine.schema import Rule
from attn_doctor.explain.rank import GENERIC_MESSAGES
from attn_doctor.facts.names import rule_name
from attn_doctor.releases.facts import ReleaseFacts, snapshot
from attn_doctor.releases.messages import Catalogue, Message, catalogue, says_where

# what a template's {} becomes when a symptom is tried on it: a name, a version, a number
FIELD_SAMPLES = ("X1", "13.0", "8.6", "1")
_ROCM = re.compile(r"\bROCm\b|\bAMD\b|\bMI[0-9]{3}|\bRDNA|\bgfx[0-9]")
_CUDA = re.compile(r"\bCUDA\b|\bNVIDIA\b|\bFA[234]\b|FlashAttention[ -]?[1-4]|\bsm_?[0-9]{2,3}")


def quoted_messages(rule: Rule, messages: Catalogue) -> list[Message]:
    """The catalogue messages the rule's own symptoms quote (fields filled in), and those it names."""
    found = [m for reference in rule.messages for m in messages.named(reference)]
    for symptom in rule.symptoms:
        literal = analyse(symptom).literal
        if symptom in rule.external_symptoms or not says_where(literal) or _generic(literal):
            continue  # Python's or any library's words ("has no attribute") say nothing of releases
        pattern = re.compile(symptom)
        found += [
            m
            for m in _all(messages)
            if literal[:16] in m.template  # (a run can end inside a field: "version: 1[3-9]")
            and says_where(m.literal)
            and any(pattern.search(_filled(m.template, sample)) for sample in FIELD_SAMPLES)
        ]
    return found


def _filled(template: str, sample: str) -> str:
    """The template with each field as ``sample``: ``{}``, and ``%s`` where a release formats late."""
    return _PERCENT.sub(sample, template.replace("{}", sample))


_PERCENT = re.compile(r"%[-0-9.]*[sdrfi]")


def _generic(literal: str) -> bool:
    return any(literal.strip() in message for message in GENERIC_MESSAGES)


_ALL: dict[int, list[Message]] = {}


def _all(messages: Catalogue) -> list[Message]:
    """Every message, built once per catalogue (18,579 of them)."""
    if id(messages) not in _ALL:
        _ALL[id(messages)] = messages.messages
    return _ALL[id(messages)]


# Rules whose bug is silent before the release that added the message naming it (a check or a
# warning written to catch it): their range is wider than the message's on purpose, and says why.
SILENT_BEFORE_ITS_MESSAGE = {
    "fla-gated-bwd-hopper-triton-3-4": (
        "fla-core 0.5.0 added the RuntimeError that names the miscompile; earlier releases return the "
        "same wrong gradients silently (fla-org/flash-linear-attention#640)"
    ),
}


def ranges_outside_their_messages(
    rules: Iterable[Rule], messages: Catalogue, silent: dict[str, str] = SILENT_BEFORE_ITS_MESSAGE
) -> list[str]:
    read = {rule_name(name): info.get("releases_read", []) for name, info in messages.packages.items()}
    problems = []
    for rule in rules:
        if rule.id in silent:
            continue
        runs: dict[str, list[tuple[Version, Version]]] = {}
        for message in quoted_messages(rule, messages):
            runs.setdefault(rule_name(message.package), []).extend(
                (Version(first), Version(last)) for first, last in message.releases
            )
        for package, spans in runs.items():
            spec = rule.affects.packages.get(package)
            if spec is None or not read.get(package):
                continue
            newest = Version(read[package][-1])
            inside = [Version(v) for v in read[package] if spec.contains(v, prereleases=True)]
            quiet = [v for v in inside if not any(a <= v <= b or (b == newest and v >= a) for a, b in spans)]
            if quiet:
                problems.append(
                    f"{rule.id}: {package} {spec or '(any)'} holds {len(quiet)} release(s) that print "
                    f"none of its messages: {', '.join(str(v) for v in quiet[:5])}"
                )
    return problems


def pins_that_do_not_fix(rules: Iterable[Rule], facts: ReleaseFacts) -> list[str]:
    known = set(facts.meta.get("packages", {}))
    problems = []
    for rule in rules:
        for pin in rule.fix_pins:
            name = re.match(r"[A-Za-z0-9_.-]+", pin)
            if name is None or rule_name(name[0]) not in known and name[0] not in known:
                continue  # a package the release facts do not follow
            package = name[0] if name[0] in known else rule_name(name[0])
            spec = SpecifierSet(pin[len(name[0]) :])
            published = sorted(
                Version(v) for v in facts.releases(package) if is_version(v) and not Version(v).is_prerelease
            )
            meeting = [v for v in published if spec.contains(v)]
            if not meeting:
                problems.append(f"{rule.id}: fix pin {pin} is met by no published release")
                continue
            affected = rule.affects.packages.get(rule_name(package))
            if affected is not None and str(affected) and affected.contains(meeting[0]):
                problems.append(
                    f"{rule.id}: fix pin {pin} is met by {meeting[0]}, which the rule's own range "
                    f"{affected} still matches"
                )
    return problems


def rocm_rules_without_a_rocm_condition(rules: Iterable[Rule]) -> list[str]:
    return [
        f"{rule.id}: the title is about ROCm/AMD alone, the rule has no rocm or gfx condition"
        for rule in rules
        if _ROCM.search(rule.title)
        and not _CUDA.search(rule.title)
        and "rocm" not in rule.affects.versions
        and not rule.affects.gfx
        and "rocm" not in rule.affects.torch_build
    ]


# repositories whose tags are the releases of a package the release facts follow
REPOSITORIES = {
    "huggingface/transformers": "transformers",
    "pytorch/pytorch": "torch",
    "Dao-AILab/flash-attention": "flash-attn",
    "triton-lang/triton": "triton",
    "facebookresearch/xformers": "xformers",
    "fla-org/flash-linear-attention": "flash-linear-attention",
}
_VERSIONED = re.compile(r"https://github\.com/([^/]+/[^/]+)/(?:blob|tree|releases/tag)/([^/?#]+)")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


def references_to_unknown_releases(rules: Iterable[Rule], facts: ReleaseFacts) -> list[str]:
    problems = []
    for rule in rules:
        for url in rule.references:
            found = _VERSIONED.match(url)
            if found is None or found[1] not in REPOSITORIES or _COMMIT.match(found[2]):
                continue
            package, ref = REPOSITORIES[found[1]], found[2]
            if ref in ("main", "master"):
                problems.append(f"{rule.id}: {url} cites a moving branch; cite a tag or a commit")
            elif ref.removeprefix("v") not in facts.releases(package):
                problems.append(f"{rule.id}: {url} cites {ref}, which is not a published {package} release")
    return problems


def main() -> int:
    rules = load_rules().rules
    found = [
        *ranges_outside_their_messages(rules, catalogue()),
        *pins_that_do_not_fix(rules, snapshot()),
        *rocm_rules_without_a_rocm_condition(rules),
        *references_to_unknown_releases(rules, snapshot()),
    ]
    for line in found:
        print(line)
    print(f"{len(found)} claims do not hold")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
