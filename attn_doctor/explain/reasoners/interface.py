"""What a reasoner is given and what it answers (one Protocol, so mypy checks a new reasoner).

Rules are the best answer where one matches; a reasoner answers from the other evidence: where the
error is raised in the releases' own code (the catalogue), the traceback's frames, the facts the log
and the target state, and the release facts. Each answer says who raised the error, under which
condition, what the facts say of it and what to do, computed from the releases, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from attn_doctor.explain.origins import Origin
from attn_doctor.facts.log_facts import LogFacts
from attn_doctor.facts.log_frames import Frame
from attn_doctor.facts.model import Environment
from attn_doctor.releases.messages import Catalogue

# what a reasoned cause is: the caller's own mistake, a missing or mismatched install, or a
# release's behaviour (a bug, a limit or a change between releases)
KINDS = ("usage", "install", "release")


@dataclass(frozen=True)
class Evidence:
    origins: list[Origin]  # the log's error lines the catalogue traces, in log order
    facts: LogFacts  # what the log states (versions, GPUs, frames)
    environment: Environment  # the stack: the log's facts over the target's
    catalogue: Catalogue
    last_error: int | None  # the line of the log's last error: what the run died of
    explained: frozenset[int] = frozenset()  # lines a fitting rule already explains
    lines: tuple[tuple[int, str], ...] = ()  # the log's error and warning lines and its last lines

    @property
    def frames(self) -> list[Frame]:
        return self.facts.frames


@dataclass(frozen=True)
class Reasoned:
    """A cause no rule names, reasoned from the evidence."""

    id: str  # "origin:<catalogue id>" or "<reasoner>:<subject>": stable across runs
    kind: str  # one of KINDS
    title: str  # one line: what happened, in the log's terms
    raised_by: str  # "transformers (modeling_utils.py, PreTrainedModel._check_and_enable_flash_attn_2)"
    condition: str  # the guard in plain words, or "" where the catalogue has none
    facts: tuple[str, ...]  # what the log and the stack say about the condition's operands
    fix: str  # computed from the releases
    line: int  # the log line it explains
    text: str  # that line
    reasoner: str  # which reasoner answered
    evidence: tuple[str, ...] = field(default=())  # why this entry and not another (frames, versions)

    @property
    def summary(self) -> str:
        return " ".join([self.title, self.condition, *self.facts, self.fix])


class Reasoner(Protocol):
    """A source of causes besides the rules."""

    name: str

    def reason(self, evidence: Evidence) -> list[Reasoned]:
        """The causes this reasoner finds, most likely first; [] where it has nothing to say."""
        ...
