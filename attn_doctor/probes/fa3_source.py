"""Scan a flash-attention checkout for fa3-hopper-pipelineparams-build before a long FA3 build.

A source checkout carries no package version, so the rule alone flags every FA3 source build; the
file itself says whether this revision has the bug. Early-February-2025 revisions of
``hopper/flash_fwd_kernel_sm90.h`` initialise ``PipelineParamsV pipeline_params_v =
pipeline_params_k;``, which nvcc rejects for the FP8 Transpose_V kernels; the fix copies K's params
into a ``PipelineParamsVt pipeline_params_vt`` instead. Plain file reading: no torch, no compiler.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from attn_doctor.errors import InputError
from attn_doctor.probes.observation import Observation, ProbeVerdict

RULE = "fa3-hopper-pipelineparams-build"
KERNEL_FILE = "flash_fwd_kernel_sm90.h"
MAX_BYTES = 4 * 1024 * 1024  # the real file is about 25 KB
BUGGY = re.compile(r"\bPipelineParamsV\s+pipeline_params_v\s*=\s*pipeline_params_k\s*;")
FIXED = re.compile(r"\bPipelineParamsVt\s+pipeline_params_vt\b")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
SHA = re.compile(r"[0-9a-f]{40}")


def scan_source(path: Path) -> list[Observation]:
    """One observation about ``path``, a flash-attention checkout or its hopper/ folder.

    Raises InputError for a path that is missing, not a folder, or whose kernel file is not a
    readable text file of sane size."""
    if not path.exists():
        raise InputError(str(path), "does not exist")
    if not path.is_dir():
        raise InputError(
            str(path), "is not a directory: give a flash-attention checkout or its hopper/ folder"
        )
    kernel = _kernel_file(path)
    if isinstance(kernel, str):
        return [Observation(RULE, ProbeVerdict.SKIPPED, kernel)]
    revision = git_revision(kernel.parent)
    return [
        judge(kernel, _without_comments(_read_text(kernel)), f" (revision {revision})" if revision else "")
    ]


def judge(kernel: Path, code: str, at: str) -> Observation:
    """The rule's own test: the buggy initialisation present and the fixed one absent."""
    buggy, fixed = BUGGY.search(code), FIXED.search(code)
    if buggy and not fixed:
        line = code.count("\n", 0, buggy.start()) + 1
        return Observation(
            RULE,
            ProbeVerdict.AFFECTED,
            f"{kernel}:{line} initialises `PipelineParamsV pipeline_params_v = pipeline_params_k;` "
            f"and has no `PipelineParamsVt pipeline_params_vt`: nvcc fails on the FP8 Transpose_V "
            f"kernels{at}",
        )
    if fixed:
        how = "has the fixed form, `PipelineParamsVt pipeline_params_vt`"
    else:
        how = "does not initialise a PipelineParamsV from pipeline_params_k"
    return Observation(RULE, ProbeVerdict.NOT_AFFECTED, f"{kernel} {how}{at}")


def _kernel_file(path: Path) -> Path | str:
    """hopper/flash_fwd_kernel_sm90.h under ``path`` (a checkout or hopper/ itself), or why there is none."""
    hopper = path / "hopper"
    if not hopper.is_dir() and path.name == "hopper":
        hopper = path
    if not hopper.is_dir():
        return f"{path} has no hopper/ folder: not a flash-attention checkout with FA3 sources"
    kernel = hopper / KERNEL_FILE
    if not kernel.exists():
        return f"{hopper} has no {KERNEL_FILE}: this revision's FA3 sources are laid out differently"
    return kernel


def git_revision(folder: Path) -> str | None:
    """The commit checked out in the git work tree holding ``folder``; None when there is none."""
    for root in (folder, *folder.parents):
        if (root / ".git").exists():
            return _read_head(root / ".git") or _rev_parse(root)
    return None


def _read_text(kernel: Path) -> str:
    if not kernel.is_file():
        raise InputError(str(kernel), "is not a regular file")
    try:
        with kernel.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(str(kernel), f"cannot be read: {exc.strerror or exc}") from exc
    if len(data) > MAX_BYTES:
        raise InputError(str(kernel), f"is larger than {MAX_BYTES // (1024 * 1024)} MiB: not a C++ header")
    if b"\0" in data:
        raise InputError(str(kernel), "is binary, not a C++ header")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(kernel), f"is not UTF-8 text (byte {exc.start})") from exc


def _without_comments(text: str) -> str:
    """``text`` with comments blanked out (line numbers kept), so commented-out code does not count."""
    return COMMENT.sub(lambda match: re.sub(r"[^\n]", " ", match.group()), text)


def _read_head(dot_git: Path) -> str | None:
    """HEAD's commit, read from the files: a detached sha, a loose ref or packed-refs."""
    try:
        git_dir = _git_dir(dot_git)
        head = (git_dir / "HEAD").read_text().strip()
        if SHA.fullmatch(head):
            return head
        if not head.startswith("ref: "):
            return None
        ref = head[len("ref: ") :]
        common = _common_dir(git_dir)
        for folder in dict.fromkeys((git_dir, common)):
            loose = folder / ref
            if loose.is_file():
                sha = loose.read_text().strip()
                return sha if SHA.fullmatch(sha) else None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and SHA.fullmatch(sha):
                    return sha
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _git_dir(dot_git: Path) -> Path:
    """``.git`` itself, or where a worktree's or submodule's ``.git`` file points."""
    if dot_git.is_dir():
        return dot_git
    pointer = dot_git.read_text().strip()
    if not pointer.startswith("gitdir: "):
        raise OSError(f"{dot_git} is not a gitdir pointer")
    return (dot_git.parent / pointer[len("gitdir: ") :]).resolve()


def _common_dir(git_dir: Path) -> Path:
    """A linked worktree keeps its branches in the main repository's git dir."""
    common = git_dir / "commondir"
    return (git_dir / common.read_text().strip()).resolve() if common.is_file() else git_dir


def _rev_parse(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and SHA.fullmatch(sha) else None
