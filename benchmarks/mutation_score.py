"""Mutation score of the fast tests, one part of the code at a time (mutmut 3).

mutmut copies ``attn_doctor`` into ``mutants/`` with every mutant of every function compiled in
behind a trampoline, runs the fast tests once to learn which tests call which function, then,
for each mutant, forks a worker that runs only those tests (``-x``). This script runs it in a copy
of the repository (``--workdir``; mutmut writes ``mutants/`` into the folder it runs in, never
into the checkout), part by part, and prints, per module, the mutants, killed, survived, timeout
and score, then every mutant that no test killed (module:line and the change).

The tool is not in any extra (CI does not run it); install it next to the project:

    python -m venv --system-site-packages /tmp/mutvenv          # sees torch and the test extra
    /tmp/mutvenv/bin/pip install 'mutmut==3.8.1'
    /tmp/mutvenv/bin/pip install --no-deps -e .                 # attn-doctor's script in that venv
    ln -s "$(command -v torchrun)" /tmp/mutvenv/bin/torchrun     # test_run finds it next to python
    /tmp/mutvenv/bin/python benchmarks/mutation_score.py --part redact
    /tmp/mutvenv/bin/python benchmarks/mutation_score.py --all
    /tmp/mutvenv/bin/python benchmarks/mutation_score.py --all --report   # the results so far, no run

Parts: engine, facts (sources included), check, report, explain, fixer, redact, wrap
(wrap/diagnose.py), forkserver (the functions of forkserver.py that decide a child's fate: the
child's exit code, the reaped status, the parent's result, timeout and fall-back to fresh
processes). ``--only GLOB`` narrows a part to some modules or functions (mutmut's mutant names,
e.g. ``'attn_doctor.engine.matcher.*'``), to split a large part across sittings: results are kept
in the work folder, and a later run skips every mutant already decided (``--retest`` runs them again).

Two things mutmut does not do for this project, done here:

- Children. Many tests run ``python -m attn_doctor``, the fork server, repro and probe children.
  The children import the mutated copy (``PYTHONPATH``), so a mutant is live in them too; but
  mutmut learns which tests reach a function only in its own process. A ``sitecustomize`` records,
  during mutmut's statistics run, each function a child calls under the test that started it
  (``PYTEST_CURRENT_TEST``); a .pth this script writes into the venv puts it on the path of any
  Python started with ``ATTN_DOCTOR_MUTATION_SHIM`` set, even under a test that sets its own
  ``PYTHONPATH`` or makes a venv from this one's packages. This script adds those pairs to
  mutmut's statistics and runs again the mutants that had no test. The fork server (``python -m
  attn_doctor.forkserver``) is started as the module ``attn_doctor.forkserver`` rather than
  ``__main__``, else its functions would not be the mutated module's.
- Tests that cannot run in the copy: the ones that install the package into a venv of their
  own (pre-commit's ``try-repo``, the wheel test, the repro extra's venv) would run the mutated
  copy without mutmut. They are deselected (``EXCLUDED_TESTS``), as is anything named with
  ``--deselect`` (a test that fails on the checkout as it is: mutmut needs a green suite).

Score: (killed + timeout) / mutants decided; "no tests" (no test reaches the function) counts
as not killed. mutmut mutates inside functions only: module-level constants (regexes, tables)
and class bodies are not mutated.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import math
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "attn-doctor-mutation"
DEFAULT_BUDGET_S = 30.0

# part -> mutmut mutant-name globs (module path with dots; "xǁClassǁmethod" for methods)
_FORKSERVER_VERDICT = [
    "x__child",
    "x__reap",
    "x__why_not_fork",
    "xǁForkServerǁwait_ready",
    "xǁForkServerǁrun",
    "xǁForkServerǁ_read",
    "xǁLauncherǁrun",
    "xǁLauncherǁ_ready_server",
    "xǁLauncherǁ_give_up",
]
# part -> globs over mutmut's function names: "attn_doctor.engine.matcher.x_match" for a function,
# "attn_doctor.forkserver.xǁLauncherǁrun" for a method
PARTS: dict[str, list[str]] = {
    "redact": ["attn_doctor.redact.*"],
    "check": ["attn_doctor.check.*"],
    "wrap": ["attn_doctor.wrap.diagnose.*"],
    "forkserver": [f"attn_doctor.forkserver.{name}" for name in _FORKSERVER_VERDICT],
    "fixer": ["attn_doctor.fixer.*"],
    "report": ["attn_doctor.report.*"],
    "explain": ["attn_doctor.explain.*"],
    "engine": ["attn_doctor.engine.*"],
    "facts": ["attn_doctor.facts.*"],
}
# tests that install the package into a venv of their own: there the mutated copy cannot import mutmut;
# and the terminal ^C test, which fails after the rest of the suite in one process in the copy (its
# command exits 0: the ^C does not reach it) though it passes alone
EXCLUDED_TESTS = [
    "tests/test_run.py::test_ctrl_c_on_a_terminal_reaches_the_command_once_and_is_not_diagnosed",
    "tests/test_ci_integrations.py::test_the_pre_commit_hook_under_try_repo",
    "tests/test_packaging.py::test_wheel_ships_every_rule_and_installs",
    "tests/test_readme_install.py::test_the_repro_extra_installs_everything_the_cpu_path_imports",
]
PTH, SHIM_VARIABLE = "zz-attn-doctor-mutation.pth", "'ATTN_DOCTOR_MUTATION_SHIM'"
HITS = "child-hits.tsv"  # in mutants/: "test node id <TAB> function" from the children
AIMED_TESTS = "tests/test_mutants"  # tests written to kill mutants: a part always runs them

SITECUSTOMIZE = '''\
"""Children of the tests under mutmut (benchmarks/mutation_score.py puts this on their path)."""

import os
import sys

if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    # mutmut's statistics run: note each function this child calls, under the test that started it
    _hits = os.environ.get("ATTN_DOCTOR_MUTATION_HITS")
    _test = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")[0]
    try:
        import mutmut.mutation.trampoline as _trampoline
    except ImportError:  # a Python without mutmut
        _hits = None
    if _hits and _test:
        _seen = set()

        def _record(name, caller=None):
            if name not in _seen:
                _seen.add(name)
                with open(_hits, "a") as out:
                    out.write(f"{_test}\\t{name}\\n")

        _trampoline.record_trampoline_hit = _record
    else:
        os.environ["MUTANT_UNDER_TEST"] = ""  # nothing to record it under: run the original code
if sys.orig_argv[1:3] == ["-m", "attn_doctor.forkserver"]:
    # the server as the module attn_doctor.forkserver, not __main__: its mutants are that module's
    from attn_doctor.forkserver import serve

    serve(sys.orig_argv[3:])
    sys.exit(0)
'''

ORDER_PLUGIN = '''\
"""pytest plugin (benchmarks/mutation_score.py): a mutant's tests, the fastest first, so that a
mutant one of them kills dies early. mutmut hands pytest a set, in no order."""

import json
import os

_durations = None


def pytest_collection_modifyitems(session, config, items):
    global _durations
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        return
    if _durations is None:
        with open(os.environ["ATTN_DOCTOR_MUTATION_STATS"]) as stats:
            _durations = json.load(stats)["duration_by_test"]
    items.sort(key=lambda item: _durations.get(item.nodeid, float("inf")))
'''


@dataclass
class ModuleScore:
    module: str
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def decided(self) -> int:
        return sum(n for status, n in self.statuses.items() if status not in ("not checked", "skipped"))

    @property
    def killed(self) -> int:
        return self.statuses["killed"] + self.statuses["timeout"]

    @property
    def score(self) -> float | None:
        return self.killed / self.decided if self.decided else None


# ---- the work folder ------------------------------------------------------------------------------


def sync(source: Path, workdir: Path) -> int:
    """Copy the checkout's files (tracked and untracked, not ignored) into ``workdir``; a file is
    rewritten only when its content changed, so mutmut regenerates only the changed modules."""
    listed = subprocess.run(
        ["git", "-C", str(source), "ls-files", "-co", "--exclude-standard", "-z"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    files = sorted(name for name in listed if name and (source / name).is_file())
    manifest = workdir / ".synced-files"
    previous = set(manifest.read_text().splitlines()) if manifest.exists() else set()
    changed = 0
    for name in files:
        target = workdir / name
        data = (source / name).read_bytes()
        if target.exists() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)  # a new mtime: mutmut sees the module as changed
        shutil.copymode(source / name, target)
        changed += 1
    mutants = workdir / "mutants"
    if mutants.is_dir():  # mutmut copies the files it does not mutate once: keep them current
        for name in files:
            if name.startswith("attn_doctor/") and name.endswith(".py"):
                continue  # mutmut's own: regenerated when the source above changed
            copy, data = mutants / name, (source / name).read_bytes()
            if not copy.exists() or copy.read_bytes() != data:
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(data)
                shutil.copymode(source / name, copy)
    for name in previous - set(files):
        (workdir / name).unlink(missing_ok=True)
        (workdir / "mutants" / name).unlink(missing_ok=True)
    manifest.write_text("\n".join(files) + "\n")
    return changed


def install_shim(workdir: Path) -> None:
    """The children's sitecustomize and the test-order plugin in the work folder, and the .pth."""
    shim = workdir / ".mutation-shim" / "sitecustomize.py"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(SITECUSTOMIZE)
    (shim.parent / "attn_doctor_mutation_order.py").write_text(ORDER_PLUGIN)
    install_pth()


