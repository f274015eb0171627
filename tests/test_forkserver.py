"""The fork server under real processes: children fork from one process that imported the
preloaded modules once, keep their own process group, output, exit status and timeout, and the
launcher falls back to fresh processes (and says so) when the server cannot be trusted."""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attn_doctor.forkserver import Launcher, ServerGone
from attn_doctor.isolation import child_environment
from tests.support import REPO

PRELOAD = ["tests.fork_children.preloaded"]
CHILD = "tests.fork_children.child"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("ATTN_DOCTOR_TEST_IMPORTS", str(tmp_path / "imports"))
    monkeypatch.delenv("ATTN_DOCTOR_FORK", raising=False)
    return child_environment()


def imports(env: dict[str, str]) -> list[str]:
    path = Path(env["ATTN_DOCTOR_TEST_IMPORTS"])
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_each_child_is_its_own_process_group_with_its_own_output_and_exit_code(env, fork):
    with Launcher(env, PRELOAD, fork=fork) as launcher:
        outputs = [launcher.run(CHILD, ["where"], timeout_s=60) for _ in range(3)]
        note = launcher.note
    seen = [json.loads(output.stdout) for output in outputs]
    assert [output.returncode for output in outputs] == [5, 5, 5]
    assert all(output.stderr == "to stderr\n" and not output.timed_out for output in outputs)
    assert len({child["pid"] for child in seen}) == 3
    assert all(child["pgid"] == child["pid"] for child in seen)  # setsid: a group to kill
    if fork:
        assert note.startswith("children forked from one process that imported tests.fork_children.preloaded")
        assert len(imports(env)) == 1  # imported once, by the server, whose children these are
        assert {child["ppid"] for child in seen} == {int(imports(env)[0])}
    else:
        assert note == "each child in a fresh process (asked for)"
        assert len(imports(env)) == 3


def test_a_timeout_kills_the_forked_childs_whole_group(env):
    with Launcher(env, PRELOAD) as launcher:
        started = time.monotonic()
        output = launcher.run(CHILD, ["grandchild-then-hang"], timeout_s=3)
        note = launcher.note
    assert output.timed_out and output.returncode == -9
    assert note.startswith("children forked from one process")  # a timeout is the child's, not the server's
    assert time.monotonic() - started < 30
    grandchild = json.loads(output.stdout.splitlines()[0])["grandchild"]
    assert _dies(grandchild)


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (
            "segfault",
            "(the fork server failed: it exited while importing (code -11): ",
        ),  # + faulthandler's line
        (
            "exit",
            "(the fork server failed: it exited while importing (code 3): preloaded: cannot start here)",
        ),
        ("silent", "(the fork server failed: it exited while importing (code 4): no output)"),
        ("hang", "(the fork server failed: it had not finished importing after 3 s)"),
    ],
)
def test_a_server_that_dies_or_hangs_while_importing_means_fresh_processes(env, monkeypatch, behaviour, said):
    monkeypatch.setenv("ATTN_DOCTOR_TEST_PRELOAD", behaviour)
    with Launcher({**env, "ATTN_DOCTOR_TEST_PRELOAD": behaviour}, PRELOAD, timeout_s=3) as launcher:
        output = launcher.run(CHILD, ["where"], timeout_s=3)
        assert launcher.note.startswith(f"each child in a fresh process {said}")
        assert behaviour == "segfault" or launcher.note == f"each child in a fresh process {said}"
    # the fresh child imports the module itself, and meets the same fate
    if behaviour == "hang":
        assert output.timed_out
    else:
        assert output.returncode == {"segfault": -11, "exit": 3, "silent": 4}[behaviour]


def test_a_preload_that_prints_on_stdout_still_forks_and_the_note_names_the_stack(env):
    """The server's stdout is its protocol: a banner a library prints on import is skipped, not
    the end of the server; the note names what was preloaded, not attn-doctor's own modules."""
    chatty = {**env, "ATTN_DOCTOR_TEST_PRELOAD": "chatty"}
    with Launcher(chatty, ["attn_doctor.redact", *PRELOAD]) as launcher:
        output = launcher.run(CHILD, ["where"], timeout_s=60)
        note = launcher.note
    assert output.returncode == 5 and json.loads(output.stdout.splitlines()[0])["ppid"] != os.getpid()
    assert re.fullmatch(
        r"children forked from one process that imported tests\.fork_children\.preloaded in [0-9.]+ s", note
    )


