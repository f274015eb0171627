"""Drive the real CLI with hostile inputs of every kind and print what happened, per input kind.

    python benchmarks/fuzz_inputs.py --n 10000 [--seed 1] [--workers N] [--timeout 5]

Each run is `python -m attn_doctor ...` in a subprocess, in an empty folder holding the case's
files (tests/hostile_inputs.py generates them). The table shows, per kind: the exit-code
distribution, crashes (exit 3, an "internal error" line or a traceback), runs killed at the
timeout, and the slowest run; then the command of every crash and of the slowest runs. The target:
zero crashes and no run over 5 s. CI runs 20 cases of each kind (tests/test_fuzz.py).

Kinds: every reader (requirements and lock files, env files, pins, GPUs, features, rule files,
pyproject, logs, site-packages, repro JSON, numeric options) and the classes a fuzz run once found
broken: version-like strings with extra components in every numeric field (`odd-versions`),
extreme floats and integers for every numeric option (`extreme-numbers`), escape-sequence floods
(`escape-flood`), long lines next to every symptom literal (`long-literal`), merges of up to 1,000
env files (`many-files`).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostile_inputs import GENERATORS, Outcome, run_case  # noqa: E402


def cases(n: int, seed: int) -> list:
    rng = random.Random(seed)
    kinds = list(GENERATORS)
    return [GENERATORS[kinds[i % len(kinds)]](rng) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=5.0)
    options = parser.parse_args()
    todo = cases(options.n, options.seed)
    with ThreadPoolExecutor(options.workers) as pool:
        outcomes: list[Outcome] = list(pool.map(lambda case: run_case(case, options.timeout), todo))
    by_kind: dict[str, list[Outcome]] = collections.defaultdict(list)
    for outcome in outcomes:
        by_kind[outcome.kind].append(outcome)
    print(f"{'kind':<14} {'runs':>6}  {'exit codes':<28} {'crashes':>7} {'hangs':>6} {'slowest':>8}")
    for kind, runs in sorted(by_kind.items()):
        codes = collections.Counter("hang" if r.code is None else str(r.code) for r in runs)
        spread = " ".join(f"{code}:{count}" for code, count in sorted(codes.items()))
        print(
            f"{kind:<14} {len(runs):>6}  {spread:<28} {sum(r.crashed for r in runs):>7} "
            f"{codes.get('hang', 0):>6} {max(r.seconds for r in runs):>7.2f}s"
        )
    crashes = [r for r in outcomes if r.crashed or r.code is None]
    print(
        f"\n{len(outcomes)} runs, {options.workers} workers: {sum(r.crashed for r in outcomes)} crashes, "
        f"{sum(r.code is None for r in outcomes)} over {options.timeout:g} s"
    )
    for outcome in crashes[:20]:
        print(f"  {'HANG' if outcome.code is None else 'CRASH'} ({outcome.code}): {_shown(outcome.args)}")
        print(f"      {outcome.message}")
    for outcome in sorted(outcomes, key=lambda r: -r.seconds)[:3]:
        print(f"  slow {outcome.seconds:.2f}s: {_shown(outcome.args)}")


def _shown(args: list[str]) -> str:
    text = " ".join(args)
    return text if len(text) < 160 else text[:157] + "..."


if __name__ == "__main__":
    main()