def install_pth() -> None:
    """A .pth in this venv that puts the shim's folder on the path of every Python started with
    ATTN_DOCTOR_MUTATION_SHIM set (PYTHONPATH is not enough: some tests set their own). It goes
    first: Python runs the first ``sitecustomize`` on the path, and Debian's Pythons ship one."""
    if sys.prefix == sys.base_prefix:
        sys.exit("run this from the venv mutmut is installed in (see the docstring), not the base Python")
    pth = Path(sysconfig.get_paths()["purelib"]) / PTH
    pth.write_text(
        f"import os, sys; {SHIM_VARIABLE} in os.environ and sys.path.insert(0, os.environ[{SHIM_VARIABLE}])\n"
    )


def environment(workdir: Path, deselect: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(workdir / "mutants")
    env["ATTN_DOCTOR_MUTATION_SHIM"] = str(workdir / ".mutation-shim")
    env["ATTN_DOCTOR_MUTATION_HITS"] = str(workdir / "mutants" / HITS)
    env["ATTN_DOCTOR_MUTATION_STATS"] = str(workdir / "mutants" / "mutmut-stats.json")
    addopts = ["-p", "attn_doctor_mutation_order"]
    addopts += [f"--deselect={test}" for test in [*EXCLUDED_TESTS, *deselect]]
    env["PYTEST_ADDOPTS"] = " ".join([env.get("PYTEST_ADDOPTS", ""), *addopts]).strip()
    env.pop("MUTANT_UNDER_TEST", None)
    return env


def mutmut(workdir: Path, env: dict[str, str], names: list[str], log: Path, max_children: int | None) -> int:
    command = [str(Path(sys.executable).parent / "mutmut"), "run"]
    if max_children:
        command += ["--max-children", str(max_children)]
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command + names)}\n")
        out.flush()
        return subprocess.run(
            command + names, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT
        ).returncode


