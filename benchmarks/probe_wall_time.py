"""Wall time of `attn-doctor check --probe`, and where it goes.

Run with the interpreter of the venv whose libraries are probed (the doctor from this checkout):

    /path/to/venv/bin/python benchmarks/probe_wall_time.py --runs 5

Prints the median of the whole command against the 10 s target, then the parts: the interpreter
alone, `import torch`, `import transformers`, and each probe's child on its own (probes run
concurrently inside `check --probe`, so the whole is less than the sum of the parts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from attn_doctor.probes.catalogue import PROBES  # noqa: E402

TARGET_S = 10.0


def wall_time(command: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (after a warm-up)")
    runs = max(parser.parse_args().runs, 3)
    python = sys.executable
    commands = {
        "check --probe": [python, "-m", "attn_doctor", "check", "--probe"],
        "check (no probes)": [python, "-m", "attn_doctor", "check"],
        "python -c pass": [python, "-c", "pass"],
        "import torch": [python, "-c", "import torch"],
        "import transformers": [python, "-c", "import torch, transformers"],
        **{f"probe {p.id}": [python, "-m", "attn_doctor.probes.child", p.module] for p in PROBES},
    }
    for command in commands.values():
        wall_time(command)  # warm-up: page cache, .pyc files
    medians = {name: statistics.median(wall_time(cmd) for _ in range(runs)) for name, cmd in commands.items()}
    print(f"python {sys.version.split()[0]} at {python}, {os.cpu_count()} CPUs, {runs} runs each")
    print(f"{'what':<40} {'median s':>9}")
    for name, seconds in medians.items():
        print(f"{name:<40} {seconds:>9.2f}")
    total = medians["check --probe"]
    verdict = "meets" if total <= TARGET_S else "misses"
    print(f"check --probe: {total:.2f} s ({verdict} the {TARGET_S:g} s target)")


if __name__ == "__main__":
    main()
