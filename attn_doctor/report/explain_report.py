"""`attn-doctor explain` reports: plain text for people, JSON for scripts (schemas/explain.schema.json).

Log lines are untrusted: the text report replaces control characters (a log can carry terminal
escape sequences) and shortens each line around the literal that matched.
"""

from __future__ import annotations

import json
import re
from typing import Any

from attn_doctor import __version__
from attn_doctor.engine.fix_pins import reconcile
from attn_doctor.engine.matcher import RELEASE, Finding, Verdict
from attn_doctor.explain import Explanation
from attn_doctor.explain.origins import Origin
from attn_doctor.explain.rank import Cause, SymptomMatch, refuted_text
from attn_doctor.explain.scan import Occurrence
from attn_doctor.facts.log_facts import FROM_THE_LOG
from attn_doctor.facts.model import Environment
from attn_doctor.releases.messages import Message
from attn_doctor.report import install
from attn_doctor.words import counted

EXPLAIN_SCHEMA_ID = "attn-doctor/explain"
EXPLAIN_SCHEMA_VERSION = 1
SHOWN_CHARS = 160
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x9b]")
_MARKS = {Verdict.AFFECTED: "✗", Verdict.UNKNOWN: "?", Verdict.NOT_AFFECTED: "-"}


def to_text(explanation: Explanation, verbose: bool = False) -> str:
    env = explanation.environment
    lines = [
        f"attn-doctor explain: {_input_name(explanation.source)} ({explanation.bytes_read:,} bytes, "
        f"{counted(explanation.lines, 'line')}; stack: {env.target})",
    ]
    stated = _stated_facts(env)
    if stated:
        lines.append(f"from the log: {'; '.join(stated if verbose else stated[:6])}")
    if explanation.implied:
        lines.append(f"from its messages: {'; '.join(i.text() for i in explanation.implied)}")
    lines.append("")
    ruled_out = explanation.ruled_out
    fitting = bool(explanation.causes) and not ruled_out
    if not fitting:  # no rule fits: what the releases' own code says is the answer
        lines.extend(_reasoned_lines(explanation, verbose))
    if ruled_out:  # the answer is where the message comes from, not a rule the stack rules out
        lines.extend(_origin_lines(explanation.origins, verbose))
        if verbose or not all(_foldable(cause) for cause in explanation.causes):
            lines += ["Ruled out by this stack's facts (the symptom matches, the versions do not):", ""]
    folded = []
    for rank, cause in enumerate(explanation.causes, 1):
        if _foldable(cause) and not verbose:
            folded.append(cause.finding.rule.id)
            continue
        lines.extend(_cause_lines(rank, cause, env))
        if verbose:
            lines.append(f"   ranked here: {'; '.join(cause.why())}")
        lines.append("")
    if folded:
        lines += [
            f"Also matched only by a generic message, on versions they do not fit ({len(folded)}; -v shows "
            f"them): {', '.join(folded)}",
            "",
        ]
    if fitting:
        lines.extend(_reasoned_lines(explanation, verbose))
    if explanation.elsewhere:
        named = ", ".join(f"{c.finding.rule.id} ({c.finding.rule.component})" for c in explanation.elsewhere)
        lines += [
            f"Not counted: rules about packages this log and stack never name match its words: {named}",
            "",
        ]
    if not ruled_out:
        lines.extend(_origin_lines(explanation.origins, verbose))
    if verbose or not (fitting or explanation.reasoned):
        lines.extend(_unexplained_lines(explanation))
    lines.extend(_summary_lines(explanation))
    return "\n".join(lines) + "\n"


SHOWN_ORIGINS = 3  # the last error lines; -v shows every one


