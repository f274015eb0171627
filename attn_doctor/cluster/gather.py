"""Move every rank's member to rank 0 through torch.distributed's TCP store.

No collective: a rank that crashed or hangs at start never joins an all-gather, which would hang
every other rank until the job's timeout. Each rank writes its member under its own key; rank 0
waits for the keys up to a deadline and names the ranks that never wrote. Works under torchrun
(its agent hosts the store) and under srun or any launcher that sets RANK/WORLD_SIZE-style
variables (rank 0 hosts the store). No GPU communication, no NCCL.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from attn_doctor.errors import InputError

DEFAULT_PORT = 29517
_PREFIX = "attn-doctor/members/"
MAX_WORLD_SIZE = 1 << 20  # ranks; the largest jobs run a few hundred thousand


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun: its agent already hosts a store at MASTER_ADDR:MASTER_PORT


def launch_from_environment(env: dict[str, str] | None = None) -> Launch:
    """Where this process sits in the job, from torchrun's or SLURM's variables."""
    env = dict(os.environ) if env is None else env
    rank = _integer(env, "RANK", "SLURM_PROCID")
    world_size = _integer(env, "WORLD_SIZE", "SLURM_NTASKS", most=MAX_WORLD_SIZE)
    if not 0 <= rank < world_size:
        raise InputError("--distributed", f"rank {rank} is outside a world of {world_size}")
    master_addr = env.get("MASTER_ADDR") or _first_slurm_host(env)
    return Launch(
        rank=rank,
        world_size=world_size,
        master_addr=master_addr,
        master_port=_integer(env, "MASTER_PORT", default=DEFAULT_PORT, most=65535),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
    )


def gather(
    member: dict[str, Any], launch: Launch, timeout_s: float
) -> tuple[list[dict[str, Any]], list[int]]:
    """On rank 0: every member that arrived within ``timeout_s`` and the ranks that did not.
    On the other ranks: ([], []) once their own member is written."""
    from datetime import timedelta

    # c10d logs a failed connection itself on stderr; the one-line error below says it once
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    hosting = launch.rank == 0 and not launch.agent_store
    try:
        store = TCPStore(
            launch.master_addr,
            launch.master_port,
            is_master=hosting,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except (RuntimeError, OSError) as exc:  # DistStoreError is a RuntimeError
        where = f"{launch.master_addr}:{launch.master_port}"
        raise InputError(
            "--distributed", f"rank {launch.rank}: no store at {where}: {_first_line(exc)}"
        ) from None
    store.set(f"{_PREFIX}{launch.rank}", json.dumps(member))
    if launch.rank != 0:
        return [], []
    return _collect(store, launch.world_size, time.monotonic() + timeout_s)


def _collect(store: Any, world_size: int, deadline: float) -> tuple[list[dict[str, Any]], list[int]]:
    arrived: dict[int, dict[str, Any]] = {}
    while len(arrived) < world_size:
        for rank in range(world_size):
            key = f"{_PREFIX}{rank}"
            if rank not in arrived and store.check([key]):
                arrived[rank] = json.loads(store.get(key))
        if len(arrived) == world_size or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    missing = [rank for rank in range(world_size) if rank not in arrived]
    return [arrived[rank] for rank in sorted(arrived)], missing


def _integer(env: dict[str, str], *names: str, default: int | None = None, most: int | None = None) -> int:
    """The first of ``names`` set, as an integer of at most ``most`` (a port fits 16 bits; rank 0
    polls every rank of the world, so a world of 10**12 would never finish)."""
    for name in names:
        if name in env:
            try:
                value = int(env[name])
            except ValueError:
                raise InputError(name, f"{env[name][:40]!r} is not an integer") from None
            if most is not None and not 0 < value <= most:
                raise InputError(name, f"{value} is not between 1 and {most:,}")
            return value
    if default is not None:
        return default
    raise InputError("--distributed", f"none of {', '.join(names)} is set: start it with torchrun or srun")


def _first_slurm_host(env: dict[str, str]) -> str:
    """SLURM names the nodes, not the address of rank 0; `scontrol` expands the node list."""
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodes:
        raise InputError("--distributed", "MASTER_ADDR is not set (and no SLURM node list to take it from)")
    try:
        done = subprocess.run(
            ["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout.split()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        raise InputError("MASTER_ADDR", f"not set, and `scontrol show hostnames {nodes}` failed") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
