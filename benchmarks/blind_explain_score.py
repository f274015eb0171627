"""How `attn-doctor explain` does on a blind batch of real reports it was never tuned on.

A batch is a folder of TOML files (benchmarks/blind/<date>/), one per upstream thread: the log the
reporter pasted, the versions the thread states, the cause a maintainer or the reporter confirmed,
and `expected`, fixed before explain was run: rule ids (`rules`: any of them names that cause) or,
where no rule states it, keyword groups (`keywords`: every group, `a|b` meaning either, must occur in
the cause's id, title or summary); a case that gives both is matched by either. Each log goes
through the real CLI, as a user would run it: `python -m attn_doctor explain LOG --format json
--no-scan` with the thread's versions as --pin (torch gets its CUDA build when the thread states
it), --gpu, --python and --platform. A case scores

  right            the first cause explain names is the expected one
  right-not-first  the expected cause is named, below another
  wrong            explain names causes, none of them the expected one
  none             "No known cause" (a cause explain names but rules out for the stack, verdict
                   not-affected, is no answer)

Explain's answers are the rules that fit, then the causes it reasons from the releases' own code
(the JSON's `reasoned`). A case of `kind = "usage"` (a user error) also counts as blamed when the
first answer is a stack bug (an affected rule not of kind usage, or a reasoned release cause).

    python benchmarks/blind_explain_score.py                     # the newest batch
    python benchmarks/blind_explain_score.py benchmarks/blind/2026-11-28 --misses
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from packaging.version import InvalidVersion, Version

from attn_doctor._compat import tomllib

ROOT = Path(__file__).resolve().parents[1]
BATCHES = ROOT / "benchmarks" / "blind"
NOT_PINS = {"python", "platform", "gpu", "torch_cuda", "cuda", "driver", "os", "image", "install"}
RESULTS = ("right", "right-not-first", "wrong", "none")


@dataclass(frozen=True)
class Outcome:
    """What explain said about one case and how it scores."""

    result: str
    first: str  # the first cause's id and verdict, or why there is none
    match_rank: int | None  # 1-based rank of the expected cause, when named
    blamed: bool = False  # a user error whose first answer blames the stack


def stated_pins(versions: dict[str, Any]) -> list[str]:
    """--pin NAME==VERSION for each package version the thread states (not "nightly", "main", ...)."""
    pins = []
    for name, value in versions.items():
        if name in NOT_PINS:
            continue
        try:
            Version(str(value))
        except InvalidVersion:
            continue
        version = str(value)
        cuda = str(versions.get("torch_cuda", ""))
        if name == "torch" and "+" not in version and cuda:
            version += "+cu" + cuda.replace(".", "")
        pins.append(f"{name}=={version}")
    return pins


def cli_args(case: dict[str, Any], log: Path) -> list[str]:
    """The explain command line for one case: its log and the stack its thread states."""
    versions = case.get("versions", {})
    args = [sys.executable, "-m", "attn_doctor", "explain", str(log), "--format", "json", "--no-scan"]
    for pin in stated_pins(versions):
        args += ["--pin", pin]
    for option in ("gpu", "python", "platform"):
        if versions.get(option):
            args += [f"--{option}", str(versions[option])]
    return args


def said(cause: dict[str, Any]) -> list[str]:
    """What explain tells the user of one cause: its id, title and summary, its fix and the facts
    that decided it ("LlamaFlashAttention2 ... removed in transformers 4.48.0")."""
    fix = cause.get("fix")
    reasons = [str(reason.get("text", "")) for reason in cause.get("reasons", [])]
    return [
        *(str(cause.get(field, "")) for field in ("id", "title", "summary")),
        str(fix.get("summary", "")) if isinstance(fix, dict) else str(fix or ""),
        *reasons,
    ]


def matches(cause: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Whether one cause explain named is the cause the thread confirmed: one of `rules`, or all of
    `keywords` (a case may give both; either then counts), in what explain says of it."""
    if cause["id"] in expected.get("rules", []):
        return True
    if "keywords" not in expected:
        return False
    text = " ".join(said(cause)).lower()
    return all(any(word.lower() in text for word in group.split("|")) for group in expected["keywords"])


