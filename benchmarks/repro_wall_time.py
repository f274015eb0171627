"""Wall time of `attn-doctor repro --all` as a ratio to the import floor of the same run.

Targets (issue 16): on one H100, warm <= 1.5x and cold (an empty TRITON_CACHE_DIR) <= 3x
`python -c "import torch, triton; torch.zeros(1, device='cuda')"`; on the CPU (Triton's
interpreter), warm <= 4x `python -c "import torch, triton"`. Every run must give the expected
verdicts. Then where the time goes: the fork server's imports, each case's child (from its start
to its verdict; a case that starts before the server is ready waits for it), and compilation
(a case's cold time minus its warm time).

    python benchmarks/repro_wall_time.py --warm-runs 3 [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile

from import_floor import HEADER, Timed, floor_command, machine, median_seconds, row, timed

TARGETS = {"cuda": {"cold": 3.0, "warm": 1.5}, "cpu": {"cold": 4.0, "warm": 4.0}}


def run_all(cache_dir: str, device: str, fork: bool = True) -> tuple[Timed, int]:
    """The run, and how many cases did not give the expected verdict."""
    command = [
        sys.executable,
        "-m",
        "attn_doctor",
        "repro",
        "--all",
        "--device",
        device,
        "--format",
        "json",
        "-v",
    ]
    env = {"TRITON_CACHE_DIR": cache_dir, "ATTN_DOCTOR_FORK": "1" if fork else "0"}
    run = timed(command, env)
    return run, sum(not row["as_expected"] for row in json.loads(run.stdout)["results"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    runs = max(args.warm_runs, 1)
    floor = median_seconds(floor_command("torch", "triton", cuda=args.device == "cuda"), runs)
    with tempfile.TemporaryDirectory() as cache:
        cold, cold_unexpected = run_all(cache, args.device)
        warm = [run_all(cache, args.device) for _ in range(runs)]
        fresh, fresh_unexpected = run_all(cache, args.device, fork=False)
    warm_s = statistics.median(run.seconds for run, _ in warm)
    targets = TARGETS[args.device]
    floor_code = floor_command("torch", "triton", cuda=args.device == "cuda")[2]
    print(f"repro --all --device {args.device}; {machine()}; floor: python -c {floor_code!r}")
    print(HEADER)
    print(row("import floor", floor, floor))
    print(row("cold", cold.seconds, floor, targets["cold"], cold_unexpected))
    warm_unexpected = sum(unexpected for _, unexpected in warm)
    print(row(f"warm (median of {runs})", warm_s, floor, targets["warm"], warm_unexpected))
    print(row("warm, fresh processes (ATTN_DOCTOR_FORK=0)", fresh.seconds, floor, None, fresh_unexpected))
    print(f"\n{warm[0][0].launchers.get('repro', 'unknown')}")
    print(f"{'case':<44} {'cold s':>7} {'warm s':>7} {'compile s':>9} {'fresh s':>8}")
    for label, cold_s in cold.children.items():
        warm_case = statistics.median(run.children.get(label, 0.0) for run, _ in warm)
        fresh_s = fresh.children.get(label, 0.0)
        print(
            f"{label:<44} {cold_s:>7.2f} {warm_case:>7.2f} {max(cold_s - warm_case, 0):>9.2f} {fresh_s:>8.2f}"
        )


if __name__ == "__main__":
    main()
