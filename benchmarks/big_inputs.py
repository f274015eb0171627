"""Wall and CPU time of `attn-doctor check` on big declared targets (issue 36: they must stay linear).

Inputs, generated in a temporary folder: a requirements file of --pins distinct valid pins
(``pkgI==A.B`` after the stack's torch 2.5.1, transformers 4.44.0 and flash-attn 2.6.3; 500,000
pins are about 8 MB); an env file (`probe --json`, tests/fixtures/healthy/h100-current.json) of
--gpus GPUs, H100s and A100s alternating (two kinds; 200,000 GPUs are about 16 MB, under the 16 MiB
cap on input files); and the same with every GPU named differently (as many kinds as GPUs: the
worst case for matching, which judges each kind of GPU once). Each is checked in its own process
(`python -m attn_doctor check --no-scan`, in that folder), median of --runs; CPU time is the
child's user + system time. Target: each at most 5 s of wall time on the 2-core machine. Logs of
hundreds of MB are benchmarks/explain_throughput.py's (``--mb 515``).

    python benchmarks/big_inputs.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TARGET_S = 5.0
REPO = Path(__file__).resolve().parents[1]
STACK = "torch==2.5.1\ntransformers==4.44.0\nflash-attn==2.6.3\n"
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "580.159.04"}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "driver": "580.159.04"}


def requirements_file(folder: Path, pins: int) -> list[str]:
    path = folder / "requirements.txt"
    path.write_text(STACK + "".join(f"pkg{i}=={i % 100}.{i % 7}\n" for i in range(pins)))
    return ["-r", str(path)]


def env_file(folder: Path, gpus: list[dict[str, str]]) -> list[str]:
    document = json.loads((REPO / "tests" / "fixtures" / "healthy" / "h100-current.json").read_text())
    document["gpus"] = gpus
    path = folder / "env.json"
    path.write_text(json.dumps(document, separators=(",", ":")))
    return ["--env-file", str(path)]


def two_kinds(count: int) -> list[dict[str, str]]:
    return [(H100, A100)[i % 2] for i in range(count)]


def all_different(count: int) -> list[dict[str, str]]:
    return [{**gpu, "name": f"GPU {i}"} for i, gpu in enumerate(two_kinds(count))]


def timed(arguments: list[str], folder: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and exit code of one `check` in its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "attn_doctor", "check", "--no-scan", *arguments],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pins", type=int, default=500_000, help="pins in the requirements file")
    parser.add_argument("--gpus", type=int, default=200_000, help="GPUs in the env files")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each")
    options = parser.parse_args()
    pins, gpus = options.pins, options.gpus
    cases: dict[str, Callable[[Path], list[str]]] = {
        f"requirements file, {pins:,} pins": lambda folder: requirements_file(folder, pins),
        f"env file, {gpus:,} GPUs (2 kinds)": lambda folder: env_file(folder, two_kinds(gpus)),
        f"env file, {gpus:,} GPUs (all different)": lambda folder: env_file(folder, all_different(gpus)),
    }
    print(f"| input | size | wall (median of {options.runs}) | CPU | exit | target {TARGET_S:g} s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, write in cases.items():
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            arguments = write(folder)
            megabytes = Path(arguments[1]).stat().st_size / 1e6
            runs = [timed(arguments, folder) for _ in range(options.runs)]
            wall = statistics.median(run[0] for run in runs)
            cpu = statistics.median(run[1] for run in runs)
            verdict = "met" if wall <= TARGET_S else "missed"
            print(f"| {name} | {megabytes:.1f} MB | {wall:.2f} s | {cpu:.2f} s | {runs[-1][2]} | {verdict} |")


if __name__ == "__main__":
    main()
