"""A count with its noun, for every report: one helper, so that none says "1 rules"."""

from __future__ import annotations


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless the number is 1: "1 rule", "0 rules", "1,831 lines"."""
    return f"{number:,} {noun if number == 1 else noun + 's'}"