def merge_child_hits(workdir: Path) -> int:
    """Add the children's (test, function) pairs to mutmut's statistics; returns how many were new."""
    hits, stats_path = workdir / "mutants" / HITS, workdir / "mutants" / "mutmut-stats.json"
    if not hits.exists() or not stats_path.exists():
        return 0
    stats = json.loads(stats_path.read_text())
    known_tests = set(stats["duration_by_test"])
    by_function = stats["tests_by_mangled_function_name"]
    added = 0
    for line in hits.read_text().splitlines():
        test, _, function = line.partition("\t")
        if test in known_tests and test not in by_function.setdefault(function, []):
            by_function[function].append(test)
            added += 1
    stats_path.write_text(json.dumps(stats, indent=4))
    return added


def trim_tests(workdir: Path, part: Part, budget: float) -> tuple[int, int]:
    """Give each function of ``part`` the fastest of the tests that reach it, up to ``budget``
    seconds of them as mutmut measured them, every test of tests/test_mutants*.py (written to
    kill its mutants) and every test of the module's own tests (tests/test_MODULE*.py). mutmut
    runs a mutant's tests until one fails: a survivor costs all of them, and the functions every
    `check` reaches have some 300 tests (8 minutes). Every test mutmut
    ever recorded for a function is kept in ``tests-full.json``. Returns (tests kept, tests in all)."""
    stats_path, full_path = workdir / "mutants" / "mutmut-stats.json", workdir / "mutants" / "tests-full.json"
    stats = json.loads(stats_path.read_text())
    full: dict[str, list[str]] = json.loads(full_path.read_text()) if full_path.exists() else {}
    durations: dict[str, float] = stats["duration_by_test"]
    by_function: dict[str, list[str]] = stats["tests_by_mangled_function_name"]
    for function, tests in by_function.items():
        full[function] = sorted(set(full.get(function, [])) | set(tests))
    full_path.write_text(json.dumps(full, indent=1))
    kept_count = all_count = 0
    for function, tests in full.items():
        if not part.has_function(function):
            continue
        own = f"tests/test_{function.rpartition('.')[0].rpartition('.')[2]}"  # forkserver: test_forkserver*
        aimed = sorted(t for t in tests if t.startswith((AIMED_TESTS, own)) and t in durations)
        others = sorted(
            (t for t in tests if t not in aimed and t in durations), key=lambda t: (durations[t], t)
        )
        kept, spent = list(aimed), 0.0
        for test in others:
            if budget <= 0 or spent + durations[test] <= budget:
                kept.append(test)
                spent += durations[test]
        by_function[function] = kept
        kept_count, all_count = kept_count + len(kept), all_count + len(aimed) + len(others)
    stats_path.write_text(json.dumps(stats, indent=4))
    return kept_count, all_count


