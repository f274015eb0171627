"""Wall time of `attn-doctor repro --all`, cold (an empty TRITON_CACHE_DIR) and warm.

Targets on one H100: cold <= 30 s, warm <= 10 s. Every run must also give the expected verdicts.

    python benchmarks/repro_wall_time.py --warm-runs 3 [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGETS_S = {"cold": 30.0, "warm": 10.0}


def run_all(cache_dir: str, device: str) -> tuple[float, int, int]:
    """Seconds, cases, and cases whose verdict was not the expected one."""
    env = {**os.environ, "TRITON_CACHE_DIR": cache_dir}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "attn_doctor", "repro", "--all", "--device", device, "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - start
    results = json.loads(done.stdout)["results"]
    return elapsed, len(results), sum(not r["as_expected"] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        cold = run_all(cache, args.device)
        warm = [run_all(cache, args.device) for _ in range(args.warm_runs)]
    print(f"{'run':<6} {'wall s':>8} {'cases':>6} {'unexpected':>11} {'target s':>9}")
    print(f"{'cold':<6} {cold[0]:>8.2f} {cold[1]:>6} {cold[2]:>11} {TARGETS_S['cold']:>9.0f}")
    median = statistics.median(w[0] for w in warm)
    print(
        f"{'warm':<6} {median:>8.2f} {warm[0][1]:>6} {sum(w[2] for w in warm):>11} {TARGETS_S['warm']:>9.0f}"
        f"   (median of {len(warm)})"
    )


if __name__ == "__main__":
    main()
