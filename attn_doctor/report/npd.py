"""``check --format npd``: a custom plugin of Kubernetes Node Problem Detector (NPD).

NPD's contract, as read in kubernetes/node-problem-detector at tag v1.36.0:

- ``pkg/custompluginmonitor/plugin/plugin.go`` (``Plugin.run``): exit status 0 is ``OK``, 1 is
  ``NonOK``, anything else ``Unknown``; the message is the plugin's stdout, whitespace-trimmed and
  cut at ``max_output_length`` bytes; stderr is only logged (4 KiB of each stream are read).
- ``pkg/custompluginmonitor/types/config.go``: ``defaultMaxOutputLength = 80``.
- ``docs/custom_plugin_monitor.md``: ``max_output_length`` is "the maximum standard output size
  from custom plugins that NPD will be cut and use for condition status message".

So the whole report is one ASCII line of at most 80 characters (NPD's default; a larger
``max_output_length`` changes nothing), and the exit status is the check's own: 0 nothing fails
at or above --fail-on, 1 something does, 2 an input problem (NPD: Unknown). The most severe
failing finding comes first, by id (``attn-doctor explain``/``rules show`` take it from there).
"""

from __future__ import annotations

import re
import unicodedata

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import Finding, Verdict, pending_features
from attn_doctor.engine.severity import SEVERITIES
from attn_doctor.report import MachineFormat, check_exit_code
from attn_doctor.words import counted

MAX_OUTPUT_LENGTH = 80  # NPD's default max_output_length
PREFIX = "attn-doctor: "
_MIN_TITLE = 12  # a title cut shorter than this says nothing: left out
_WORD_SEARCH = 12  # a cut moves back to a space at most this far
_FOLDERS = re.compile(r"(?<![^\s'\"(])[^\s'\"(]*/(?=[^\s/]+)")  # "/tmp/a/" of "/tmp/a/b.toml"

_PUNCTUATION = str.maketrans(
    {
        "\u2013": "-",
        "\u2014": "-",
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2026": "...",
        "\u2192": "->",
        "\u2264": "<=",
        "\u2265": ">=",
        "\u00d7": "x",
    }
)


def to_npd(result: CheckResult, width: int = MAX_OUTPUT_LENGTH) -> str:
    return message(result, width) + "\n"


def message(result: CheckResult, width: int = MAX_OUTPUT_LENGTH) -> str:
    """One ASCII line of at most ``width`` characters: the input problem, else the most severe
    failing finding, else that nothing fails."""
    if result.problems:
        return _with_more(f"{PREFIX}unknown: ", ascii_line(result.problems[0]), len(result.problems), width)
    failing = sorted(result.failing(), key=_severity_first)
    if failing:
        return _failing_line(failing, width)
    affected = sum(f.verdict is Verdict.AFFECTED for f in result.findings)
    if_used = sum(bool(pending_features(f)) for f in result.findings)
    unknown = sum(f.verdict is Verdict.UNKNOWN for f in result.findings) - if_used
    counts = f"{affected} affected, {unknown} unknown, {if_used} if used"
    return cut(f"{PREFIX}ok: 0 of {counted(len(result.findings), 'rule')} failing ({counts})", width)


def stopped(problem: str, exit_code: int, width: int = MAX_OUTPUT_LENGTH) -> str:
    """The check stopped before a result (an unreadable --env-file): NPD's Unknown, by the exit code
    (2 or 3), with the reason on stdout, where NPD reads its message."""
    return _with_more(f"{PREFIX}unknown: ", ascii_line(problem), 1, width) + "\n"


def _severity_first(finding: Finding) -> tuple[int, int, str]:
    return (SEVERITIES.index(finding.rule.severity), finding.verdict is not Verdict.AFFECTED, finding.rule.id)


def _failing_line(failing: list[Finding], width: int) -> str:
    first = failing[0]
    verdict = "" if first.verdict is Verdict.AFFECTED else ", unknown"
    core = f"{ascii_line(first.rule.id)} ({first.rule.severity}{verdict})"
    more = f"; +{len(failing) - 1} more" if len(failing) > 1 else ""
    head = f"{PREFIX}{len(failing)} failing: " if more else PREFIX
    if len(head) + len(core) + len(more) > width:
        head = PREFIX  # "+N more" already says there are several
    room = width - len(head) - len(core) - len(more) - 1
    title = f" {cut(ascii_line(first.rule.title), room)}" if room >= _MIN_TITLE else ""
    if len(head) + len(core) + len(more) > width:  # an id longer than the line (a custom rule)
        core = cut(core, width - len(head) - len(more))
    return f"{head}{core}{title}{more}"


def _with_more(head: str, text: str, count: int, width: int) -> str:
    """``head``, ``text`` and how many more there are, cut to ``width``; where it would be cut, the
    folders of paths go first (``.../rules/broken.toml`` names the file; ``/tmp/...`` was cut)."""
    more = f"; +{count - 1} more" if count > 1 else ""
    room = max(width - len(head) - len(more), 3)
    if len(text) > room:
        text = _FOLDERS.sub(".../", text)
    return f"{head}{cut(text, room)}{more}"


def ascii_line(text: str) -> str:
    """``text`` on one line of printable ASCII: typographic punctuation spelled out, accents
    dropped (``naïve`` is ``naive``), anything else ``?``, whitespace runs one space."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_PUNCTUATION))
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    printable = "".join(c if c.isprintable() else " " for c in plain)
    return " ".join(printable.encode("ascii", "replace").decode("ascii").split())


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, ``...`` where it was cut (at a space when one is
    near the end)."""
    if len(text) <= width:
        return text
    kept = text[: max(width - 3, 0)]
    space = kept.rfind(" ")
    if space > 0 and space >= len(kept) - _WORD_SEARCH:
        kept = kept[:space]
    return kept.rstrip(" ;,:") + "..."


FORMAT = MachineFormat(to_npd, check_exit_code, stopped)