def test_a_server_that_dies_under_a_child_means_fresh_processes_from_then_on(env):
    """The server killed while a child runs (the OOM killer's choice): that child runs again in a
    fresh process, and so does every later one; the note says why."""
    with Launcher(env, PRELOAD) as launcher:
        first = launcher.run(CHILD, ["kill-the-server"], timeout_s=60)
        note = launcher.note
        second = launcher.run(CHILD, ["where"], timeout_s=60)
    assert (first.returncode, first.stdout) == (0, "fresh\n")
    assert note == (
        "each child in a fresh process (the fork server failed: it exited while a child was running;"
        " the rest ran in fresh processes)"
    )
    assert second.returncode == 5 and json.loads(second.stdout.splitlines()[0])["ppid"] == os.getpid()


def test_cuda_initialised_by_an_import_means_fresh_processes(env, tmp_path, monkeypatch):
    # What a GPU would do, which CI has none of: the preload leaves torch's CUDA initialised.
    (tmp_path / "initialises_cuda.py").write_text("import torch\ntorch.cuda._initialized = True\n")
    environment = {**env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    with Launcher(environment, ["initialises_cuda"]) as launcher:
        output = launcher.run(CHILD, ["where"], timeout_s=60)
        assert "importing the stack initialised CUDA, after which fork is unsafe" in launcher.note
    assert output.returncode == 5


def test_closing_the_launcher_kills_a_child_still_running(env):
    """As on Ctrl-C: the doctor leaves, the server sees its stdin close and kills what runs."""
    launcher = Launcher(env, PRELOAD)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(launcher.run, CHILD, ["grandchild-then-hang"], 600)
        deadline = time.monotonic() + 30
        while not any(r.pid for r in launcher._server._requests.values()) and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
        [request] = launcher._server._requests.values()  # type: ignore[union-attr]
        launcher.close()
        with pytest.raises(ServerGone):
            pending.result(timeout=60)
    assert _dies(request.pid)


def _dies(pid: int, within_s: float = 10) -> bool:
    """SIGKILL is delivered asynchronously: give the process a moment to be gone."""
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, only not yet reaped
        return stat.read().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_a_child_gets_the_launchers_environment_not_the_parents(env, fork):
    """xǁLauncherǁrun__mutmut_11 (a fresh child got the parent's environment, None): the repro and
    probe children run under the environment the launcher was given (CUDA_LAUNCH_BLOCKING=1 and
    the like), which the test process does not have."""
    assert "ATTN_DOCTOR_TEST_LAUNCHER_ONLY" not in os.environ
    with Launcher(
        {**env, "ATTN_DOCTOR_TEST_LAUNCHER_ONLY": "from the launcher"}, PRELOAD, fork=fork
    ) as launcher:
        output = launcher.run(CHILD, ["environment"], timeout_s=60)
    assert (output.returncode, output.stdout) == (0, "from the launcher\n")


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_a_child_sees_its_arguments_in_sys_argv(env, fork):
    """x__child__mutmut_28 (a forked child's sys.argv was None): an entry that parses sys.argv
    itself (argparse does) sees its arguments, forked as in a fresh process."""
    with Launcher(env, PRELOAD, fork=fork) as launcher:
        output = launcher.run(CHILD, ["argv"], timeout_s=60)
    assert (output.returncode, output.stdout) == (0, '["argv"]\n'), output.stderr


def test_a_stack_whose_import_initialised_cuda_is_not_forked(env):
    """xǁLauncherǁ_ready_server__mutmut_15 (the note's words): forking after CUDA is initialised is
    unsafe, so the children run fresh and the note says why. The preloaded module leaves a torch
    whose CUDA is initialised, as importing some stacks does on a GPU machine."""
    with Launcher({**env, "ATTN_DOCTOR_TEST_PRELOAD": "cuda-initialised"}, PRELOAD) as launcher:
        output = launcher.run(CHILD, ["where"], timeout_s=60)
        note = launcher.note
    assert output.returncode == 5
    assert (
        note
        == "each child in a fresh process (importing the stack initialised CUDA, after which fork is unsafe)"
    )


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_an_entry_that_raises_exits_1_with_its_own_traceback(env, fork):
    """x__child__mutmut_1 (the forked child's code started as None): an exception other than
    SystemExit is exit code 1 with the entry's traceback, as in a fresh process, not a second
    error from os._exit(None) under it."""
    with Launcher(env, PRELOAD, fork=fork) as launcher:
        output = launcher.run(CHILD, ["raise"], timeout_s=60)
    assert output.returncode == 1
    assert output.stderr.rstrip().splitlines()[-1] == "RuntimeError: the entry failed", output.stderr
    assert "TypeError" not in output.stderr