def _origin_lines(origins: list[Origin], verbose: bool) -> list[str]:
    """Where the log's error lines come from, as the releases' own code says (the catalogue)."""
    if not origins:
        return []
    shown = origins if verbose else origins[-SHOWN_ORIGINS:]
    more = "" if len(shown) == len(origins) else f" (the last {len(shown)} of {len(origins)}; -v: all)"
    lines = [f"Where its messages come from, in the releases' own code{more}:"]
    for origin in shown:
        text = _CONTROL.sub("\N{REPLACEMENT CHARACTER}", origin.text)
        lines.append(f"  line {origin.line}: {text[:SHOWN_CHARS]}")
        for message in origin.messages[: None if verbose else 1]:
            lines.append(f"    {_origin_text(message)}")
            if verbose:  # the id a rule's `messages` names
                lines.append(f"      id: {message.id}")
        if not verbose and len(origin.messages) > 1:
            lines.append(f"    (and {len(origin.messages) - 1} other places with the same words: -v)")
    return [*lines, ""]


def _origin_text(message: Message) -> str:
    kind = {"warning": "warned", "assert": "asserted"}.get(message.kind)
    if kind is None:
        kind = (
            f"logged ({message.kind.removeprefix('log.')})"
            if message.kind.startswith("log.")
            else (f"{message.kind} raised")
        )
    text = f"{kind} by {message.where()} in {message.release_text()}"
    return text + (f", when {message.guard}" if message.guard else "")


def _reasoned_lines(explanation: Explanation, verbose: bool) -> list[str]:
    """The causes no rule names, reasoned from the releases' own code, numbered after the rules."""
    if not explanation.reasoned:
        return []
    first = _fitting_count(explanation) + 1
    lines = ["Reasoned from the releases' own code (no rule names these lines):", ""]
    for rank, cause in enumerate(explanation.reasoned, first):
        kind = {"usage": "user error", "install": "installation problem"}.get(cause.kind, "release")
        text = _CONTROL.sub("\N{REPLACEMENT CHARACTER}", cause.text)
        lines += [f"{rank}. [{kind}] {cause.title}", f"   line {cause.line}: {text[:SHOWN_CHARS]}"]
        lines.append(f"   raised by {cause.raised_by}")
        lines += [f"   {cause.condition}"] if cause.condition else []
        lines += [f"   the facts: {fact}" for fact in cause.facts]
        lines.append(f"   fix: {cause.fix}")
        if verbose:
            lines += [f"   chosen because: {'; '.join(cause.evidence)}"] if cause.evidence else []
            lines.append(f"   id: {cause.id}")
        lines.append("")
    return lines


def _fitting_count(explanation: Explanation) -> int:
    return 0 if explanation.ruled_out else len(explanation.causes)


def _unexplained_lines(explanation: Explanation) -> list[str]:
    """The error lines nothing explains, and what was checked for each."""
    if not explanation.unexplained:
        return []
    lines = ["Not explained (what was checked):"]
    for each in explanation.unexplained:
        text = _CONTROL.sub("\N{REPLACEMENT CHARACTER}", each.text)
        lines += [f"  line {each.line}: {text[:SHOWN_CHARS]}", f"    {each.why}"]
    return [*lines, ""]


def _foldable(cause: Cause) -> bool:
    """A generic message on a stack the rule does not fit says nothing: one line, not a cause."""
    return cause.finding.verdict is Verdict.NOT_AFFECTED and cause.generic_only


def _summary_lines(explanation: Explanation) -> list[str]:
    reasoned = len(explanation.reasoned)
    if reasoned and not _fitting_count(explanation):
        return [
            f"No rule names this log's errors; {counted(reasoned, 'cause')} reasoned from the releases' "
            "own code above. `attn-doctor check` still checks the stack itself."
        ]
    if not explanation.causes:
        return [
            f"No known cause: no symptom of the {explanation.rules_with_symptoms} rules that have one "
            "appears in this log. `attn-doctor check` still checks the stack itself."
        ]
    if explanation.ruled_out:
        return [
            f"No known cause fits this stack: the {counted(len(explanation.causes), 'rule')} its words "
            f"match {'is' if len(explanation.causes) == 1 else 'are'} ruled out by its facts. If the log "
            "comes from another machine, describe its stack (--pin, -r, --env-file, --gpu, --feature, "
            "--model)."
        ]
    counts = {v: sum(c.finding.verdict is v for c in explanation.causes) for v in Verdict}
    lines = [
        f"{counted(len(explanation.causes), 'known cause')}, most likely first: {counts[Verdict.AFFECTED]} "
        f"affected, {counts[Verdict.UNKNOWN]} unknown, {counts[Verdict.NOT_AFFECTED]} not affected "
        "on this stack"
    ]
    return lines


