"""What `attn-doctor run -- CMD` costs: start-up, and the wrapper's CPU while the command runs.

Targets (issue 17): under 50 ms added to start-up (`run -- python -c pass` against
`python -c pass`, medians), and under 1% CPU for the wrapper while the command runs. CPU is
measured with wait4 on the wrapper (its rusage includes the command it reaped), minus the same
command's own rusage run alone, over the run's wall time. Two commands: one that prints N MiB as
fast as it can, to a pipe this script reads (as a log collector would) and to a file (as SLURM's
--output: the wrapper copies nothing then, and reads the end back after the command exits), and
one that prints nothing for a while.

    python benchmarks/run_overhead.py --runs 11 --flood-mib 1024 --quiet-s 120
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from import_floor import REPO, machine

FLOOD = "import sys\nblock = b'x' * 1023 + b'\\n'\nfor _ in range({n}): sys.stdout.buffer.write(block)"


def measured(command: list[str], to_file: bool = False) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the process and what it reaped)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryFile() as file:
        start = time.perf_counter()
        target = file if to_file else subprocess.PIPE
        process = subprocess.Popen(command, stdout=target, stderr=subprocess.DEVNULL, env=env)
        while process.stdout is not None and process.stdout.read(1 << 20):
            pass
        _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def medians(command: list[str], runs: int, to_file: bool = False) -> tuple[float, float]:
    results = [measured(command, to_file) for _ in range(runs)]
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def wrapped(command: list[str]) -> list[str]:
    return [sys.executable, "-m", "attn_doctor", "run", "--", *command]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--flood-mib", type=int, default=1024)
    parser.add_argument("--quiet-s", type=float, default=120.0)
    args = parser.parse_args()
    bare = [sys.executable, "-c", "pass"]
    for _ in range(2):  # warm-up: page cache, .pyc files
        measured(bare), measured(wrapped(bare))
    alone = statistics.median(measured(bare)[0] for _ in range(args.runs))
    around = statistics.median(measured(wrapped(bare))[0] for _ in range(args.runs))
    flood = [sys.executable, "-c", FLOOD.format(n=args.flood_mib * 1024)]
    flood_alone, flood_alone_cpu = medians(flood, 3)
    flood_wall, flood_cpu = medians(wrapped(flood), 3)
    file_alone, file_alone_cpu = medians(flood, 3, to_file=True)
    file_wall, file_cpu = medians(wrapped(flood), 3, to_file=True)
    quiet = [sys.executable, "-c", f"import time; time.sleep({args.quiet_s})"]
    _, quiet_alone_cpu = measured(quiet)
    quiet_wall, quiet_cpu = measured(wrapped(quiet))
    print(f"attn-doctor run overhead; {machine()}; start-up medians of {args.runs}")
    print(f"{'what':<46} {'wall s':>8} {'wrapper cpu s':>14} {'wrapper cpu %':>14} {'target':>8}")
    print(f"{'python -c pass':<46} {alone:>8.3f}")
    print(f"{'run -- python -c pass':<46} {around:>8.3f}")
    print(f"{'  added to start-up':<46} {around - alone:>8.3f} {'':>14} {'':>14} {'0.050 s':>8}")
    flood_extra = flood_cpu - flood_alone_cpu
    print(f"{f'print {args.flood_mib} MiB to a pipe, alone':<46} {flood_alone:>8.2f}")
    label = f"run -- print {args.flood_mib} MiB to a pipe"
    share = 100 * flood_extra / flood_wall
    print(f"{label:<46} {flood_wall:>8.2f} {flood_extra:>14.2f} {share:>13.1f}% {'1%':>8}")
    file_extra = file_cpu - file_alone_cpu
    print(f"{f'print {args.flood_mib} MiB to a file, alone':<46} {file_alone:>8.2f}")
    label = f"run -- print {args.flood_mib} MiB to a file"
    share = 100 * file_extra / file_wall
    print(f"{label:<46} {file_wall:>8.2f} {file_extra:>14.2f} {share:>13.1f}% {'1%':>8}")
    quiet_extra = quiet_cpu - quiet_alone_cpu
    label = f"run -- print nothing for {args.quiet_s:g} s"
    share = 100 * quiet_extra / quiet_wall
    print(f"{label:<46} {quiet_wall:>8.2f} {quiet_extra:>14.3f} {share:>13.3f}% {'1%':>8}")


if __name__ == "__main__":
    main()
