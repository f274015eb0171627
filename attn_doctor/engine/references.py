"""Finding rules by the upstream issue they cite: a URL or ``owner/repo#N``, as users paste them."""

from __future__ import annotations

import re

from attn_doctor.engine.schema import Rule

_SHORT_ISSUE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)#(?P<number>\d+)$")


def rules_citing(name: str, rules: list[Rule]) -> list[Rule]:
    """The rules whose references include the issue or pull request ``name`` names."""
    wanted = issue_url(name)
    return [rule for rule in rules if any(same_issue(wanted, ref) for ref in rule.references)]


def issue_url(name: str) -> str:
    match = _SHORT_ISSUE.match(name.strip())
    if match:
        return f"https://github.com/{match['repo']}/issues/{match['number']}"
    return name.strip()


def same_issue(wanted: str, reference: str) -> bool:
    """``/issues/N`` and ``/pull/N`` of one repository are the same number space on GitHub."""

    def key(url: str) -> str:
        return re.sub(r"/(issues|pull)/(\d+).*$", r"/#\2", url.rstrip("/").lower())

    return key(wanted) == key(reference)