def statistics_run(workdir: Path, env: dict[str, str], log: Path) -> None:
    """mutmut generates the mutants of the modules that changed and runs every test it has no
    statistics for yet (all of them the first time), then stops: a name that matches no mutant
    makes it exit there, before any mutant runs. The sample is drawn after this, from every
    mutant of the code as it is now."""
    mutmut(workdir, env, ["statistics-only: no mutant has this name"], log, None)
    if not (workdir / "mutants" / "mutmut-stats.json").exists():
        sys.exit(f"mutmut's statistics run failed; see {log}")
    merge_child_hits(workdir)


# ---- results ----------------------------------------------------------------------------------------


def load_results(workdir: Path) -> dict[str, tuple[Path, int | None]]:
    """Every mutant mutmut has generated: name -> (source path, exit code or None)."""
    results: dict[str, tuple[Path, int | None]] = {}
    for meta in sorted((workdir / "mutants").rglob("*.py.meta")):
        source = meta.relative_to(workdir / "mutants").with_suffix("")
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            results[name] = (source, code)
    return results


@dataclass
class Part:
    name: str
    globs: list[str]  # over function names
    only: str | None = None

    def has(self, mutant: str) -> bool:
        return self.has_function(function_of(mutant))

    def has_function(self, function: str) -> bool:
        return any(fnmatch.fnmatchcase(function, g) for g in self.globs) and (
            self.only is None or fnmatch.fnmatchcase(function, self.only)
        )


def mutmut_names(globs: list[str]) -> list[str]:
    """mutmut's arguments for these function globs. mutmut runs each mutant whose name a pattern
    matches, and before that, unmutated, every test of each function whose name one matches. A
    glob with ``*`` does both; an exact function F needs ``F__mutmut_*`` (its mutants) and a
    pattern that matches F itself and none of its mutants, whose names end in digits."""
    names = []
    for glob in globs:
        if "*" in glob:
            names.append(glob)
        else:
            names += [f"{glob}__mutmut_*", function_pattern(glob)]
    return names


def function_pattern(function: str) -> str:
    """A pattern that matches the function itself and none of its mutants (their names end in digits)."""
    return f"{function[:-1]}*{function[-1]}"


def status_of(code: int | None) -> str:
    from mutmut.stats import status_by_exit_code

    return str(status_by_exit_code[code])


def function_of(name: str) -> str:
    return name.partition("__mutmut_")[0]


