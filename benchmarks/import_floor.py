"""What the wall-time benchmarks share: timing a command, the import floor it is compared with,
and the `-v` lines in which the doctor says where the time went.

The floor is measured in the same run as the command it judges, so a slow or busy machine moves
both: targets are ratios, not seconds.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FINISHED = re.compile(r"^(?P<label>.+): (?P<outcome>[^:]+) \((?P<seconds>[0-9.]+) s\)$")
STARTED_CHILDREN = re.compile(r"^(?P<what>\w+): (?P<how>.+?)(?: in (?P<seconds>[0-9.]+) s)?$")


@dataclass
class Timed:
    seconds: float
    stdout: str
    children: dict[str, float] = field(default_factory=dict)  # label -> wall s, from -v
    launchers: dict[str, str] = field(default_factory=dict)  # "repro"/"probes" -> how they started


def timed(command: list[str], env: dict[str, str] | None = None) -> Timed:
    """Run ``command`` (a doctor command gets -v lines on stderr) and read what it said."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", **(env or {})}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    result = Timed(time.perf_counter() - start, done.stdout)
    for line in done.stderr.splitlines():
        if (found := FINISHED.match(line)) is not None:
            result.children[found["label"]] = float(found["seconds"])
        elif line.startswith(("repro: ", "probes: ")):
            what, _, how = line.partition(": ")
            result.launchers[what] = how
    return result


def median_seconds(command: list[str], runs: int, env: dict[str, str] | None = None) -> float:
    return statistics.median(timed(command, env).seconds for _ in range(runs))


def floor_command(*imports: str, cuda: bool = False) -> list[str]:
    code = f"import {', '.join(imports)}" + ("; torch.zeros(1, device='cuda')" if cuda else "")
    return [sys.executable, "-c", code]


def machine() -> str:
    return f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"


HEADER = f"{'what':<44} {'wall s':>8} {'x floor':>8} {'target':>7} {'unexpected':>11}"


def row(
    what: str, seconds: float, floor: float, target: float | None = None, unexpected: int | None = None
) -> str:
    """One line of the ratio table."""
    target_text = f"{target:.1f}" if target is not None else ""
    unexpected_text = str(unexpected) if unexpected is not None else ""
    return f"{what:<44} {seconds:>8.2f} {seconds / floor:>8.2f} {target_text:>7} {unexpected_text:>11}"
