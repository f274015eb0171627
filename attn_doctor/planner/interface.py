"""What a planner is: the package it answers for, and a plan for one target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # a rule's schema reads PLANNED: loading the rules needs no release facts
    from attn_doctor.facts.model import Environment
    from attn_doctor.releases.facts import ReleaseFacts

# the packages a planner answers for (planner/registry.py registers one each); a rule's
# `[fix] plan` names one of them
PLANNED = ("torch", "triton", "flash-attn", "flash-attn-3", "xformers", "flash-linear-attention")


@dataclass(frozen=True)
class WayOut:
    """One complete alternative when nothing fits as the stack stands."""

    title: str  # "install torch 2.8 (CUDA 12.8), which flash-attn 2.8.3.post1 has a wheel for"
    commands: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Plan:
    package: str
    version: str | None  # the release the command installs
    command: str | None  # the one command that fits; None when none does
    why: str  # why that command, or why nothing fits
    url: str | None = None  # a wheel's direct URL where it is not on the registry
    # the line for a requirements file: "flash-attn @ URL", "torch==2.7.1+cu128"
    requirement: str | None = None
    index: str | None = None  # the package index it comes from, when not PyPI
    ways_out: tuple[WayOut, ...] = field(default_factory=tuple)


class Planner(Protocol):
    package: str  # the distribution's name, as `attn-doctor wheel` takes it

    def plan(self, env: Environment, facts: ReleaseFacts, version: str | None = None) -> Plan:
        """The command that fits ``env``: of release ``version`` when given (``fix`` chose it),
        else of the release the planner finds best."""
        ...