def _stated_facts(env: Environment) -> list[str]:
    """The facts that came from the log, each with its line."""
    marker = FROM_THE_LOG
    facts = [
        f"{p.name} {p.version or '(version not stated)'} ({p.origin.removeprefix(marker)}"
        f"{'; but ' + p.pinned_by if p.pinned_by else ''})"
        for p in env.packages.values()
        if p.origin.startswith(marker)
    ]
    if env.gpu_source.startswith(marker):
        names = ", ".join(gpu.name for gpu in env.gpus)
        facts.append(f"GPU {names} ({env.gpu_source.removeprefix(marker)})")
    facts += [
        f"{fact} {getattr(env, fact)} ({origin.removeprefix(marker)})"
        for fact, origin in env.origins.items()
        if origin.startswith(marker) and fact in ("python", "platform", "nvcc")
    ]
    return facts


def _input_name(source: str) -> str:
    return "stdin" if source == "-" else source


MAX_SAID = 6


def _cause_lines(rank: int, cause: Cause, environment: Environment) -> list[str]:
    rule, mark = cause.finding.rule, _MARKS[cause.finding.verdict]
    kind = {"usage": "user error; ", "install": "installation problem; "}.get(rule.kind, "")
    lines = [
        f"{rank}. {mark} {rule.id} [{kind}{rule.severity}; {_verdict_text(cause.finding)}]",
        f"   {rule.title}",
    ]
    shown: set[int] = set()
    for match in cause.matches:  # two patterns of a rule can match one line: show it once
        if {match.first.line, match.last.line} - shown:
            lines.extend(_match_lines(match))
            shown |= {match.first.line, match.last.line}
    if cause.nearest is not None:
        given, nearest = cause.nearest
        lines.append(f'   in this log: "{given}" is not a name it knows; the nearest it lists is "{nearest}"')
    for line, text in cause.said[:MAX_SAID]:
        lines.append(f"   the log says why, line {line}: {text}")
    if len(cause.said) > MAX_SAID:
        lines.append(f"   (and {counted(len(cause.said) - MAX_SAID, 'more such line')}: --format json)")
    for reason in cause.finding.reasons:
        if reason.condition == RELEASE and reason.holds:
            lines.append(f"   found: {reason.text}")
        if reason.suggestion and reason.holds is not False:
            lines.append(f"   for these versions: {reason.suggestion}")
    lines.append(f"   fix: {rule.fix_summary}")
    lines += [f"   {line}" for line in install.lines(cause.finding, environment)]
    if rule.fix_pins:
        pins = reconcile(rule.fix_pins, environment)
        lines.append(f"   pins: {' '.join(pins.pins)}")
        if pins.conflicts:
            lines.append(f"   (as {'; '.join(pins.conflicts)})")
    lines.append(f"   see: {rule.references[0]}")
    if rule.repro:
        lines.append(f"   repro: attn-doctor repro {rule.id}")
    return lines


def _verdict_text(finding: Finding) -> str:
    """The verdict, and for an unknown or not-affected one the conditions that made it so."""
    if finding.verdict is Verdict.NOT_AFFECTED:
        return refuted_text(finding)
    why = [reason.text for reason in finding.reasons if reason.holds is None]
    label = f"{finding.verdict.value.replace('-', ' ')} on this stack"
    return f"{label}: {'; '.join(why)}" if finding.verdict is not Verdict.AFFECTED and why else label


def _match_lines(match: SymptomMatch) -> list[str]:
    literal = match.symptom.literal.decode("utf-8")
    lines = [f"   line {match.first.line}: {_shorten(match.first, literal)}"]
    if match.lines > 2:
        between = match.lines - 2
        lines.append(f"   ... {counted(between, 'more matching line')} ...")
    if match.lines > 1:
        lines.append(f"   line {match.last.line}: {_shorten(match.last, literal)}")
    return lines


