"""API drift (issue 38, item 3): "cannot import name 'X'" with no module said, read against the
API-change tables of every release (releases/api_changes.py): the package and module whose
releases define X, when it arrived or left, and the stack's version on which side of that.

An import error that names its module is the API-change rules' (transformers', flash-attn's,
triton's, xformers', fla's): this reasoner answers where they cannot, the module unsaid.
"""

from __future__ import annotations

import re

from packaging.version import Version

from attn_doctor.explain.reasoners.interface import Evidence, Reasoned
from attn_doctor.releases.api_changes import Timeline
from attn_doctor.releases.facts import snapshot

_BARE_IMPORT = re.compile(r"cannot import name '([A-Za-z_][A-Za-z0-9_]{0,100})'(?! from)")


class ApiDriftReasoner:
    name = "api-drift"

    def reason(self, evidence: Evidence) -> list[Reasoned]:
        for line, text in reversed(evidence.lines):
            found = _BARE_IMPORT.search(text)
            if found is None or line in evidence.explained:
                continue
            cause = _cause(line, text, found[1], evidence)
            return [cause] if cause is not None else []
        return []


def _cause(line: int, text: str, name: str, evidence: Evidence) -> Reasoned | None:
    timelines = snapshot().api_changes.named(name)
    packages = evidence.environment.packages
    stated = [t for t in timelines if (p := packages.get(t.package)) is not None and p.version]
    # the stated release lacks it: the timelines that say so; none stated: every package's
    if any(t.present_at(packages[t.package].version or "") for t in stated):
        return None  # a module of the stated release has it: the tables do not explain the line
    absent = [t for t in stated if t.present_at(packages[t.package].version or "") is False]
    chosen = absent or ([] if stated else timelines)
    if len({t.package for t in chosen}) != 1 or not chosen:
        return None
    # a name re-exported by many modules: the one that defined it first (transformers' model files
    # import FlashAttentionKwargs from modeling_flash_attention_utils)
    timeline = min(chosen, key=_home)
    version = packages[timeline.package].version if timeline.package in packages else None
    event = timeline.cause(version, present=False) if version else _first_added(timeline)
    if event is None:
        return None
    facts = [
        f"{timeline.subject}: {event[0]} in {timeline.package} {event[1]} (the API tables of its releases)"
    ]
    if version:
        facts.append(f"{timeline.package} {version} ({packages[timeline.package].origin}) lacks it")
    return Reasoned(
        id=f"api-drift:{timeline.package}:{name}",
        kind="install",
        title=f"{name} is not in the installed {timeline.package}: code written for another release",
        raised_by="Python's import system (the calling code imports a name this release lacks)",
        condition=f"raised when the installed {timeline.package} does not define {name}",
        facts=tuple(facts),
        fix=_fix(timeline, event, version),
        line=line,
        text=text,
        reasoner=ApiDriftReasoner.name,
        evidence=(f"{name} is defined by {timeline.package} alone of the packages the tables cover",),
    )


def _home(timeline: Timeline) -> tuple[Version, int]:
    added = _first_added(timeline)
    return (Version(added[1]) if added else Version("0"), len(timeline.subject))


def _first_added(timeline: Timeline) -> tuple[str, str] | None:
    return next((event for event in timeline.events if event[0] == "added"), None)


def _fix(timeline: Timeline, event: tuple[str, str], version: str | None) -> str:
    kind, release = event
    package = timeline.package
    if kind == "added":
        return f"upgrade {package} to {release} or later, where it arrived (or update the calling code)"
    renamed = f" (renamed to {timeline.renamed_to})" if timeline.renamed_to else ""
    before = timeline.last_before(release)
    pin = f"pin {package}=={before}" if before else f"pin {package}<{release}"
    return f"{pin}, the last release with it{renamed}, or update the calling code to {package} {release}"
