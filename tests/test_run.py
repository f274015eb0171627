"""`attn-doctor run -- CMD` with real child processes: the command's output passes through
unchanged, its exit code comes back, and when it fails the diagnosis follows its output."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attn_doctor.wrap.tail import OutputTail
from tests.conftest import Site
from tests.support import REPO, case_log, lines_wider_than, under_a_terminal

CHILDREN = REPO / "tests" / "run_children"
SEED_A = CHILDREN / "fails_like_seed_a.py"
BEHAVES = CHILDREN / "behaves.py"


@pytest.fixture
def project(tmp_path: Path, site: Site) -> tuple[Path, dict[str, str]]:
    """A training project using FA2 and generate, on a machine with transformers 4.44.0 (metadata)."""
    site.install("transformers", "4.44.0")
    site.install("flash-attn", "2.6.3")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text(
        'model = AutoModelForCausalLM.from_pretrained("google/gemma-2-9b",\n'
        '    attn_implementation="flash_attention_2")\nout = model.generate(**inputs)\n'
    )
    env = {**os.environ, "PYTHONPATH": f"{site.path}{os.pathsep}{REPO}", "NO_COLOR": "1"}
    env.pop("CUDA_LAUNCH_BLOCKING", None)
    env.pop("COLUMNS", None)  # each test says how wide, if at all
    return folder, env


def at_80_columns(project: tuple[Path, dict[str, str]]) -> tuple[Path, dict[str, str]]:
    folder, env = project
    return folder, {**env, "COLUMNS": "80"}


def doctor_run(project: tuple[Path, dict[str, str]], *args: str | Path) -> subprocess.CompletedProcess[str]:
    folder, env = project
    command = [sys.executable, "-m", "attn_doctor", "run", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder, timeout=300)


def direct(project: tuple[Path, dict[str, str]], *args: str | Path) -> subprocess.CompletedProcess[str]:
    folder, env = project
    return subprocess.run(
        list(map(str, args)), capture_output=True, text=True, env=env, cwd=folder, timeout=300
    )


def test_seed_a_output_unchanged_then_the_gemma2_cause(project, tmp_path):
    report = tmp_path / "diagnosis.json"
    wrapped = doctor_run(project, "--report", report, "--", sys.executable, SEED_A)
    alone = direct(project, sys.executable, SEED_A)
    assert wrapped.returncode == alone.returncode == 1
    assert wrapped.stdout == alone.stdout
    assert wrapped.stderr.startswith(alone.stderr)
    diagnosis = wrapped.stderr[len(alone.stderr) :]
    assert "attn-doctor: the command exited with code 1" in diagnosis
    first = diagnosis.split("\n1. ", 1)[1].splitlines()[0]
    assert first.startswith("✗ gemma2-fa2-generate-4d-mask [error; affected on this stack]")
    assert (
        "CUDA_LAUNCH_BLOCKING=1 " in diagnosis
    )  # a device-side assert: where it surfaced is not where it failed
    document = json.loads(report.read_text())
    assert document["returncode"] == 1 and document["cuda_asynchronous"] is True
    assert document["explanation"]["causes"][0]["id"] == "gemma2-fa2-generate-4d-mask"
    assert "attn-doctor repro gemma2-fa2-generate-4d-mask" in document["repros"]


def test_github_format_annotates_the_cause(project):
    done = doctor_run(project, "--format", "github", "--", sys.executable, SEED_A)
    assert done.returncode == 1
    annotations = [line for line in done.stdout.splitlines() if line.startswith("::")]
    assert annotations[0].startswith("::error title=attn-doctor gemma2-fa2-generate-4d-mask::")


def test_success_prints_nothing_of_its_own(project):
    wrapped = doctor_run(project, "--", sys.executable, BEHAVES, "succeed")
    assert (wrapped.returncode, wrapped.stdout, wrapped.stderr) == (0, "step 1/1 done; loss 0.1\n", "")


def test_a_signal_death_is_reported_and_exits_128_plus_n(project):
    done = doctor_run(project, "--", sys.executable, BEHAVES, "segfault")
    assert done.returncode == 128 + signal.SIGSEGV
    assert done.stdout == "about to fault\n"
    assert "attn-doctor: the command was killed by SIGSEGV" in done.stderr


def test_a_command_that_does_not_exist_is_127_and_one_line(project):
    done = doctor_run(project, "--", "no-such-command-anywhere", "--flag")
    assert done.returncode == 127
    assert done.stderr.splitlines() == [
        "attn-doctor run: cannot run no-such-command-anywhere: No such file or directory"
    ]
    assert doctor_run(project).returncode == 2  # no command at all


def test_a_terminal_stays_a_terminal():
    """Under a pseudo-terminal the command sees terminals on stdin, stdout and stderr."""
    command = [sys.executable, "-m", "attn_doctor", "run", "--", sys.executable, str(BEHAVES), "isatty"]
    code, seen = under_a_terminal(command, {**os.environ, "PYTHONPATH": str(REPO)}, REPO)
    assert code == 3
    assert "stdout True stderr True stdin True" in seen


def test_streams_closed_early_and_grandchildren_holding_them(project):
    closed = doctor_run(project, "--", sys.executable, BEHAVES, "close-streams-then-work")
    assert closed.returncode == 4
    started = time.monotonic()
    held = doctor_run(project, "--", sys.executable, BEHAVES, "grandchild")
    assert held.returncode == 5 and "left a grandchild holding stdout" in held.stdout
    assert time.monotonic() - started < 30  # not the grandchild's 60 s


def test_a_flood_passes_through_whole(project):
    done = subprocess.run(
        [sys.executable, "-m", "attn_doctor", "run", "--", sys.executable, str(BEHAVES), "flood", "20000"],
        capture_output=True,
        env=project[1],
        timeout=300,
    )
    assert done.returncode == 0 and len(done.stdout) == 20000 * 1024


def test_sigterm_reaches_the_command(project):
    folder, env = project
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "attn_doctor", "run", "--", sys.executable, str(BEHAVES), "wait-for-signal"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=folder,
    )
    assert wrapper.stdout is not None and wrapper.stdout.readline() == "ready\n"
    wrapper.send_signal(signal.SIGTERM)
    out, err = wrapper.communicate(timeout=120)
    assert wrapper.returncode == 143
    assert out == "got SIGTERM\n"
    assert "attn-doctor: the command exited with code 143" in err


def test_asynchronous_cuda_error_offers_and_runs_a_blocking_rerun(project):
    plain = doctor_run(project, "--", sys.executable, BEHAVES, "device-assert")
    assert plain.returncode == 1
    assert f"CUDA_LAUNCH_BLOCKING=1 {sys.executable} {BEHAVES} device-assert" in plain.stderr
    assert "(or add --rerun-blocking to `attn-doctor run`" in plain.stderr
    rerun = doctor_run(project, "--rerun-blocking", "--", sys.executable, BEHAVES, "device-assert")
    assert "running it again with CUDA_LAUNCH_BLOCKING=1" in rerun.stderr
    assert rerun.returncode == 0  # the script succeeds once launches block
    # the option is given: no hint to add it, right before the rerun it asked for
    before_rerun = rerun.stderr.split("attn-doctor run: running it again", 1)[0]
    assert f"CUDA_LAUNCH_BLOCKING=1 {sys.executable} {BEHAVES} device-assert" in before_rerun
    assert "--rerun-blocking" not in rerun.stderr


def test_torchrun_rank_failure_is_diagnosed(project):
    torchrun = Path(sys.executable).with_name("torchrun")
    done = doctor_run(project, "--", torchrun, "--nproc-per-node", "2", CHILDREN / "torchrun_rank_fails.py")
    assert done.returncode == 1
    assert "[rank1]: RuntimeError: CUDA error: device-side assert triggered" in done.stderr
    diagnosis = done.stderr.split("attn-doctor: the command exited with code 1", 1)[1]
    assert "\n1. ✗ gemma2-fa2-generate-4d-mask [error; affected on this stack]" in diagnosis


def test_tail_stays_bounded_and_keeps_each_ranks_last_words():
    tail = OutputTail(cap=4096, rank_cap=1024, max_ranks=2)
    tail.feed(b"[rank1]: RuntimeError: the first failure\n")
    for step in range(20000):
        tail.feed(f"[rank0]: step {step} loss 0.1\n".encode())
        tail.feed(f"[rank2]: step {step}\n".encode())  # a third rank: past max_ranks, only in the shared tail
    assert len(tail._all) <= 2 * 4096 and all(len(t) <= 2 * 1024 for t in tail._ranks.values())
    text = tail.text()
    assert b"[rank1]: RuntimeError: the first failure" in text  # scrolled out of the shared tail long ago
    assert text.endswith(b"[rank2]: step 19999\n")
    assert tail.total == len(b"[rank1]: RuntimeError: the first failure\n") + sum(
        len(f"[rank0]: step {s} loss 0.1\n") + len(f"[rank2]: step {s}\n") for s in range(20000)
    )


def test_ctrl_c_on_a_terminal_reaches_the_command_once_and_is_not_diagnosed(project):
    """The command's group is the terminal's foreground: the terminal's ^C goes to it, not to the
    wrapper, and an interrupt the user asked for gets no diagnosis."""
    folder, env = project
    command = [
        sys.executable,
        "-m",
        "attn_doctor",
        "run",
        "--",
        sys.executable,
        str(BEHAVES),
        "wait-for-signal",
    ]
    code, seen = under_a_terminal(command, env, folder, interrupt_after=b"ready")
    assert code == 128 + signal.SIGINT, seen
    assert "KeyboardInterrupt" in seen
    assert "attn-doctor: the command" not in seen


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_command_starts_reaches_the_command_not_only_the_wrapper(project, number):
    """A Ctrl-C (or SLURM's SIGTERM) that comes after the command has started but before its group
    is the terminal's foreground reaches the wrapper alone: it is held until it can be forwarded,
    so the command gets it, rather than the wrapper dying of it and leaving the command running."""
    folder, env = project
    wait = [sys.executable, str(BEHAVES), "wait-for-signal"]
    command = [sys.executable, str(CHILDREN / "signalled_at_start.py"), str(int(number)), "--", *wait]
    started = time.monotonic()
    code, seen = under_a_terminal(command, env, folder)
    assert code == 128 + number, seen
    assert "Traceback" not in seen
    assert time.monotonic() - started < 50, "the command slept on: the signal never reached it"


def test_output_to_a_file_is_written_by_the_command_itself_and_read_back(project, tmp_path):
    """As under SLURM's --output: the command writes the file directly (nothing is copied), and
    the diagnosis reads its end back and follows it in the same file."""
    folder, env = project
    log = tmp_path / "slurm-1234.out"
    with log.open("wb") as handle:
        handle.write(b"earlier job output\n")
        handle.flush()
        done = subprocess.run(
            [sys.executable, "-m", "attn_doctor", "run", "--", sys.executable, str(SEED_A)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
            timeout=300,
        )
    text = log.read_text()
    assert done.returncode == 1
    assert text.startswith("earlier job output\nLoading checkpoint shards")
    own, diagnosis = text.split(
        "── attn-doctor: the command exited with code 1; diagnosis of its output ─", 1
    )
    assert own.rstrip("\n").endswith("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert "\n1. ✗ gemma2-fa2-generate-4d-mask [error; affected on this stack]" in diagnosis


def test_without_the_separator_our_options_come_first_and_the_rest_is_the_command(project, tmp_path):
    """`run --report FILE python script.py ARGS`: FILE is ours, and a `--` inside the command is its own."""
    report = tmp_path / "report.json"
    done = doctor_run(project, "--report", report, sys.executable, BEHAVES, "segfault", "--", "--report")
    assert done.returncode == 128 + signal.SIGSEGV
    assert json.loads(report.read_text())["command"] == [
        sys.executable,
        str(BEHAVES),
        "segfault",
        "--",
        "--report",
    ]


@pytest.mark.parametrize(("command", "code"), [(["sh", "-c", "exit 3"], 3), (["false"], 1)])
def test_a_failure_that_printed_nothing_is_one_short_line(project, command, code):
    """No banner, no "last 0 bytes", no "No known cause": there was nothing to read."""
    done = doctor_run(at_80_columns(project), "--", *command)
    assert (done.returncode, done.stdout) == (code, "")
    assert done.stderr.splitlines() == [
        f"attn-doctor: the command exited with code {code} and printed nothing to diagnose."
    ]
    assert lines_wider_than(done.stderr, 80) == []
    github = doctor_run(project, "--format", "github", "--", *command)
    assert github.stdout.splitlines() == [
        f"::notice title=attn-doctor::The command exited with code {code} and printed nothing to diagnose."
    ]


@pytest.mark.parametrize(("count", "amount"), [(1, "1 line (22 bytes)"), (3, "3 lines (66 bytes)")])
def test_output_with_no_known_cause_says_so_and_how_much_was_read(project, count, amount):
    done = doctor_run(at_80_columns(project), "--", sys.executable, BEHAVES, "lines-then-fail", str(count))
    assert done.returncode == 2
    assert done.stdout == "".join(f"step {step} done; loss 0.1\n" for step in range(1, count + 1))
    assert done.stderr.splitlines() == [
        "",
        "attn-doctor: the command exited with code 2; no known cause in its output.",
        f"Read all it printed: {amount}.",
        "(`attn-doctor check` still checks the stack itself.)",
    ]
    assert lines_wider_than(done.stderr, 80) == []


def test_a_known_cause_fits_80_columns(project):
    """The diagnosis after seed A's output (lines of 188 columns, the command's own and left whole)
    fits COLUMNS=80: a banner exactly that wide, words wrapped, the rerun command with ``\\`` ends."""
    wrapped = doctor_run(at_80_columns(project), "--", sys.executable, SEED_A)
    alone = direct(project, sys.executable, SEED_A)
    assert wrapped.returncode == alone.returncode == 1
    assert wrapped.stderr.startswith(alone.stderr) and lines_wider_than(alone.stderr, 80)
    diagnosis = wrapped.stderr[len(alone.stderr) :]
    assert lines_wider_than(diagnosis, 80) == []
    lines = diagnosis.splitlines()
    assert lines[0] == ""
    assert lines[1].startswith("── attn-doctor: the command exited with code 1; diagnosis of its output ──")
    assert len(lines[1]) == 80
    assert "\n1. ✗ gemma2-fa2-generate-4d-mask [error; affected on this stack]\n" in diagnosis
    start = next(i for i, line in enumerate(lines) if line.startswith("    CUDA_LAUNCH_BLOCKING=1 "))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith(" \\"))
    rerun = " ".join(line.rstrip(" \\") for line in lines[start : end + 1])
    assert shlex.split(rerun) == ["CUDA_LAUNCH_BLOCKING=1", sys.executable, str(SEED_A)]


def test_on_a_terminal_80_wide_the_diagnosis_fits_it(project):
    """No COLUMNS: the width is the terminal's (stty sets it, as a resized window would)."""
    folder, env = project
    doctor = [sys.executable, "-m", "attn_doctor", "run", "--", sys.executable, str(SEED_A)]
    command = ["sh", "-c", 'stty cols 80 rows 24 && exec "$@"', "sh", *doctor]
    code, seen = under_a_terminal(command, env, folder)
    assert code == 1, seen
    diagnosis = seen[seen.index("── attn-doctor: the command exited with code 1") :].splitlines()
    assert len(diagnosis[0]) == 80
    assert lines_wider_than("\n".join(diagnosis), 80) == []
    assert "1. ✗ gemma2-fa2-generate-4d-mask [error; affected on this stack]" in diagnosis


def test_a_cause_no_rule_names_is_reasoned_in_the_diagnosis(project, tmp_path):
    """The command prints flash-attn's head_size check (trl#6837's log) and fails: the diagnosis
    gives the cause reasoned from the releases' own code, in text and as a GitHub annotation."""
    log = case_log("usage/huggingface-trl-6837.toml", tmp_path)
    printing = [sys.executable, "-c", f"import sys; sys.stderr.write(open({str(log)!r}).read()); sys.exit(1)"]
    text = doctor_run(project, "--", *printing)
    assert text.returncode == 1
    assert (
        "Reasoned from the releases' own code" in text.stderr
        and "[user error] flash-attn raises" in text.stderr
    )
    github = doctor_run(project, "--format", "github", "--", *printing).stdout
    assert "::error title=attn-doctor origin%3Aflash-attn%3A" in github  # gh_property escapes ":"
