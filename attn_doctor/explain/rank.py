"""Turn matched symptoms into causes, most likely first, each with why it ranked there.

The same message can be a symptom of several rules (``undefined symbol`` is), so fit decides:

1. a rule whose conditions contradict the known facts ("symptom matches, but torch 2.6.0 is not in <2.5")
   ranks below every rule that fits or may fit;
2. a rule matched only by a generic message (GENERIC_MESSAGES: any CUDA crash says "illegal memory
   access"; a literal made of several, "CUDA error: an illegal memory access", is generic too)
   ranks below one matched by a message specific to it; between them, a generic match the release
   facts confirm for this stack (the wheels of this torch lack the GPU's code; the API
   tables name the release that removed the missing name);
3. affected on this stack before unknown, and among unknown ones, fewer facts missing first;
4. the rule's component owns the innermost traceback frame (the package that raised);
5. then how specific the match is: more of the rule's patterns, a pattern fewer rules share, a
   longer literal; then the latest match in the log (the crash is at the end).
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_doctor.engine.matcher import RELEASE, Finding, Verdict
from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.explain.scan import Hits, Occurrence
from attn_doctor.explain.symptoms import Symptom, patterns_of
from attn_doctor.words import counted

_VERDICT_ORDER = {Verdict.AFFECTED: 0, Verdict.UNKNOWN: 1, Verdict.NOT_AFFECTED: 2}
# messages that many unrelated faults print: on their own they say little about the cause
GENERIC_MESSAGES = (
    "undefined symbol",
    "must match the size of tensor b (",  # any broadcast
    "must match the existing size (",  # any expand
    "no kernel image is available for execution on the device",
    "an illegal memory access was encountered",
    "out of resource: shared memory",
    "CUDA error: ",
    "device-side assert triggered",
    "invalid configuration argument",
    "invalid argument",
    "unspecified launch failure",
    "out of memory",
    "Segmentation fault",
    "CUBLAS_STATUS_",
    "cannot import name '",
    "has no attribute '",
    "got an unexpected keyword argument '",
    "required positional argument",
    "required keyword-only argument",
    "No module named '",
    "RuntimeError: ",
    "ImportError: ",
)
# the packages whose frames belong to a rule's component
_COMPONENT_PACKAGES = {
    "torch": ("torch",),
    "sdpa": ("torch",),
    "flex-attention": ("torch",),
    "triton": ("triton",),
    "transformers": ("transformers",),
    "flash-attn": ("flash-attn",),
    "flash-attn-3": ("flash-attn-3", "flash-attn"),
    "flash-linear-attention": ("flash-linear-attention",),
    "xformers": ("xformers",),
}


# torch is in every stack this tool sees: only the other packages must show in the log or target
_GATED = {component for component, packages in _COMPONENT_PACKAGES.items() if packages != ("torch",)}


def outside_its_package(cause: Cause, packages: set[str]) -> bool:
    """Matched only by generic words (a missing attribute, an unexpected keyword), about a package
    neither the target nor the log names (``packages``: those the target has, the log states or
    mentions, or whose messages it prints): it shares the words, it is not the answer. A message
    specific to the rule is evidence enough on its own."""
    component = cause.finding.rule.component
    if component not in _GATED or set(_COMPONENT_PACKAGES[component]) & packages:
        return False
    return all(match.generic for match in cause.matches)


@dataclass(frozen=True)
class SymptomMatch:
    symptom: Symptom
    lines: int  # how many lines matched
    first: Occurrence
    last: Occurrence

    @property
    def generic(self) -> bool:
        """Every literal of the pattern is made of generic messages ("CUDA error: an illegal memory
        access was encountered" is two of them): any crash prints it, so it says nothing of whose."""
        return all(is_generic(run.decode("utf-8", "replace")) for run in self.symptom.runs)


def is_generic(text: str) -> bool:
    """``text`` is part of a generic message, or generic messages and punctuation end to end."""
    for message in GENERIC_MESSAGES:
        text = text.replace(message, "\0")
    pieces = (piece.strip(" \t'\".:,;()[]") for piece in text.split("\0"))
    return all(any(piece in message for message in GENERIC_MESSAGES) for piece in pieces if piece)


@dataclass(frozen=True)
class Cause:
    finding: Finding  # the rule and its verdict on this stack
    matches: tuple[SymptomMatch, ...]
    raised_here: bool = False  # the innermost traceback frame is in the rule's component
    explains_error: bool = False  # a symptom matched the log's last error line (what the run died of)
    said: tuple[tuple[int, str], ...] = ()  # (line, text): the log's lines that say why (log_reasons)
    nearest: tuple[str, str] | None = None  # (the name given, the valid name nearest it): rule.nearest

    @property
    def last_line(self) -> int:
        return max(match.last.line for match in self.matches)

    @property
    def confirmed(self) -> bool:
        """A release-facts condition holds, or a feature the rule needs is in use (a call the log
        shows, a declared or detected feature): facts, not only the message, name the cause."""
        return any(
            reason.condition in (RELEASE, "features") and reason.holds for reason in self.finding.reasons
        )

    @property
    def assumed(self) -> int:
        """How many of the conditions that hold rest on a fact only implied (another package's pin)."""
        return sum(
            bool(r.holds and r.origin and r.origin.startswith("implied by")) for r in self.finding.reasons
        )

    @property
    def generic_only(self) -> bool:
        return all(match.generic for match in self.matches) and not self.confirmed

    def why(self) -> list[str]:
        """Why it ranked where it did, one phrase per criterion, in ranking order."""
        verdict = self.finding.verdict
        reasons = {
            Verdict.AFFECTED: "the stack fits the rule",
            Verdict.UNKNOWN: "the stack may fit (some facts unknown)",
        }
        why = [reasons.get(verdict) or refuted_text(self.finding)]
        if self.generic_only:
            why.append("matched only by a generic message")
        elif self.confirmed and all(match.generic for match in self.matches):
            why.append("a generic message, the cause confirmed by the release facts")
        else:
            shared = min(len(match.symptom.rules) for match in self.matches if not match.generic)
            why.append("a message specific to it" if shared == 1 else f"a message {shared} rules share")
        if self.assumed:
            why.append(f"{self.assumed} of its conditions rest on versions only implied by another's pin")
        if self.explains_error:
            why.append("it matches the log's last error line")
        if self.raised_here:
            why.append(f"the innermost frame is in {self.finding.rule.component}")
        total = len(self.finding.rule.symptoms) + len(self.finding.rule.messages)
        why.append(f"{len(self.matches)} of its {counted(total, 'symptom pattern')} matched")
        return why


def refuted_text(finding: Finding) -> str:
    """What rules the cause out, as the facts say it: a version, a GPU, a feature not in use."""
    refuted = [reason.text for reason in finding.reasons if reason.holds is False]
    return (
        f"symptom matches, but {'; '.join(refuted)}" if refuted else "symptom matches, the stack does not fit"
    )


def rank(
    findings: list[Finding],
    symptoms: list[Symptom],
    hits: dict[str, Hits],
    innermost: str | None = None,
    last_error: int | None = None,
) -> list[Cause]:
    """The findings whose rule has a matched symptom, most likely first. ``innermost``: the
    package of the last traceback frame in the log, if one was read; ``last_error``: the line of
    the log's last error (a warning 500 lines above it explains less)."""
    matched = {
        symptom.pattern: SymptomMatch(symptom, found.count, found.first, found.last)
        for symptom in symptoms
        if (found := hits.get(symptom.pattern)) and found.first and found.last
    }
    patterns = patterns_of(symptoms)
    causes = [
        Cause(
            finding,
            tuple(matched[p] for p in patterns.get(finding.rule.id, ()) if p in matched),
            innermost in _COMPONENT_PACKAGES.get(finding.rule.component, ()),
            any(
                matched[p].last.line == last_error for p in patterns.get(finding.rule.id, ()) if p in matched
            ),
        )
        for finding in findings
    ]
    return sorted((cause for cause in causes if cause.matches), key=_likelihood)


def _likelihood(cause: Cause) -> tuple[int, int, int, int, int, int, int, int, int, int, int, int, str]:
    """Sort key, most likely first."""
    rule, verdict = cause.finding.rule, cause.finding.verdict
    return (
        verdict is Verdict.NOT_AFFECTED,
        cause.generic_only + all(match.generic for match in cause.matches),  # specific, confirmed, generic
        _VERDICT_ORDER[verdict],
        sum(reason.holds is None for reason in cause.finding.reasons),  # fewer facts missing fits better
        cause.assumed,  # fit on facts the log or target states over facts another package implies
        not cause.explains_error,
        not cause.raised_here,
        -len(cause.matches),
        min(len(match.symptom.rules) for match in cause.matches),
        -max(len(match.symptom.literal) for match in cause.matches),
        -cause.last_line,
        SEVERITIES.index(rule.severity),
        rule.id,
    )
