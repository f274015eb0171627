"""Wall time and throughput of `attn-doctor explain` on generated logs of about 100 MB.

Logs: a noisy training log (ANSI colours, CRLF, tqdm redraws with \\r, Chinese text, per-thread
CUDA asserts) that ends in seed A's crash; random binary junk; one 50 MB line with no line break;
an adversarial log whose every line is a 4 KiB near-miss for the regex symptoms (each line holds
their literal many times and never matches, the worst case for backtracking); and a log made only
of per-thread CUDA asserts (every line a match); and, with a user's rule whose symptom is at the
edge of the validation budget (`abcd[^x]*[^x]?[^x]?Q`), lines that make it backtrack under Python's
`re` (every line distinct: explain runs the patterns on RE2); an OSC flood (every line an escape
sequence `ESC ]` and 100 bytes that never ends it, issue 28); and 4 KiB lines that each hold a
symptom literal, then spaces and a distinct tail (the literal search's worst text, issue 28). Each
runs in its own process (`python -m attn_doctor explain`): median wall and CPU time (user + system
of the child) of --runs; on a shared machine the CPU time is the steadier number. Last, the cost
of the message catalogue: a pasted 10 KB traceback and the noisy log, each with and without it
(ATTN_DOCTOR_MESSAGE_CATALOGUE=""), and the ratio.

    python benchmarks/explain_throughput.py --mb 100 --runs 3
    python benchmarks/explain_throughput.py --mb 100 --runs 5 --only "training log"
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SEED_A_CRASH = (
    "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:144: operator(): block: [{b},0,0], "
    'thread: [{t},0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && "index out of bounds"` failed.\n'
)
SEED_A_STACK = (
    "Traceback (most recent call last):\n"
    '  File "generate.py", line 41, in <module>\n'
    "    outputs = model.generate(**inputs, max_new_tokens=64)\n"
    '  File "/opt/venv/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 1124, '
    "in flash_attn_varlen_func\n"
    "    return FlashAttnVarlenFunc.apply(\n"
    "RuntimeError: CUDA error: device-side assert triggered\n"
)
EXPLAIN = [sys.executable, "-m", "attn_doctor", "explain", "--pin", "transformers==4.44.0", "--gpu", "sm_90"]


def seed_a_tail(threads: int = 5000) -> str:
    """Seed A as a GPU prints it: one assert per thread, then the stack through flash_attn_varlen_func."""
    asserts = "".join(SEED_A_CRASH.format(b=i // 128, t=i % 128) for i in range(threads))
    return asserts + SEED_A_STACK


def _training_lines(rng: random.Random, step: int) -> str:
    loss = 2.5 / (1 + step / 5000) + rng.random() * 0.1
    redraws = "".join(
        f"\r{pct:3d}%|{'█' * (pct // 10):<10}| {pct * 50}/5000 "
        f"[00:{pct:02d}<01:40, {rng.uniform(1, 9):.2f}it/s]"
        for pct in range(0, 101, 20)
    )
    return (
        f"\x1b[32m{{'loss': {loss:.4f}, 'grad_norm': {rng.uniform(0.1, 4):.3f}, "
        f"'learning_rate': {rng.uniform(1e-6, 1e-4):.2e}, 'epoch': {step / 10000:.2f}}}\x1b[0m\r\n"
        f"第 {step} 步：训练损失 {loss:.4f}，显存占用 {rng.randint(20000, 80000)} MiB\n"
        f"[rank{rng.randint(0, 7)}]:[W{step % 1000:03d}] flash_attn_2_cuda kernel varlen_fwd took "
        f"{rng.uniform(1, 9):.3f} ms for seqlen {rng.randint(128, 8192)}\n"
        f"Training:{redraws}\n"
    )


def write_training_log(path: Path, megabytes: float, tail: str = "") -> int:
    """A noisy training log of about ``megabytes`` MB that ends with ``tail``; returns its size."""
    rng = random.Random(0)
    target, written, step = int(megabytes * 1e6), 0, 0
    with path.open("wb") as out:
        while written < target:
            block = "".join(_training_lines(rng, step + i) for i in range(500)).encode("utf-8")
            out.write(block)
            written, step = written + len(block), step + 500
        written += out.write(tail.encode("utf-8"))
    return written


def write_binary_junk(path: Path, megabytes: float) -> int:
    path.write_bytes(random.Random(1).randbytes(int(megabytes * 1e6)))
    return path.stat().st_size


def write_one_line(path: Path, megabytes: float) -> int:
    """No line break at all, seed A's assert at the very end (beyond the 4 KiB line cap)."""
    with path.open("wb") as out:
        for _ in range(int(megabytes)):
            out.write(b"a" * 1_000_000)
        out.write(SEED_A_CRASH.format(b=0, t=0).encode().rstrip(b"\n"))
    return path.stat().st_size


