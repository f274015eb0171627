"""How long `attn-doctor fix` takes on README-like stacks, and how many combinations it matches.

Each case is the README's `fix` example or a requirements file of the kind the README shows
(torch, transformers, flash-attn, with xformers, triton or flash-linear-attention), on a T4 or an
H100, with the Gemma-2 seed's features (flash_attention_2, generate, sliding_window, softcap,
alibi, torch_compile) or every feature, in a project whose code runs Gemma-2
(tests/fixtures/projects/gemma2-generate: the Gemma-2 rules need the family). Issue 23's
target: the slowest at most 2 s of wall time on a 2-core machine, for the text report a person
reads on a terminal (`fix` without -v).

Columns: the combinations matched in full (`search.evaluated` of the JSON report), then the
median over --runs fresh processes of the text report's wall and CPU seconds (user + system, from
wait4) and the JSON report's wall seconds (JSON always lists the rejected versions, which the
text report shows only with -v). --tree measures another checkout (the code before a change):

    python benchmarks/fix_search.py --runs 5
    python benchmarks/fix_search.py --runs 1 --tree /path/to/old/checkout
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
from pathlib import Path

from import_floor import REPO, machine

GEMMA2_PROJECT = REPO / "tests" / "fixtures" / "projects" / "gemma2-generate"
SEED = ("flash_attention_2", "generate", "sliding_window", "softcap", "alibi", "torch_compile")
EVERY = (
    *SEED,
    *("flex_attention", "xformers", "sdpa", "varlen", "backward", "fp8", "head_dim_256"),
    *("attention_mask_4d", "packed_sequences", "rotary_embedding", "dropout"),
)
REQUIREMENTS = {
    "seed": "torch==2.5.1\ntransformers==4.44.0\nflash-attn==2.3.6\n",
    "xformers": "torch==2.7.0\nxformers==0.0.29.post3\ntransformers==4.44.0\nflash-attn==2.6.3\n",
    "triton": "torch==2.7.0\ntriton==3.4.0\ntransformers==4.46.0\nflash-attn==2.7.4\n",
    "fla": "torch==2.5.1\ntransformers==4.44.0\nflash-attn==2.6.3\nflash-linear-attention==0.1.2\n",
}
# (case, the file, --gpu, features, --fail-on); None: the README's own example (--pin on this machine)
CASES: list[tuple[str, str | None, str, tuple[str, ...], str]] = [
    ("README example (sm_80, --pin)", None, "sm_80", SEED[:5], "error"),
    ("-r seed, T4", "seed", "T4", SEED, "error"),
    ("-r xformers, T4", "xformers", "T4", SEED, "error"),
    ("-r triton, T4", "triton", "T4", SEED, "error"),
    ("-r fla, T4", "fla", "T4", SEED, "error"),
    ("-r fla, H100, every feature, warning", "fla", "H100", EVERY, "warning"),
]


def arguments(folder: Path, name: str | None, gpu: str, features: tuple[str, ...], fail_on: str) -> list[str]:
    if name is None:
        target = ["--pin", "transformers==4.44.0", "--pin", "flash-attn==2.3.6"]
    else:
        path = folder / f"{name}.txt"
        path.write_text(REQUIREMENTS[name])
        target = ["-r", str(path)]
    chosen = [arg for feature in features for arg in ("--feature", feature)]
    return ["--project", str(GEMMA2_PROJECT), *target, "--gpu", gpu, *chosen, "--fail-on", fail_on]


def measured(tree: Path, args: list[str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system) and stdout of `attn-doctor fix ARGS` in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("COLUMNS", None)
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "attn_doctor", "fix", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tree,
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):
        raise SystemExit(f"fix {' '.join(args)} exited {process.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, output.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    args = parser.parse_args()
    tree = args.tree.resolve()
    print(f"attn-doctor fix on README-like stacks: {tree}, {machine()}, median of {args.runs}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'case':<40} {'combinations':>12} {'text wall s':>11} {'text CPU s':>10} {'json wall s':>11}")
    measured(tree, ["--help"])  # warm-up: page cache, .pyc files
    with tempfile.TemporaryDirectory() as folder:
        for case, name, gpu, features, fail_on in CASES:
            fix = arguments(Path(folder), name, gpu, features, fail_on)
            text = [measured(tree, fix) for _ in range(args.runs)]
            as_json = [measured(tree, [*fix, "--format", "json"]) for _ in range(args.runs)]
            evaluated = json.loads(as_json[0][2])["search"]["evaluated"]
            print(
                f"{case:<40} {evaluated:>12,} {statistics.median(r[0] for r in text):>11.2f} "
                f"{statistics.median(r[1] for r in text):>10.2f} "
                f"{statistics.median(r[0] for r in as_json):>11.2f}",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
