"""Wall time of `attn-doctor check --probe` as a ratio to `python -c "import torch, transformers"`
measured in the same run, and where it goes.

Targets: <= 1.5x on one H100 (issue 16) and on the 2-core CPU machine (issue 36; 1.6x before),
with the newest transformers. Run it with the interpreter of the venv whose libraries are probed
(the doctor runs from this checkout):

    /path/to/venv/bin/python benchmarks/probe_wall_time.py --runs 5

Then the parts: the fork server's imports, each probe's child (from its start to its verdict),
and the same command with fresh processes (ATTN_DOCTOR_FORK=0) for comparison.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys

from import_floor import HEADER, floor_command, machine, median_seconds, row, timed

TARGETS = {"gpu": 1.5, "cpu": 1.5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (after a warm-up)")
    runs = max(parser.parse_args().runs, 1)
    command = [sys.executable, "-m", "attn_doctor", "check", "--probe", "-v"]
    floor_cmd = floor_command("torch", "transformers")
    timed(command)  # warm-up: page cache, .pyc files
    floor = median_seconds(floor_cmd, runs)
    forked = [timed(command) for _ in range(runs)]
    fresh = [timed(command, {"ATTN_DOCTOR_FORK": "0"}) for _ in range(runs)]
    forked_s = statistics.median(run.seconds for run in forked)
    fresh_s = statistics.median(run.seconds for run in fresh)
    target = TARGETS["gpu" if shutil.which("nvidia-smi") else "cpu"]
    print(f"check --probe; {machine()}; {runs} runs each (medians)")
    print(HEADER)
    print(row("python -c 'import torch, transformers'", floor, floor))
    print(row("check --probe", forked_s, floor, target))
    print(row("check --probe, fresh processes (ATTN_DOCTOR_FORK=0)", fresh_s, floor))
    print(f"\n{forked[0].launchers.get('probes', 'unknown')}")
    print(f"{'probe':<40} {'forked s':>8} {'fresh s':>8}")
    for label in forked[0].children:
        one = statistics.median(run.children.get(label, 0.0) for run in forked)
        other = statistics.median(run.children.get(label, 0.0) for run in fresh)
        print(f"{label:<40} {one:>8.2f} {other:>8.2f}")


if __name__ == "__main__":
    main()
