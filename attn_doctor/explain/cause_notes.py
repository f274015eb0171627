"""What a log says about a cause beyond the line that matched: the reasons it printed above it
(a rule's ``log_reasons``) and, for a name the user mistyped, the valid one nearest it (``nearest``)."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace

from attn_doctor.explain.origins import Origin
from attn_doctor.explain.rank import Cause


def annotate(cause: Cause, found: list[Origin]) -> Cause:
    return _with_nearest(_with_reasons(cause, found))


def _with_reasons(cause: Cause, found: list[Origin]) -> Cause:
    """The cause with the log's lines its rule's ``log_reasons`` name: torch's "No available
    kernel" is explained by the checks it printed above it ("Expected query, key and value to all
    be of dtype: {Half, BFloat16}")."""
    prefixes = cause.finding.rule.log_reasons
    said = tuple(
        (origin.line, _message_part(origin.text))
        for origin in found
        if any(message.id.startswith(prefixes) for message in origin.messages)
    )
    return replace(cause, said=said) if prefixes and said else cause


def _with_nearest(cause: Cause) -> Cause:
    """The cause with the valid name nearest the one the user gave (rule.nearest), both read
    from the matched line: 'attn_implementation="flash_attn_2"' is nearest "flash_attention_2"."""
    if cause.finding.rule.nearest is None:
        return cause
    given_pattern, choices_pattern = cause.finding.rule.nearest
    for symptom_match in cause.matches:
        line = symptom_match.last.text.decode("utf-8", "replace")
        given = re.search(given_pattern, line)
        if given is None:
            continue
        choices = list(dict.fromkeys(re.findall(choices_pattern, line[given.end() :])))
        close = difflib.get_close_matches(given[1], choices, n=1, cutoff=0.5)
        if close:
            return replace(cause, nearest=(given[1], close[0]))
    return cause


def _message_part(text: str) -> str:
    """ "x.py:9: UserWarning: Expected ... (Triggered internally at .../sdp_utils_cpp.h:91.)" is
    "Expected ...": the words the library chose, without where Python or C++ printed them."""
    for mark in ("Warning: ", "Error: "):
        if mark in text:
            text = text.split(mark, 1)[1]
            break
    return text.split(" (Triggered internally at ", 1)[0].strip()
