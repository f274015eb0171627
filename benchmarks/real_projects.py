"""How `attn-doctor check` does on real open-source projects, against what their maintainers expect.

Each project is a folder tests/projects/<name>/ (issue 37): `project.toml` names the upstream
repository and commit, the files copied from it into `tree/` (the dependency files a user points
`check` at, and the code and config files whose contents the project scan reads, whole, at their
original relative paths), the command-line arguments a user would give `check` in the project's CI
(`args`), and `expected`: one verdict per rule that a maintainer would give for this project at this
commit (`affected`, `not-affected` or `unknown`), with the project's own code path and the rule's
upstream reference as `why`. The verdicts were written before `check` was run on the project; the
few judged after a run (a rule reported affected that nobody had judged) say so
(`judged_after_run = true`), and an expectation changed later says when, why and from which release
fact (`corrected`).

Each project goes through the real CLI, as a user would run it in CI, from inside its tree:
`python -m attn_doctor check --format json --project . ARGS` (NO_COLOR=1, an empty cache folder
per project). A project scores

  affected   the rules check reports affected
  true       of them, the ones expected affected
  false      of them, the ones expected not-affected or unknown, or not judged at all
  unknown    the rules check reports unknown (its summary's count)
  missed     the rules expected affected that check does not report affected
  exit       check's exit code; 2 means it refused an input (a pin file or Dockerfile) whole

and the totals give the precision of the affected findings (true / affected), the misses and the
refusals. Issue 37's target: precision >= 0.9, no miss, no refusal.

    python benchmarks/real_projects.py                    # every project under tests/projects
    python benchmarks/real_projects.py --misses           # and each false finding and miss, with why
    python benchmarks/real_projects.py SimPO open-r1      # only these projects
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_doctor._compat import tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = ROOT / "tests" / "projects"
VERDICTS = ("affected", "not-affected", "unknown")
REFUSED = 2  # check's exit code for an input it cannot read


@dataclass
class Score:
    """What check said about one project and how it scores against the expected verdicts."""

    name: str
    exit_code: int
    seconds: float
    affected: list[str] = field(default_factory=list)
    true: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)  # expected not-affected/unknown, or not judged
    unknown: int = 0
    missed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # check's own words on inputs it could not read

    @property
    def refused(self) -> bool:
        return self.exit_code == REFUSED


def load_project(folder: Path) -> dict[str, Any]:
    """The project's project.toml."""
    with (folder / "project.toml").open("rb") as handle:
        return tomllib.load(handle)


def project_folders(names: list[str] | None = None) -> list[Path]:
    """tests/projects/<name>/ of every project (or the ones named), sorted by name."""
    folders = sorted(p.parent for p in PROJECTS.glob("*/project.toml"))
    if names:
        wanted = set(names)
        folders = [f for f in folders if f.name in wanted]
        unknown = wanted - {f.name for f in folders}
        if unknown:
            raise SystemExit(f"no such project under {PROJECTS}: {', '.join(sorted(unknown))}")
    return folders


def expected_verdicts(project: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """rule id -> its [[expected]] entry."""
    return {entry["rule"]: entry for entry in project.get("expected", [])}


def run_check(folder: Path, project: dict[str, Any]) -> tuple[int, dict[str, Any] | None, float, str]:
    """(exit code, the JSON report or None, wall seconds, stderr) of check on the project's tree."""
    tree = folder / "tree"
    with tempfile.TemporaryDirectory(prefix="attn-doctor-cache-") as cache:
        env = {**os.environ, "NO_COLOR": "1", "ATTN_DOCTOR_CACHE": cache}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        command = [sys.executable, "-m", "attn_doctor", "check", "--format", "json", "--project", "."]
        started = time.perf_counter()
        done = subprocess.run(
            [*command, *project["args"]], cwd=tree, env=env, capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - started
    try:
        report = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        report = None
    return done.returncode, report, seconds, done.stderr


def score(folder: Path) -> Score:
    """Run check on one project and score its affected findings against the expected verdicts."""
    project = load_project(folder)
    exit_code, report, seconds, stderr = run_check(folder, project)
    result = Score(name=project["name"], exit_code=exit_code, seconds=seconds)
    expected = expected_verdicts(project)
    if report is None:
        result.problems = [line for line in stderr.strip().splitlines()[-3:] if line.strip()]
    else:
        findings = report.get("findings", [])
        result.affected = sorted(
            f["id"] for f in findings if f.get("verdict") == "affected" and not f.get("ignored")
        )
        result.unknown = int(report.get("summary", {}).get("unknown", 0))
        result.problems = [_problem_text(p) for p in report.get("problems", [])]
    for rule in result.affected:
        entry = expected.get(rule)
        (result.true if entry is not None and entry["verdict"] == "affected" else result.false).append(rule)
    result.missed = sorted(
        rule
        for rule, entry in expected.items()
        if entry["verdict"] == "affected" and rule not in result.affected
    )
    return result


def _problem_text(problem: Any) -> str:
    if isinstance(problem, dict):
        return str(problem.get("message") or problem.get("text") or problem)
    return str(problem)


def precision(scores: list[Score]) -> float | None:
    """true / reported affected over all projects; None when nothing was reported affected."""
    reported = sum(len(s.affected) for s in scores)
    return None if reported == 0 else sum(len(s.true) for s in scores) / reported


def table(scores: list[Score]) -> str:
    """The per-project table and the totals, Markdown."""
    lines = [
        "| project | affected | true | false | unknown | missed | exit | refused | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in scores:
        lines.append(
            f"| {s.name} | {len(s.affected)} | {len(s.true)} | {len(s.false)} | {s.unknown} | "
            f"{len(s.missed)} | {s.exit_code} | {'yes' if s.refused else 'no'} | {s.seconds:.2f} |"
        )
    value = precision(scores)
    lines += [
        "",
        f"projects {len(scores)}; affected findings {sum(len(s.affected) for s in scores)}: "
        f"{sum(len(s.true) for s in scores)} true, {sum(len(s.false) for s in scores)} false; "
        f"precision {'n/a' if value is None else f'{value:.2f}'}; "
        f"missed {sum(len(s.missed) for s in scores)}; refused {sum(s.refused for s in scores)}",
    ]
    return "\n".join(lines)


def details(scores: list[Score], folders: dict[str, Path]) -> str:
    """Each false finding and each miss with the expected verdict's why, and each refusal's words."""
    out: list[str] = []
    wrap = textwrap.TextWrapper(width=100, initial_indent="      ", subsequent_indent="      ")
    for s in scores:
        expected = expected_verdicts(load_project(folders[s.name]))
        for label, rules in (("false", s.false), ("missed", s.missed)):
            for rule in rules:
                entry = expected.get(rule)
                verdict = entry["verdict"] if entry else "not judged"
                out.append(f"{s.name}: {label} {rule} (expected {verdict})")
                if entry:
                    out.append(wrap.fill(entry["why"]))
        if s.refused:
            out.append(f"{s.name}: refused (exit 2)")
            out += [wrap.fill(problem) for problem in s.problems[:3]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="*", help="project names (default: all under tests/projects)")
    parser.add_argument("--misses", action="store_true", help="list each false finding and miss with its why")
    args = parser.parse_args(argv)
    folders = project_folders(args.projects)
    scores = [score(folder) for folder in folders]
    print(table(scores))
    for s in scores:
        if s.affected:
            print(f"  {s.name}: affected {', '.join(s.affected)}")
    if args.misses:
        print()
        print(details(scores, {folder.name: folder for folder in folders}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
