"""`check --source`'s scan of a flash-attention checkout, on excerpts of the real
hopper/flash_fwd_kernel_sm90.h (fixtures/fa3/) laid out as checkouts, some of them real git ones."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from attn_doctor.errors import InputError
from attn_doctor.probes.fa3_source import MAX_BYTES, _read_head, git_revision, scan_source
from attn_doctor.probes.observation import Observation, ProbeVerdict

FIXTURES = Path(__file__).parent / "fixtures" / "fa3"
AFFECTED = FIXTURES / "affected.h"
FIXED = FIXTURES / "fixed.h"
BEFORE = FIXTURES / "before.h"


def checkout(root: Path, text: str | bytes) -> Path:
    """A flash-attention tree whose hopper/flash_fwd_kernel_sm90.h holds ``text``."""
    (root / "hopper").mkdir(parents=True)
    kernel = root / "hopper" / "flash_fwd_kernel_sm90.h"
    if isinstance(text, bytes):
        kernel.write_bytes(text)
    else:
        kernel.write_text(text)
    return root


def git(root: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(root), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def committed(root: Path, text: str) -> Path:
    checkout(root, text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture")
    return root


def only(observations: list[Observation]) -> Observation:
    [observation] = observations
    assert observation.rule == "fa3-hopper-pipelineparams-build"
    return observation


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.mark.parametrize(
    ("fixture", "verdict", "said"),
    [
        (AFFECTED, ProbeVerdict.AFFECTED, "flash_fwd_kernel_sm90.h:8 initialises `PipelineParamsV"),
        (FIXED, ProbeVerdict.NOT_AFFECTED, "has the fixed form, `PipelineParamsVt pipeline_params_vt`"),
        (BEFORE, ProbeVerdict.NOT_AFFECTED, "does not initialise a PipelineParamsV from pipeline_params_k"),
    ],
)
def test_upstream_revisions(tmp_path: Path, fixture: Path, verdict: ProbeVerdict, said: str) -> None:
    root = checkout(tmp_path / "flash-attention", fixture.read_text())
    for given in (root, root / "hopper"):
        observation = only(scan_source(given))
        assert observation.verdict is verdict
        assert said in observation.evidence
        assert "(revision " not in observation.evidence


@needs_git
@pytest.mark.parametrize("fixture", [AFFECTED, FIXED])
def test_a_git_checkout_names_its_revision(tmp_path: Path, fixture: Path) -> None:
    root = committed(tmp_path / "flash-attention", fixture.read_text())
    head = git(root, "rev-parse", "HEAD")
    assert f"(revision {head})" in only(scan_source(root)).evidence
    assert f"(revision {head})" in only(scan_source(root / "hopper")).evidence


@needs_git
@pytest.mark.parametrize("state", ["loose-branch", "packed-refs", "detached"])
def test_the_revision_is_read_from_the_git_files(tmp_path: Path, state: str) -> None:
    root = committed(tmp_path / "flash-attention", FIXED.read_text())
    if state == "packed-refs":
        git(root, "pack-refs", "--all")
        assert not (root / ".git" / "refs" / "heads" / "main").exists()
    elif state == "detached":
        git(root, "checkout", "-q", "--detach")
    assert _read_head(root / ".git") == git(root, "rev-parse", "HEAD")


@needs_git
def test_a_linked_worktree_finds_its_branch_in_the_main_repository(tmp_path: Path) -> None:
    root = committed(tmp_path / "flash-attention", AFFECTED.read_text())
    git(root, "commit", "-q", "--allow-empty", "-m", "second")
    worktree = tmp_path / "worktree"
    git(root, "worktree", "add", "-q", "-b", "other", str(worktree), "HEAD~1")
    assert (worktree / ".git").is_file()
    assert (
        _read_head(worktree / ".git") == git(worktree, "rev-parse", "HEAD") != git(root, "rev-parse", "HEAD")
    )
    assert git_revision(worktree / "hopper") == git(worktree, "rev-parse", "HEAD")


def test_whitespace_and_comments_do_not_decide(tmp_path: Path) -> None:
    spread = AFFECTED.read_text().replace(
        "PipelineParamsV pipeline_params_v = pipeline_params_k;",
        "PipelineParamsV   pipeline_params_v\n            =  pipeline_params_k ;",
    )
    assert only(scan_source(checkout(tmp_path / "spread", spread))).verdict is ProbeVerdict.AFFECTED
    commented = BEFORE.read_text().replace(
        "MainloopPipelineK pipeline_k = [&] {",
        "// PipelineParamsV pipeline_params_v = pipeline_params_k;\n"
        "        /* PipelineParamsV pipeline_params_v = pipeline_params_k; */\n"
        "        MainloopPipelineK pipeline_k = [&] {",
    )
    assert only(scan_source(checkout(tmp_path / "commented", commented))).verdict is ProbeVerdict.NOT_AFFECTED


def test_no_hopper_sources_is_a_skip_that_says_which(tmp_path: Path) -> None:
    other = tmp_path / "not-flash-attention"
    other.mkdir()
    observation = only(scan_source(other))
    assert observation.verdict is ProbeVerdict.SKIPPED
    assert observation.evidence.startswith(f"{other} has no hopper/ folder")
    (other / "hopper").mkdir()
    observation = only(scan_source(other))
    assert observation.verdict is ProbeVerdict.SKIPPED
    assert f"{other / 'hopper'} has no flash_fwd_kernel_sm90.h" in observation.evidence


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "missing", "does not exist"),
        (lambda root: checkout(root, "x") / "hopper" / "flash_fwd_kernel_sm90.h", "is not a directory"),
        (lambda root: checkout(root, "// x\n" * (MAX_BYTES // 5 + 1)), "is larger than 4 MiB"),
        (lambda root: checkout(root, b"\x7fELF\x00\x01"), "is binary"),
        (lambda root: checkout(root, b"\xff\xfe PipelineParamsV"), "is not UTF-8 text"),
    ],
)
def test_bad_input_is_an_input_error(tmp_path: Path, make: Callable[[Path], Path], message: str) -> None:
    path = make(tmp_path / "flash-attention")
    with pytest.raises(InputError, match=message) as raised:
        scan_source(path)
    assert raised.value.source.startswith(str(tmp_path))


def test_a_kernel_path_that_is_no_regular_file_is_refused_without_reading(tmp_path: Path) -> None:
    root = tmp_path / "flash-attention"
    (root / "hopper").mkdir(parents=True)
    os.mkfifo(root / "hopper" / "flash_fwd_kernel_sm90.h")  # reading it would block
    with pytest.raises(InputError, match="is not a regular file"):
        scan_source(root)
