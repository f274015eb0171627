"""Which rule symptoms quote words that no release's code holds.

A symptom copied from a thread can be a paraphrase, a message of another release, or text that is
never printed (the audit of 2026-11 found "xFormers was built for:" quoted with its version on one
line, where xformers prints it on the next). A symptom *quotes the catalogue* when a window of
WINDOW characters of one of its literal runs (or the whole run, if shorter) appears in the
literal text of some catalogue message. Symptoms that quote text outside any release's code
(the CUDA runtime, compilers, the loader, pip, user code) say so in the rule's
``external_symptoms``; every other symptom must quote the catalogue.

    python -m tools.messages.symptom_audit      # the list, one line per symptom
"""

from __future__ import annotations

from attn_doctor.engine.loader import load_rules
from attn_doctor.engine.patterns import analyse
from attn_doctor.engine.schema import Rule
from attn_doctor.releases.messages import Catalogue, catalogue

WINDOW = 16
MIN_RUN = 8  # shorter runs ("\\(", ": ") say nothing about where the words come from


def shingles(messages: Catalogue) -> set[str]:
    """Every WINDOW-character window of the literal parts of every message's template."""
    found: set[str] = set()
    for message in messages.messages:
        for part in message.template.split("{}"):
            found.update(part[i : i + WINDOW] for i in range(max(len(part) - WINDOW + 1, 1)))
    return found


def quotes(symptom: str, windows: set[str], texts: list[str]) -> bool:
    runs = [run for run in analyse(symptom).runs if len(run.strip()) >= MIN_RUN]
    if not runs:
        return True  # nothing literal enough to check
    run = max(runs, key=len)
    if len(run) < WINDOW:
        return any(run in text for text in texts)
    return any(run[i : i + WINDOW] in windows for i in range(len(run) - WINDOW + 1))


def unquoted(rules: list[Rule], messages: Catalogue) -> list[tuple[str, str]]:
    """(rule id, symptom) for each symptom that quotes no catalogue message and is not external."""
    windows = shingles(messages)
    texts = [part for message in messages.messages for part in message.template.split("{}")]
    return [
        (rule.id, symptom)
        for rule in rules
        for symptom in rule.symptoms
        if symptom not in rule.external_symptoms and not quotes(symptom, windows, texts)
    ]


def main() -> int:
    found = unquoted(load_rules().rules, catalogue())
    for rule_id, symptom in found:
        print(f"{rule_id}: {symptom}")
    print(f"{len(found)} symptoms quote no release's code and are not marked external")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