def describe(workdir: Path, name: str, source: Path) -> tuple[int, str]:
    """The mutant's line in the source file and its change (``old -> new``)."""
    import libcst as cst
    from mutmut.mutation.diff_apply import read_functions_from_index

    here = Path.cwd()
    os.chdir(workdir)
    try:
        functions = read_functions_from_index(name, source)
    finally:
        os.chdir(here)
    if functions is None:
        return 0, "(no diff)"
    original, mutant = (cst.Module([]).code_for_node(f).splitlines() for f in functions)
    start = next(i for i, line in enumerate(original) if line.lstrip().startswith(("def ", "async def ")))
    removed, added, first = [], [], None
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=original, b=mutant, autojunk=False).get_opcodes():
        if tag != "equal":
            first = i1 if first is None else first
            removed += [line.strip() for line in original[i1:i2]]
            added += [line.strip() for line in mutant[j1:j2]]
    line = def_line(workdir / source, name) + (first or 0) - start
    change = f"{' / '.join(removed) or '(nothing)'}  ->  {' / '.join(added) or '(removed)'}"
    return line, change


_DEF_LINES: dict[Path, dict[str, int]] = {}


def def_line(path: Path, name: str) -> int:
    """Line of the ``def`` of the mutant's function in the (unmutated) source."""
    import ast

    from mutmut.utils.format_utils import orig_function_and_class_names_from_key

    if path not in _DEF_LINES:
        lines: dict[str, int] = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines[node.name] = node.lineno
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        lines[f"{node.name}.{item.name}"] = item.lineno
        _DEF_LINES[path] = lines
    function, cls = orig_function_and_class_names_from_key(name)
    return _DEF_LINES[path].get(f"{cls}.{function}" if cls else function, 0)


def report(
    workdir: Path, part: Part, elapsed: float | None, earlier: frozenset[str] = frozenset()
) -> ModuleScore:
    """The part's table and survivors. Mutants in ``earlier`` (decided before the tests aimed at
    survivors were written: --set-aside) count as not decided, so that the score is that of a
    sample the new tests were not written for."""
    results = {
        name: (source, None if name in earlier else code)
        for name, (source, code) in load_results(workdir).items()
        if part.has(name)
    }
    modules: dict[str, ModuleScore] = {}
    for source, code in results.values():
        module = str(source)
        modules.setdefault(module, ModuleScore(module)).statuses[status_of(code)] += 1
    total = ModuleScore(part.name)
    for score in modules.values():
        total.statuses.update(score.statuses)
    width = max([len(m) for m in modules] + [len(part.name) + 8])
    when = f", this run {elapsed / 60:.1f} min" if elapsed is not None else ""
    print(f"\n## {part.name} ({total.decided} mutants decided{when})\n")
    header = (
        f"{'module':<{width}} {'mutants':>7} {'killed':>6} {'survived':>8} {'timeout':>7} {'no tests':>8}"
    )
    print(f"{header} {'other':>5} {'score':>6}")
    for score in [*sorted(modules.values(), key=lambda s: s.module), total]:
        s = score.statuses
        other = score.decided - s["killed"] - s["survived"] - s["timeout"] - s["no tests"]
        value = f"{score.score:.1%}" if score.score is not None else "-"
        label = score.module if score is not total else f"{part.name} total"
        print(
            f"{label:<{width}} {score.decided:>7} {s['killed']:>6} {s['survived']:>8} {s['timeout']:>7}"
            f" {s['no tests']:>8} {other:>5} {value:>6}"
        )
    if total.statuses["not checked"] and total.decided:
        low, high = wilson_interval(total.killed, total.decided)
        print(
            f"({total.decided} of {total.decided + total.statuses['not checked']} mutants decided: "
            f"if they are a random sample, the part's score is {low:.1%} to {high:.1%} at 95%)"
        )
    elif total.statuses["not checked"]:
        print(f"({total.statuses['not checked']} mutants not run yet)")
    alive = sorted(
        (
            name
            for name, (_, code) in results.items()
            if status_of(code) not in ("killed", "timeout", "not checked")
        ),
        key=lambda name: (str(results[name][0]), name),
    )
    if alive:
        print(f"\nsurviving mutants of {part.name}:")
        for name in alive:
            source, code = results[name]
            line, change = describe(workdir, name, source)
            status = status_of(code)
            flag = "" if status == "survived" else f" [{status}]"
            print(f"  {source}:{line}  {name.rpartition('.')[2]}{flag}\n      {change}")
    return total


