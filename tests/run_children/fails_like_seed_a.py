"""Prints seed A's real log (tests/logs/seed_a.log) as a failing training script would: progress
on stdout, the CUDA asserts and the traceback on stderr; exits 1."""

import sys
from pathlib import Path

log = (Path(__file__).resolve().parents[1] / "logs" / "seed_a.log").read_text()
first, _, rest = log.partition("\n")
print(first, flush=True)
sys.stderr.write(rest)
sys.exit(1)