def write_adversarial(path: Path, megabytes: float) -> int:
    """4 KiB lines full of the regex symptoms' literals that never complete a match."""
    near_misses = [
        "FlashAttention backward for head dim ",
        "flash_attn_2_cuda ",
        'no suitable user-defined conversion from "PipelineParamsK"',
        "The NVIDIA driver on your system is too old (found version 11",
    ]
    lines = []
    for index, literal in enumerate(near_misses):
        line = (literal * (4096 // len(literal) + 1))[:4090]
        lines.append(f"{index:05d} {line}\n")
    with path.open("wb") as out:
        written, count = 0, 0
        while written < megabytes * 1e6:
            # every line distinct, so no remembered verdict helps
            text = "".join(f"{count + i:08d}{lines[(count + i) % 4][8:]}" for i in range(256))
            written += out.write(text.encode())
            count += 256
    return written


def write_asserts(path: Path, megabytes: float) -> int:
    """Seed A's per-thread assert on every line, each line different (block and thread numbers)."""
    line_bytes = len(SEED_A_CRASH.format(b=0, t=0))
    path.write_text(seed_a_tail(int(megabytes * 1e6 / line_bytes)))
    return path.stat().st_size


USER_RULE = """id = "edge-rule"
title = "a user's rule at the edge of the symptom budget"
severity = "error"
component = "torch"
summary = "benchmark"
symptoms = ['abcd[^x]*[^x]?[^x]?Q']
references = ["https://github.com/pytorch/pytorch/issues/1"]
[affects]
[fix]
summary = "none"
pins = []
"""


def write_numbered_lines(path: Path, megabytes: float, line: Callable[[int], str]) -> int:
    """About ``megabytes`` MB of ``line(0)``, ``line(1)``, ...: every line distinct, so no
    remembered verdict helps."""
    with path.open("wb") as out:
        written, count = 0, 0
        while written < megabytes * 1e6:
            written += out.write("".join(line(count + i) for i in range(256)).encode())
            count += 256
    return written


def write_backtracking(path: Path, megabytes: float) -> int:
    """Distinct 4 KiB lines that hold the user rule's literals in order and never match it."""
    return write_numbered_lines(path, megabytes, lambda n: "abcd" * 1020 + f"xQ{n}\n")


def write_osc_flood(path: Path, megabytes: float) -> int:
    """Every line an unterminated OSC escape: ``ESC ]`` and 100 bytes, no BEL or ST before its end."""
    return write_numbered_lines(path, megabytes, lambda n: f"\x1b]0;step {n:08d} {'title ' * 14}\n")


def write_long_after_literal(path: Path, megabytes: float) -> int:
    """A symptom's literal, 4 KiB of spaces and a distinct tail (past the 4 KiB line cap) a line."""
    return write_numbered_lines(path, megabytes, lambda n: f"type must be tuple of ints,{' ' * 4096}{n}\n")


LOGS: dict[str, Callable[[Path, float], int]] = {
    "training log + seed A": lambda p, mb: write_training_log(p, mb, seed_a_tail()),
    "binary junk": write_binary_junk,
    "one line, no line break": lambda p, mb: write_one_line(p, mb / 2),
    "adversarial near-misses": write_adversarial,
    "per-thread asserts only": write_asserts,
    "a user rule's backtracking lines (--rules)": write_backtracking,
    "OSC flood: every line an unterminated ESC ]": write_osc_flood,
    "a literal, then 4 KiB of spaces, each line": write_long_after_literal,
}


# warm, as an installed tool runs: pip writes bytecode at install, so a child that may not (the
# PYTHONDONTWRITEBYTECODE some CI images set) would time Python compiling attn_doctor instead
WARM = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall_time(log: Path, extra: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """One explain of ``log``: its wall time, its CPU time (user + system) and its exit code."""
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(
        [*EXPLAIN, str(log), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        env=env or WARM,
    )
    return time.perf_counter() - start, _children_cpu() - cpu, done.returncode


def write_traceback(path: Path, kilobytes: float = 10) -> int:
    """A pasted traceback of about 10 KB: frames through transformers, then 5.x's FA2 error."""
    frame = (
        '  File "/opt/venv/lib/python3.12/site-packages/transformers/modeling_utils.py", line {n}, in f{n}\n'
    )
    lines = ["Traceback (most recent call last):\n"]
    while sum(map(len, lines)) < kilobytes * 1000:
        lines.append(frame.format(n=len(lines)) + "    self._flash_attn_can_dispatch(flash_attn_version=2)\n")
    lines.append(
        "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
        "the package for FlashAttention2 doesn't seem to be installed.\n"
    )
    path.write_text("".join(lines))
    return path.stat().st_size


def catalogue_cost(folder: Path, runs: int, megabytes: float) -> None:
    """explain with the shipped message catalogue against explain without it, in the same run."""
    without = {**WARM, "ATTN_DOCTOR_MESSAGE_CATALOGUE": ""}
    print("\n| log | without catalogue | with catalogue | ratio |")
    print("| --- | --- | --- | --- |")
    for name, write in (
        ("pasted traceback (10 KB)", lambda path, _mb: write_traceback(path)),
        (f"noisy training log ({megabytes:.0f} MB)", write_training_log),
    ):
        log = folder / "catalogue.log"
        write(log, megabytes)
        wall_time(log, [])  # warm: the catalogue and the rules are read from a cold disk once
        base = statistics.median(wall_time(log, [], without)[0] for _ in range(runs))
        full = statistics.median(wall_time(log, [])[0] for _ in range(runs))
        print(f"| {name} | {base:.2f} s | {full:.2f} s | {full / base:.2f}x |")
        os.unlink(log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="size of each log in MB")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each")
    parser.add_argument("--only", help="only the logs whose name holds this text (no catalogue table)")
    args = parser.parse_args()
    print(f"| log | size | wall (median of {args.runs}) | CPU (median) | MB/s (wall) | exit |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        rules = Path(folder) / "edge-rule.toml"
        rules.write_text(USER_RULE)
        for name, write in LOGS.items():
            if args.only and args.only not in name:
                continue
            extra = ["--rules", str(rules)] if "--rules" in name else []
            log = Path(folder) / "log.txt"
            size = write(log, args.mb)
            runs = [wall_time(log, extra) for _ in range(args.runs)]
            wall = statistics.median(seconds for seconds, _, _ in runs)
            cpu = statistics.median(cpu for _, cpu, _ in runs)
            print(
                f"| {name} | {size / 1e6:.1f} MB | {wall:.2f} s | {cpu:.2f} s | {size / 1e6 / wall:.1f} "
                f"| {runs[-1][2]} |"
            )
            os.unlink(log)
        if not args.only:
            catalogue_cost(Path(folder), args.runs, args.mb)


if __name__ == "__main__":
    main()