def answers(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Explain's answers in its order: the rules that fit (or may), then the causes it reasoned
    from the releases' own code (issue 38), each with an id, title, summary, verdict and kind. A
    rule whose verdict is "not-affected" is one explain rules out for the stack, not an answer."""
    fitting = [cause for cause in document["causes"] if cause["verdict"] != "not-affected"]
    reasoned = [
        {
            "id": cause["id"],
            "title": cause["title"],
            "summary": " ".join([cause["condition"], *cause["facts"], cause["fix"], cause["raised_by"]]),
            "verdict": "reasoned",
            "kind": cause["kind"],
        }
        for cause in document.get("reasoned", [])
    ]
    return [*fitting, *reasoned]


def blames_the_stack(answer: dict[str, Any]) -> bool:
    """A user error's first answer calls a fault of the stack: a bug rule that fits, or a cause
    reasoned to be the release's own behaviour."""
    if answer["verdict"] == "reasoned":
        return answer["kind"] == "release"
    return answer["verdict"] == "affected" and answer.get("kind") != "usage"


def score(document: dict[str, Any], expected: dict[str, Any], kind: str = "stack") -> Outcome:
    """Right, right but not first, wrong or none, from explain's answers; for a user error
    (``kind = "usage"``), whether the first answer blames the stack."""
    ruled_out = [cause["id"] for cause in document["causes"] if cause["verdict"] == "not-affected"]
    causes = answers(document)
    if not causes:
        said = f"No known cause (ruled out: {', '.join(ruled_out)})" if ruled_out else "No known cause"
        return Outcome("none", said, None)
    first = f"{causes[0]['id']} ({causes[0]['verdict']})"
    blamed = kind == "usage" and blames_the_stack(causes[0])
    ranks = [rank for rank, cause in enumerate(causes, 1) if matches(cause, expected)]
    if not ranks:
        return Outcome("wrong", first, None, blamed)
    return Outcome("right" if ranks[0] == 1 else "right-not-first", first, ranks[0], blamed)


def run_case(case: dict[str, Any]) -> Outcome:
    """Run the CLI on one case's log; an input error or a crash is reported, never scored as none."""
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "error.log"
        log.write_text(case["log"], encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(cli_args(case, log), capture_output=True, text=True, env=env, cwd=scratch)
    if done.returncode not in (0, 1):
        fail(f"explain exited {done.returncode} on {case['url']}: {done.stderr.strip()}")
    return score(json.loads(done.stdout), case["expected"], case.get("kind", "stack"))


def expected_label(expected: dict[str, Any]) -> str:
    """The expected cause in a few words: its rule ids and/or its keywords."""
    parts = [" or ".join(expected["rules"])] if expected.get("rules") else []
    if expected.get("keywords"):
        parts.append("keywords: " + ", ".join(expected["keywords"]))
    return " or ".join(parts)


def fail(message: str) -> NoReturn:
    """Bad input or a broken CLI: one line on stderr, exit 2 (never a traceback, never a score)."""
    print(f"blind_explain_score: {message}", file=sys.stderr)
    raise SystemExit(2)


def load_case(path: Path) -> dict[str, Any]:
    """One case file, with the fields the scorer needs (url, log, expected rules or keywords)."""
    try:
        case: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        fail(f"{path}: not a readable case file ({error})")
    expected = case.get("expected")
    if not isinstance(case.get("url"), str) or not isinstance(case.get("log"), str):
        fail(f"{path}: a case needs a url and a log")
    if not isinstance(expected, dict) or not (expected.get("rules") or expected.get("keywords")):
        fail(f"{path}: a case needs [expected] rules or keywords")
    return case


def fit(line: str, indent: int) -> str:
    """One output line wrapped to 80 columns (ids and paths are never broken)."""
    return textwrap.fill(
        line, width=80, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False
    )


def newest_batch() -> Path:
    """The batch folder with the latest date name."""
    batches = sorted(path for path in BATCHES.iterdir() if path.is_dir())
    if not batches:
        fail(f"no batch under {BATCHES}")
    return batches[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("batch", nargs="?", type=Path, help="a batch folder (default: the newest)")
    parser.add_argument("--misses", action="store_true", help="for each case not right first, what was said")
    options = parser.parse_args()
    folder = options.batch or newest_batch()
    files = sorted(folder.glob("*.toml"))
    if not files:
        fail(f"no case files in {folder}")
    totals: Counter[str] = Counter()
    misses = []
    cases = [(path, load_case(path)) for path in files]
    print("case\n  result           first cause explain names")
    outcomes = []
    for path, case in cases:
        outcome = run_case(case)
        outcomes.append(outcome)
        totals[outcome.result] += 1
        rank = f" [expected at #{outcome.match_rank}]" if outcome.result == "right-not-first" else ""
        print(path.stem)
        print(fit(f"  {outcome.result:<16} {outcome.first}{rank}", indent=19))
        if outcome.result != "right":
            expected = expected_label(case["expected"])
            misses.append(fit(f"{path.stem}: explain said {outcome.first}; expected {expected}", indent=2))
    print()
    blamed = sum(outcome.blamed for outcome in outcomes)
    print(f"{len(files)} cases: " + ", ".join(f"{totals[name]} {name}" for name in RESULTS))
    print(f"user errors blamed on the stack: {blamed} of {sum(c.get('kind') == 'usage' for _, c in cases)}")
    if options.misses:
        print("\n".join(["", *misses]))


if __name__ == "__main__":
    main()