def wilson_interval(killed: int, decided: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion estimated from a random sample."""
    p = killed / decided
    centre = (p + z * z / (2 * decided)) / (1 + z * z / decided)
    half = z * math.sqrt(p * (1 - p) / decided + z * z / (4 * decided * decided)) / (1 + z * z / decided)
    return max(0.0, centre - half), min(1.0, centre + half)


def run_chosen(
    args: argparse.Namespace, env: dict[str, str], part: Part, log: Path, mutants: list[str], what: str
) -> None:
    """mutmut on these mutants, each with its function's tests as trim_tests keeps them."""
    kept, seen = trim_tests(args.workdir, part, args.budget)
    print(f"{part.name}: {len(mutants)} {what}; {kept} of {seen} (function, test) pairs; log: {log}")
    functions = sorted({function_of(n) for n in mutants})
    if mutmut(args.workdir, env, mutants + [function_pattern(f) for f in functions], log, args.max_children):
        sys.exit(f"mutmut failed; see {log}")


def run_part(part: Part, args: argparse.Namespace) -> float:
    env = environment(args.workdir, args.deselect)
    log = args.workdir / f"mutmut-{part.name}.log"
    started = time.monotonic()
    results = load_results(args.workdir)
    if args.confirm:  # the survivors again, with more of the tests that reach them (--budget)
        survivors = sorted(  # and those no test reached: a test written since may reach them
            n
            for n, (_, code) in results.items()
            if part.has(n) and status_of(code) in ("survived", "no tests")
        )
        if not survivors:
            print(f"{part.name}: no survivor to confirm")
            return 0.0
        run_chosen(args, env, part, log, survivors, "survivors again")
        return time.monotonic() - started
    if args.sample:  # a seeded random sample of the part's mutants not yet decided
        pending = sorted(n for n, (_, code) in results.items() if part.has(n) and code is None)
        decided = sum(1 for n, (_, code) in results.items() if part.has(n) and code is not None)
        chosen = random.Random(args.seed).sample(pending, max(0, min(args.sample - decided, len(pending))))
        if not chosen:
            print(f"{part.name}: {decided} mutants decided, the sample of {args.sample} is complete")
            return 0.0
        run_chosen(args, env, part, log, chosen, "sampled mutants")
        return time.monotonic() - started
    if args.retest:
        globs = [part.only] if part.only else part.globs
    else:  # mutmut runs again every mutant a pattern names: name the functions with a mutant not yet run
        globs = sorted({function_of(n) for n, (_, code) in results.items() if part.has(n) and code is None})
        if not globs:
            print(f"{part.name}: every mutant already decided (--retest runs them again)")
            return 0.0
    kept, seen = trim_tests(args.workdir, part, args.budget)
    shown = " ".join(globs) if len(globs) < 4 else f"({len(globs)} functions)"
    print(
        f"{part.name}: mutmut run {shown}; {kept} of {seen} (function, test) pairs kept; log: {log}",
        flush=True,
    )
    code = mutmut(args.workdir, env, mutmut_names(globs), log, args.max_children)
    if code != 0:
        sys.exit(f"mutmut failed (exit code {code}); see {log}")
    if merge_child_hits(args.workdir):  # new tests, whose children reached functions of this part
        stats = json.loads((args.workdir / "mutants" / "mutmut-stats.json").read_text())
        reached = stats["tests_by_mangled_function_name"]
        again = sorted(
            {
                function_of(name)
                for name, (_, code) in load_results(args.workdir).items()
                if part.has(name) and code == 33 and reached.get(function_of(name))
            }
        )
        if again:
            print(f"{part.name}: {len(again)} functions reached only from children; their mutants run again")
            trim_tests(args.workdir, part, args.budget)
            if mutmut(args.workdir, env, mutmut_names(again), log, args.max_children):
                sys.exit(f"mutmut failed; see {log}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", action="append", choices=list(PARTS), default=[])
    parser.add_argument("--all", action="store_true", help="every part, in order")
    parser.add_argument("--only", help="a glob over function names that narrows the part")
    parser.add_argument(
        "--report", action="store_true", help="print the results in the work folder, run nothing"
    )
    parser.add_argument("--retest", action="store_true", help="run again the mutants already decided")
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="run the survivors again, with a larger --budget (0: every test that reaches them)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="seconds of tests per function, the fastest first (0: all of them); see trim_tests",
    )
    parser.add_argument(
        "--sample",
        type=int,
        help="decide this many of the part's mutants, drawn at random (--seed): the score is an estimate",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--source", type=Path, default=REPO, help="the checkout to copy (default: this one)")
    parser.add_argument(
        "--as-is",
        action="store_true",
        help="run the work folder as it is, copying nothing into it (moved to a larger machine)",
    )
    parser.add_argument("--deselect", action="append", default=[], help="a test node id to leave out")
    parser.add_argument(
        "--no-refresh",
        action="store_true",
        help="skip generating changed modules' mutants and new tests' statistics (a run before did)",
    )
    parser.add_argument(
        "--write-decided",
        type=Path,
        help="list the mutants decided so far in this file (before writing tests)",
    )
    parser.add_argument(
        "--set-aside",
        type=Path,
        help="report as if the mutants this file lists (--write-decided) were not decided: a fresh sample",
    )
    parser.add_argument("--max-children", type=int, help="mutmut's workers (default: one per CPU)")
    args = parser.parse_args()
    parts = list(PARTS) if args.all else args.part
    if not parts:
        parser.error("name a --part or --all")
    try:
        import mutmut
    except ImportError:
        sys.exit("mutmut is not installed in this Python; see this script's docstring")
    args.workdir.mkdir(parents=True, exist_ok=True)
    if not args.report:
        changed = 0 if args.as_is else sync(args.source, args.workdir)
        install_shim(args.workdir)
        print(f"mutmut {mutmut.__version__}; work folder {args.workdir} ({changed} files updated)")
        first = not (args.workdir / "mutants" / "mutmut-stats.json").exists()
        what = "every test once" if first else "the tests it has no statistics for"
        if first or not args.no_refresh:
            print(f"mutmut generates the mutants of changed modules and runs {what}", flush=True)
            env = environment(args.workdir, args.deselect)
            statistics_run(args.workdir, env, args.workdir / "mutmut-stats.log")
        budget = f"the fastest up to {args.budget:g} s" if args.budget > 0 else "all"
        print(f"tests per function: {budget} of those that reach it, and tests/test_mutants*.py")
    if args.write_decided:
        decided_now = sorted(n for n, (_, code) in load_results(args.workdir).items() if code is not None)
        args.write_decided.write_text("\n".join(decided_now) + "\n")
        print(f"{len(decided_now)} decided mutants listed in {args.write_decided}")
    earlier = frozenset(args.set_aside.read_text().split()) if args.set_aside else frozenset()
    totals = []
    for name in parts:
        part = Part(name, PARTS[name], args.only)
        elapsed = None if args.report else run_part(part, args)
        totals.append(report(args.workdir, part, elapsed, earlier))
    killed, decided = sum(t.killed for t in totals), sum(t.decided for t in totals)
    score = f"{killed / decided:.1%}" if decided else "-"
    print(f"\nTOTAL ({', '.join(parts)}): {killed} / {decided} mutants killed, score {score}")
    estimate = weighted_score(totals)
    if estimate is not None:
        value, low, high, size = estimate
        print(
            f"weighted by each part's size ({size} mutants; a sampled part stands for all of its"
            f" mutants): score {value:.1%}, 95% interval {low:.1%} to {high:.1%}"
        )


def weighted_score(totals: list[ModuleScore]) -> tuple[float, float, float, int] | None:
    """The score of all the parts' mutants, each part's sample standing for its size (a stratified
    estimate), and its 95% interval (normal, with the finite-population correction): the parts are
    sampled at different rates, so the plain count over-weights the small, fully run ones. None
    while a part has no mutant decided."""
    if not totals or any(t.decided == 0 for t in totals):
        return None
    sizes = [t.decided + t.statuses["not checked"] for t in totals]
    size = sum(sizes)
    value = variance = 0.0
    for total, n_part in zip(totals, sizes, strict=True):
        weight, p, n = n_part / size, total.killed / total.decided, total.decided
        value += weight * p
        if n < n_part:
            variance += weight**2 * p * (1 - p) / n * (n_part - n) / (n_part - 1)
    half = 1.96 * math.sqrt(variance)
    return value, max(0.0, value - half), min(1.0, value + half), size


if __name__ == "__main__":
    main()
