"""How often `explain` names the real cause of a real report (tests/cases/, one TOML per report).

Each case's error text, as the reporter pasted it, is explained on the stack the reporter stated
(their versions as a requirements target, their Python and GPU where given, no project scan).
Prints top-1 and top-3 accuracy per package family, and the false blame count: user errors
(`usage`) and reports with no stack cause (`none`) on which explain puts a stack bug it calls
affected first. A user error is named right when a `kind = "usage"` rule ranks first or no bug is
blamed.

A case may carry `batch = "NAME"` (cases added together, e.g. from today's releases): each batch is
also scored apart (top-1, top-3, false blame), after the whole corpus and the cases without a batch.
An `expected` of the form `new:<id>` names a family no rule covers yet: it is scored as a miss (and
`new:usage-...`, a user error no rule knows, as false blame when a stack bug is called affected first).

    python benchmarks/explain_accuracy.py                 # the tables
    python benchmarks/explain_accuracy.py --misses        # also each case whose cause was not first
    python benchmarks/explain_accuracy.py --batch NAME    # only the cases of one batch
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from attn_doctor._compat import tomllib
from attn_doctor.config import Config
from attn_doctor.engine.matcher import Verdict, is_version
from attn_doctor.errors import InputError
from attn_doctor.explain import explain
from attn_doctor.facts.assemble import EnvironmentInputs
from attn_doctor.facts.gpus import target_gpu

CASES = Path(__file__).resolve().parents[1] / "tests" / "cases"
NOT_PACKAGES = {"python", "cuda", "driver", "nvcc"}


def stack(case: dict[str, Any], folder: Path) -> EnvironmentInputs:
    """The reporter's stated versions as a declared target."""
    versions = {k: str(v) for k, v in case.get("versions", {}).items() if str(v)}
    lines = []
    for name, version in versions.items():
        if name in NOT_PACKAGES:
            continue
        if not is_version(version):  # "nightly", "latest": what the reporter said, not a pin
            continue
        if name == "torch" and "+" not in version and versions.get("cuda"):
            version += "+cu" + versions["cuda"].replace(".", "")[:3]
        lines.append(f"{name}=={version}")
    requirements = folder / "requirements.txt"
    requirements.write_text("\n".join(lines) + "\n")
    gpus = []
    if case.get("gpu"):
        try:
            target_gpu(case["gpu"])
            gpus = [case["gpu"]]
        except InputError:
            pass
    python = versions.get("python")
    return EnvironmentInputs(
        requirements=[requirements] if lines else [],
        gpus=gpus,
        scan=False,
        python=python if python and lines and python.count(".") <= 2 else None,
    )


def ranked(case: dict[str, Any]) -> list[tuple[str, Verdict, str]] | str:
    """The rule ids explain names, most likely first (or why it could not run)."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        log = folder / "error.log"
        log.write_text(case["log"]["error"])
        try:
            result = explain(str(log), stack(case, folder), Config(), [])
        except InputError as exc:
            return f"input error: {exc}"
    return [
        (cause.finding.rule.id, cause.finding.verdict, cause.finding.rule.kind) for cause in result.causes
    ]


def blames_a_bug(causes: list[tuple[str, Verdict, str]]) -> bool:
    """The first cause explain calls affected is a fault of the stack, not a user error."""
    affected = [kind for _, verdict, kind in causes if verdict is Verdict.AFFECTED]
    return bool(affected) and affected[0] != "usage"


def score(case: dict[str, Any], causes: list[tuple[str, Verdict, str]]) -> tuple[bool, bool, bool]:
    """(top-1 right, top-3 right, false blame) for one case."""
    expected = case["expected"]
    if expected in ("usage", "none"):
        blamed = blames_a_bug(causes)
        return not blamed, not blamed, blamed
    if expected.startswith("new:"):  # a family no rule has yet: a miss whatever explain names
        user_error = expected.startswith("new:usage")  # a user error all the same: blaming a bug is false
        return False, False, user_error and blames_a_bug(causes)
    ids = [rule_id for rule_id, _, _ in causes]
    return ids[:1] == [expected], expected in ids[:3], False


def load_cases(batch: str | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every case file (path, parsed TOML), or only those of one batch."""
    cases = [
        (path, tomllib.loads(path.read_text(encoding="utf-8"))) for path in sorted(CASES.glob("*/*.toml"))
    ]
    return [item for item in cases if batch is None or item[1].get("batch") == batch]


def print_rows(title: str, rows: list[tuple[str, int, int, int, int | None]]) -> None:
    """A table: name, cases, top-1, top-3 and (where counted) false blame."""
    print(f"{title:<30} {'cases':>5} {'top-1':>7} {'top-3':>7} {'false blame':>12}")
    for name, cases, top1, top3, blamed in rows:
        blame = "" if blamed is None else str(blamed)
        print(f"{name:<30} {cases:>5} {top1 / cases:>7.0%} {top3 / cases:>7.0%} {blame:>12}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list each case whose cause was not first")
    parser.add_argument("--batch", metavar="NAME", help="score only the cases of this batch")
    options = parser.parse_args()
    loaded = load_cases(options.batch)
    if not loaded:
        raise SystemExit(f"no case has batch = {options.batch!r}")
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # family: cases, top-1, top-3
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # group: cases, top-1, top-3, blamed
    misses = []
    for path, case in loaded:
        expected, family = case["expected"], case["family"]
        group = f"batch {case['batch']}" if case.get("batch") else "no batch"
        causes = ranked(case)
        if isinstance(causes, str):
            misses.append(f"{path.relative_to(CASES)}: {causes}")
            totals[family][0] += 1
            groups[group][0] += 1
            groups["all"][0] += 1
            continue
        ids = [rule_id for rule_id, _, _ in causes]
        hit1, hit3, blamed = score(case, causes)
        for counts in (totals[family], groups[group], groups["all"]):
            counts[0] += 1
            counts[1] += hit1
            counts[2] += hit3
        for name in (group, "all"):
            groups[name][3] += blamed
        if not hit1:
            misses.append(f"{path.relative_to(CASES)}: expected {expected}, got {ids[:3] or 'nothing'}")
    print_rows("family", [(family, *counts, None) for family, counts in sorted(totals.items())])
    print()
    batches = sorted(name for name in groups if name.startswith("batch "))
    names = ["all"] + (["no batch"] if "no batch" in groups and batches else []) + batches
    print_rows("cases", [(name, *groups[name]) for name in names])
    print("false blame: usage/none cases on which a stack bug is called affected first")
    if options.misses:
        print("\n".join(["", *misses]))


if __name__ == "__main__":
    main()
