"""Wall time of `attn-doctor check` against `python -m torch.utils.collect_env`.

Runs the two alternately in one process tree (a warm-up each, then --runs of each), prints both
medians and their ratio. Target: check at most 8% of collect_env's wall time.

    python benchmarks/check_vs_collect_env.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "attn-doctor check": [sys.executable, "-m", "attn_doctor", "check"],
    "torch collect_env": [sys.executable, "-m", "torch.utils.collect_env"],
}
TARGET_RATIO = 0.08


def wall_time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each (after a warm-up)")
    runs = max(parser.parse_args().runs, 5)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():
        wall_time(command)  # warm-up: page cache, .pyc files
    for _ in range(runs):
        for name, command in COMMANDS.items():
            times[name].append(wall_time(command))
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["attn-doctor check"] / medians["torch collect_env"]
    print(f"{'command':<20} {'runs':>4} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, values in times.items():
        print(f"{name:<20} {len(values):>4} {medians[name]:>9.3f} {min(values):>7.3f} {max(values):>7.3f}")
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(f"ratio check/collect_env: {ratio:.1%} ({verdict} the {TARGET_RATIO:.0%} target)")


if __name__ == "__main__":
    main()
