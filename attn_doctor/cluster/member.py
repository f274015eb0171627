"""One rank's (or one node's) contribution: its environment, and whether flash_attn imports there."""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

from attn_doctor.errors import InputError
from attn_doctor.facts.model import Environment
from attn_doctor.isolation import child_environment, last_line, run_child

IMPORT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Member:
    label: str  # "host:rank" in a distributed run, the file name in `merge`
    environment: Environment
    host: str | None = None
    rank: int | None = None
    flash_attn_import: str | None = (
        None  # "imports", "fails: ...", "hangs", "not installed"; None: not checked
    )

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "host": self.host,
            "rank": self.rank,
            "flash_attn_import": self.flash_attn_import,
            "environment": self.environment.to_json_dict(),
        }

    @classmethod
    def from_json_dict(cls, data: Any, source: str) -> Member:
        if not isinstance(data, dict) or not isinstance(data.get("label"), str):
            raise InputError(source, "not an attn-doctor cluster member")
        rank, status = data.get("rank"), data.get("flash_attn_import")
        return cls(
            label=data["label"],
            environment=Environment.from_json_dict(data.get("environment"), source),
            host=None if data.get("host") is None else str(data["host"]),
            rank=rank if isinstance(rank, int) else None,
            flash_attn_import=None if status is None else str(status),
        )


def this_rank(environment: Environment, rank: int) -> Member:
    host = socket.gethostname()
    return Member(f"{host}:{rank}", environment, host, rank, flash_attn_import())


def flash_attn_import(timeout_s: float = IMPORT_TIMEOUT_S) -> str:
    """Whether ``import flash_attn`` works here, tried in a child: a binary built for another torch
    fails with an undefined symbol, and a broken one may crash or hang the importer."""
    if find_spec("flash_attn") is None:
        return "not installed"
    output = run_child([sys.executable, "-c", "import flash_attn"], child_environment(), timeout_s)
    if output.timed_out:
        return f"hangs (no result within {timeout_s:g} s)"
    if output.returncode == 0:
        return "imports"
    return f"fails: {last_line(output.stderr) or f'exit code {output.returncode}'}"
