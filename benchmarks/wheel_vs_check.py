"""Wall time of `attn-doctor wheel` against `attn-doctor check` on the same declared targets.

Each target is a requirements file, a Python and a GPU (a CPU CI runner planning a deployment);
the commands alternate (a warm-up each, then --runs of each) in an empty folder (no project to
scan). `wheel` plans every package it has a planner for. Target: `wheel` at most 2x `check`.

    python benchmarks/wheel_vs_check.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from check_vs_collect_env import wall_time  # benchmarks/ is on sys.path when run as a script

TARGET_RATIO = 2.0
TARGETS = {  # name: (pins, python, GPU)
    "torch 2.6.0+cu124, H100": ("torch==2.6.0+cu124\nflash-attn==2.6.3\n", "3.11", "H100"),
    "torch 2.9.1+cu130, RTX 5090": ("torch==2.9.1+cu130\nflash-attn==2.8.3\n", "3.12", "RTX 5090"),
    "torch 2.6.0+cu126, B200": ("torch==2.6.0+cu126\ntriton==3.2.0\n", "3.11", "B200"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each (after a warm-up)")
    runs = max(parser.parse_args().runs, 3)
    from attn_doctor.planner.registry import PLANNERS

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env |= {"NO_COLOR": "1", "ATTN_DOCTOR_CACHE": str(folder / "cache")}
        base = [sys.executable, "-m", "attn_doctor"]
        commands = {}
        for name, (pins, python, gpu) in TARGETS.items():
            requirements = folder / f"{len(commands)}.txt"
            requirements.write_text(pins)
            target = ["-r", str(requirements), "--python", python, "--gpu", gpu]
            commands[f"check   {name}"] = [*base, "check", *target]
            commands[f"wheel   {name}"] = [*base, "wheel", *PLANNERS, *target]
        times: dict[str, list[float]] = {name: [] for name in commands}
        for command in commands.values():
            wall_time(command, folder, env)  # warm-up: page cache, .pyc files, the rules cache
        for _ in range(runs):
            for name, command in commands.items():
                times[name].append(wall_time(command, folder, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{runs} runs of each, alternating; wheel plans {', '.join(PLANNERS)}")
    print(f"{'command':<40} {'median s':>9} {'min s':>7} {'max s':>7} {'/check':>7}")
    worst = 0.0
    for name, values in times.items():
        check = medians["check " + name.removeprefix("wheel ").removeprefix("check ")]
        ratio = medians[name] / check
        worst = max(worst, ratio) if name.startswith("wheel") else worst
        print(f"{name:<40} {medians[name]:>9.3f} {min(values):>7.3f} {max(values):>7.3f} {ratio:>6.2f}x")
    verdict = "meets" if worst <= TARGET_RATIO else "misses"
    print(f"largest wheel/check ratio: {worst:.2f}x ({verdict} the {TARGET_RATIO:.0f}x target)")


if __name__ == "__main__":
    main()
