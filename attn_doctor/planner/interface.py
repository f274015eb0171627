"""What a planner is: the package it answers for, and a plan for one target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from attn_doctor.facts.model import Environment
from attn_doctor.releases.facts import ReleaseFacts


@dataclass(frozen=True)
class WayOut:
    """One complete alternative when nothing fits as the stack stands."""

    title: str  # "install torch 2.8 (CUDA 12.8), which flash-attn 2.8.3.post1 has a wheel for"
    commands: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Plan:
    package: str
    command: str | None  # the one command that fits; None when none does
    why: str  # why that command, or why nothing fits
    url: str | None = None  # a wheel's direct URL where it is not on the registry
    ways_out: tuple[WayOut, ...] = field(default_factory=tuple)


class Planner(Protocol):
    package: str

    def plan(self, env: Environment, facts: ReleaseFacts) -> Plan: ...
