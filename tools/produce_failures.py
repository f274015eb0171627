"""Run every program of tests/cases/produced/, each in its own process, and keep what it printed.

On the device machine (a GPU, today's releases): each program makes one everyday failure happen;
its combined output and exit code, the machine's facts (attn-doctor's probe, as JSON) and
``pip freeze`` go to one JSON file, from which the case files are written.

    python tools/produce_failures.py --out "$OUT"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parents[1] / "tests" / "cases" / "produced"
TIMEOUT_S = 240
_PROBE = "from attn_doctor.facts.probe import probe_environment as p; print(p([])[0].to_json())"


def run(program: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        done = subprocess.run(
            [sys.executable, str(program)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            cwd=PROGRAMS,
        )
    except subprocess.TimeoutExpired:
        return {"exit": None, "output": f"(no result within {TIMEOUT_S} s)"}
    return {"exit": done.returncode, "output": done.stdout + done.stderr}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from attn_doctor.facts.probe import probe_environment as p; print(p([])[0].to_json())",
        ],
        capture_output=True,
        text=True,
        cwd=PROGRAMS.parents[2],
    )
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True)
    results = {}
    for program in sorted(PROGRAMS.glob("*.py")):
        results[program.stem] = run(program)
        print(f"{program.stem}: exit {results[program.stem]['exit']}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    document = {"probe": probe.stdout or probe.stderr, "freeze": freeze.stdout, "results": results}
    (args.out / "produced.json").write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
