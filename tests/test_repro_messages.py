"""What a user reads from `attn-doctor repro`: a case that cannot import something says what to
install, `--device cuda` without CUDA is one clear line, `--list` has a header and titles that name
the bug, the library and the upstream issue, and everything fits 80 columns when COLUMNS=80.

The missing-module tests use real processes whose interpreter cannot import the module: a venv
holding links to every entry of this interpreter's site-packages except the hidden ones."""

from __future__ import annotations

import json
import os
import re
import shlex
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from support import lines_wider_than

from attn_doctor.engine.loader import load_rules
from attn_doctor.facts.gpus import probe_gpus
from attn_doctor.isolation import ChildOutput
from attn_doctor.repro.catalogue import REPROS, Case, Repro, resolve
from attn_doctor.repro.runner import NO_GPU, RunOptions, Status, Work, rerun_command, run_cases

REPO = Path(__file__).resolve().parents[1]
REPRO_EXTRA = "install the repro extra: pip install 'attn-doctor[repro]'"
ROTARY = next(repro for repro in REPROS if repro.id == "rotary-dim")
has_gpu = bool(probe_gpus()[0])


def doctor(
    *args: str, python: str = sys.executable, columns: int | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process of its own (as a user runs it), with this checkout's code."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [python, "-m", "attn_doctor", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


def venv_without(folder: Path, *hidden: str) -> str:
    """A venv that sees this interpreter's packages except ``hidden`` (import names): its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    sources = [*site.getsitepackages(), site.getusersitepackages()]
    for source in map(Path, dict.fromkeys(sources)):
        if not source.is_dir() or source.resolve() == target.resolve():
            continue
        for entry in source.iterdir():
            stem = re.split(r"[-.]", entry.name, maxsplit=1)[0]
            if stem in hidden or (target / entry.name).exists():
                continue
            (target / entry.name).symlink_to(entry)
    alone = {**os.environ, "PYTHONPATH": str(REPO)}  # as its children run: nothing else on the path
    for name in hidden:  # the venv really lacks them
        probe = subprocess.run(
            [str(python), "-c", f"import {name}"], capture_output=True, text=True, env=alone
        )
        assert f"No module named '{name}'" in probe.stderr, probe.stderr
    return str(python)


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def rerun_commands(report: str) -> list[str]:
    """The rerun commands of a text report, joined as a shell joins lines that end in a backslash."""
    commands: list[str] = []
    current: str | None = None
    for line in report.splitlines():
        text = line.strip()
        if current is None:
            if not text.startswith("rerun:"):
                continue
            current = text.removeprefix("rerun:").strip()
            if not current:  # the command follows on lines of its own
                continue
        else:
            current += " " + text
        if current.endswith("\\"):
            current = current.removesuffix("\\")
        else:
            commands.append(unwrapped(current))
            current = None
    return commands


@pytest.mark.parametrize("hidden", ["numpy", "torch"])
def test_a_case_that_cannot_import_the_stack_says_to_install_the_repro_extra(
    tmp_path: Path, hidden: str
) -> None:
    """The documented install once lacked numpy: every case failed with 'No module named numpy' and
    nothing said what to install. Now each row says it, in the report and in the JSON."""
    python = venv_without(tmp_path / "venv", hidden)
    text = doctor("repro", "rotary-dim", "--device", "cpu", python=python, columns=80, cwd=tmp_path)
    assert text.returncode == 1, text.stdout + text.stderr
    assert lines_wider_than(text.stdout, 80) == [], text.stdout
    rows = unwrapped(text.stdout)
    for case in ROTARY.cases:
        assert f"rotary-dim / {case.name}: ERROR" in rows
    assert rows.count(f"cannot run: ModuleNotFoundError: No module named '{hidden}': {REPRO_EXTRA}") == 2

    found = doctor("repro", "rotary-dim", "--device", "cpu", "--format", "json", python=python, cwd=tmp_path)
    kernels = [row for row in json.loads(found.stdout)["results"] if row["repro"] == "rotary-dim"]
    assert len(kernels) == 2
    assert all(row["status"] == "ERROR" and row["detail"].endswith(REPRO_EXTRA) for row in kernels)


def _case_module(folder: Path, name: str, body: str) -> Repro:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(f"def run_case(case, device, seed):\n    {body}\n")
    return Repro(id=name, title=name, module=name, cases=(Case("only", True, name),))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("import fla", "install flash-linear-attention: pip install flash-linear-attention"),
        ("import transformers", "install transformers: pip install transformers"),
        ("import no_such_package_here", "install the package that provides the module no_such_package_here"),
        ("from torch import no_such_name", "the installed torch lacks it: upgrade it: pip install -U torch"),
        ("import torch.no_such_module", "the installed torch lacks it: upgrade it: pip install -U torch"),
    ],
)
def test_a_case_that_cannot_import_a_library_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, says: str
) -> None:
    """Real children (forked and fresh) that fail the import; the row names what to install."""
    python = venv_without(tmp_path / "venv", "fla", "transformers")
    monkeypatch.setattr(sys, "executable", python)  # fresh children start with the venv's python
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "cases"), str(REPO)]))
    repro = _case_module(tmp_path / "cases", "needs_a_library", body)
    for fork in (True, False):
        options = RunOptions(device="cpu", timeout_s=120, fork=fork)
        (result,) = run_cases([(repro, repro.cases[0], ())], options)
        assert result.status is Status.ERROR
        assert result.detail.startswith("cannot run: ") and result.detail.endswith(says), result.detail


@pytest.mark.skipif(has_gpu, reason="a GPU is visible: --device cuda runs")
def test_device_cuda_without_cuda_is_one_line_that_says_use_cpu() -> None:
    """It said 'run again alone: the first run shared the GPU' on every row of a CPU torch."""
    result = doctor("repro", "rotary-dim", "--device", "cuda")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("attn-doctor: error: --device cuda: torch ")
    assert "CPU build" in line or "sees no GPU" in line
    assert "use --device cpu" in line and "shared the GPU" not in line


@pytest.mark.skipif(has_gpu, reason="a GPU is visible: --device cuda runs")
def test_children_without_a_gpu_say_so_and_are_not_run_again_alone() -> None:
    """The children's own check, behind the CLI's: torch in the child says why it has no GPU."""
    work: list[Work] = [(ROTARY, case, ()) for case in ROTARY.cases]
    results = run_cases(work, RunOptions(device="cuda", timeout_s=120, jobs=2))
    for result in results:
        assert result.status is Status.ERROR
        assert result.detail.startswith(NO_GPU) and "shared the GPU" not in result.detail, result.detail
        assert "CPU build" in result.detail or "sees no GPU" in result.detail


def test_list_has_a_header_and_titles_a_user_understands() -> None:
    result = doctor("repro", "--list")
    assert result.returncode == 0, result.stderr
    first, *rest = result.stdout.splitlines()
    assert first.startswith("Bundled reproductions") and "attn-doctor repro" in first
    assert not re.search(r"\bseed\b", result.stdout, re.I)  # the project's internal names
    rules = load_rules()
    for repro in REPROS:
        block = unwrapped(result.stdout.split(f"\n{repro.id}: ", 1)[1].split("\n\n", 1)[0])
        assert repro.title in block
        for case in repro.cases:
            assert case.name in block
        assert f"rules: {next(r.id for r in rules.rules if r.repro == repro.id)}" in block
        # the upstream reference in the title names this repro when passed to `repro`
        references = re.findall(r"\b[\w.-]+/[\w.-]+#\d+", repro.title)
        assert references, repro.title
        for reference in references:
            assert resolve(reference, rules)[0] is repro


def test_titles_name_the_library_and_the_release() -> None:
    for repro in REPROS:
        assert re.search(r"^(transformers|flash-linear-attention)\b", repro.title), repro.title
        assert re.search(r"\d+\.\d+", repro.title), repro.title


def test_list_and_report_fit_80_columns() -> None:
    listing = doctor("repro", "--list", columns=80)
    assert listing.returncode == 0 and lines_wider_than(listing.stdout, 80) == [], listing.stdout
    assert lines_wider_than(doctor("repro", "--list").stdout, 80)  # a pipe without COLUMNS: unwrapped

    report = doctor("repro", "rotary-dim", "--device", "cpu", columns=80)
    assert report.returncode == 0, report.stdout + report.stderr
    assert lines_wider_than(report.stdout, 80) == [], report.stdout
    assert "rotary-dim / rotary-dim-is-model-dim: REPRODUCED" in report.stdout
    assert "rotary-dim / fixed: NOT REPRODUCED" in report.stdout
    # a rerun command on lines of its own, ending in backslashes: it still pastes as one command
    assert set(rerun_commands(report.stdout)) >= kernel_commands(report.stdout)
    assert any(line.endswith(" \\") for line in report.stdout.splitlines())
    whole = doctor("repro", "rotary-dim", "--device", "cpu")  # a pipe without COLUMNS: one line each
    for command in kernel_commands(whole.stdout):
        assert f"    rerun: {command}\n" in whole.stdout


def kernel_commands(report: str) -> set[str]:
    """``rerun_command`` of each rotary case, with the seed its row ran on (the command's last word)."""
    found = {}
    for command in rerun_commands(report):
        for case in ROTARY.cases:
            if f" {case.name} cpu " in command:
                found[case.name] = rerun_command(ROTARY, case, "cpu", int(command.split()[-1]))
    assert set(found) == {case.name for case in ROTARY.cases}, found
    return set(found.values())


def test_a_rerun_command_gives_the_numbers_of_the_run_it_came_from(tmp_path: Path) -> None:
    """Every run draws fresh random inputs; the printed command carries the seed, so pasting it
    replays the same inputs: the same error, to the last digit."""
    run = doctor("repro", "rotary-dim", "--case", "fixed", "--device", "cpu", "--format", "json")
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = json.loads(run.stdout)["results"]
    words = shlex.split(row["command"])
    python = words.index("python")
    settings = dict(word.split("=", 1) for word in words[:python])
    env = {**os.environ, "PYTHONPATH": str(REPO), **settings}
    again = subprocess.run(
        [sys.executable, *words[python + 1 :]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    replay = ChildOutput(again.returncode, again.stdout, again.stderr, False).result()
    assert replay is not None, again.stdout + again.stderr
    assert (replay["max_abs_error"], replay["max_rel_error"]) == (row["max_abs_error"], row["max_rel_error"])
    assert f"seed {row['seed']})" in row["detail"] and replay["detail"] in row["detail"]


def test_a_repro_that_ran_nothing_says_so_and_does_not_pass(tmp_path: Path) -> None:
    """A rule with only a live probe, where its library is missing: every row is SKIPPED. Neither
    a ✓ nor exit 0 may say it passed; the last line says nothing ran, and why."""
    python = venv_without(tmp_path / "venv", "transformers")
    rule = "gemma2-fa2-sliding-window-slice-4-44-0"
    done = doctor("repro", rule, python=python, cwd=tmp_path)
    rows = [line for line in done.stdout.splitlines() if line.startswith(("✓", "✗", "-"))]
    assert rows and all(row.startswith("- probe ") and ": SKIPPED " in row for row in rows), done.stdout
    why = "transformers is not installed"
    assert done.stdout.splitlines()[-1] == f"{len(rows)} cases: {len(rows)} SKIPPED; nothing ran: {why}"
    assert done.returncode == 2
    assert done.stderr == (
        f"attn-doctor: error: repro {rule}: nothing ran: all {len(rows)} cases were skipped ({why})\n"
    )