def _shorten(occurrence: Occurrence, literal: str) -> str:
    """At most SHOWN_CHARS characters around the literal, control characters replaced."""
    text = _CONTROL.sub("\N{REPLACEMENT CHARACTER}", _decoded(occurrence).strip())
    if len(text) <= SHOWN_CHARS:
        return text
    start = max(0, min(text.find(literal) - SHOWN_CHARS // 4, len(text) - SHOWN_CHARS))
    end = start + SHOWN_CHARS
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _decoded(occurrence: Occurrence) -> str:
    return occurrence.text.decode("utf-8", "replace")


def to_json(explanation: Explanation) -> str:
    env = explanation.environment
    document = {
        "schema": EXPLAIN_SCHEMA_ID,
        "schema_version": EXPLAIN_SCHEMA_VERSION,
        "tool": {"name": "attn-doctor", "version": __version__},
        "input": {
            "source": _input_name(explanation.source),
            "bytes": explanation.bytes_read,
            "lines": explanation.lines,
        },
        "environment": explanation.environment.to_json_dict(),
        "rules_with_symptoms": explanation.rules_with_symptoms,
        "causes": [_cause_dict(rank, cause, env) for rank, cause in enumerate(explanation.causes, 1)],
        "origins": [
            {
                "line": origin.line,
                "text": origin.text,
                "messages": [
                    {
                        "id": m.id,
                        "package": m.package,
                        "file": m.file,
                        "function": m.function,
                        "kind": m.kind,
                        "template": m.template,
                        "releases": [list(run) for run in m.releases],
                        "guard": m.guard,
                    }
                    for m in origin.messages
                ],
            }
            for origin in explanation.origins
        ],
        "elsewhere": [
            {"id": c.finding.rule.id, "component": c.finding.rule.component} for c in explanation.elsewhere
        ],
        "reasoned": [
            {
                "rank": rank,
                "id": c.id,
                "kind": c.kind,
                "title": c.title,
                "raised_by": c.raised_by,
                "condition": c.condition,
                "facts": list(c.facts),
                "fix": c.fix,
                "line": c.line,
                "text": c.text,
                "reasoner": c.reasoner,
                "evidence": list(c.evidence),
            }
            for rank, c in enumerate(explanation.reasoned, _fitting_count(explanation) + 1)
        ],
        "unexplained": [{"line": u.line, "text": u.text, "why": u.why} for u in explanation.unexplained],
        "implied_releases": [
            {
                "package": i.package,
                "releases": [list(run) for run in i.runs],
                "or_later": i.open_ended,
                "line": i.line,
            }
            for i in explanation.implied
        ],
        "problems": explanation.problems,
        "exit_code": explanation.exit_code,
    }
    return json.dumps(document, indent=2) + "\n"


def _cause_dict(rank: int, cause: Cause, environment: Environment) -> dict[str, Any]:
    rule = cause.finding.rule
    return {
        "rank": rank,
        "id": rule.id,
        "title": rule.title,
        "severity": rule.severity,
        "component": rule.component,
        "verdict": cause.finding.verdict.value,
        "kind": rule.kind,
        "why": cause.why(),
        "reasons": [
            {
                "condition": r.condition,
                "holds": r.holds,
                "text": r.text,
                "suggestion": r.suggestion,
                "suggested_pins": list(r.suggested_pins),
            }
            for r in cause.finding.reasons
        ],
        "matches": [
            {
                "pattern": match.symptom.pattern,
                "literal": match.symptom.literal.decode("utf-8"),
                "shared_by": list(match.symptom.rules),
                "lines": match.lines,
                "first": {"line": match.first.line, "text": _decoded(match.first)},
                "last": {"line": match.last.line, "text": _decoded(match.last)},
            }
            for match in cause.matches
        ],
        "summary": rule.summary,
        "fix": {
            "summary": rule.fix_summary,
            "pins": list(rule.fix_pins),
            "install": install.to_json(cause.finding, environment),
        },
        "references": list(rule.references),
        "repro": f"attn-doctor repro {rule.id}" if rule.repro else None,
        "log_reasons": [{"line": line, "text": text} for line, text in cause.said],
        "nearest": None
        if cause.nearest is None
        else {"given": cause.nearest[0], "nearest": cause.nearest[1]},
    }
