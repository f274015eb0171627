"""benchmarks/blind_explain_score.py scores the real CLI's answers: right, wrong, none, and a cause
explain rules out for the stack counts as no answer (explain itself then says "No known cause")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import REPO

SCRIPT = REPO / "benchmarks" / "blind_explain_score.py"
WINDOWS_WARNING = (
    r"ComfyUI\comfy\ldm\modules\attention.py:407: UserWarning: 1Torch was not compiled with flash attention."
)
SHARED_MEMORY = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 115712, "
    "Hardware limit: 101376. Reducing block sizes or `num_stages` may help"
)


def write_case(folder: Path, name: str, log: str, expected: str, versions: str = "") -> None:
    (folder / f"{name}.toml").write_text(
        f'url = "https://example.invalid/{name}"\n'
        f"log = '''\n{log}\n'''\n"
        f"[versions]\n{versions}\n"
        f"[expected]\n{expected}\n",
        encoding="utf-8",
    )


def score(folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), "--misses"], capture_output=True, text=True, env=env
    )


def test_scores_right_wrong_none_and_ruled_out(tmp_path):
    write_case(
        tmp_path,
        "a-windows",
        WINDOWS_WARNING,
        'rules = ["sdpa-windows-no-flash-attention"]',
        'platform = "windows"',
    )
    write_case(tmp_path, "b-no-platform", WINDOWS_WARNING, 'rules = ["sdpa-windows-no-flash-attention"]')
    write_case(tmp_path, "c-keywords", SHARED_MEMORY, 'keywords = ["triton", "shared memory|smem"]')
    write_case(tmp_path, "d-wrong", SHARED_MEMORY, 'rules = ["xformers-not-installed"]')
    write_case(tmp_path, "e-nothing", "all good, loss 0.01", 'keywords = ["anything"]')
    result = score(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "5 cases: 2 right, 0 right-not-first, 1 wrong, 2 none" in result.stdout
    assert "No known cause (ruled out:\n  sdpa-windows-no-flash-attention)" in result.stdout
    assert "d-wrong: explain said triton-shared-memory-out-of-resources" in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


def test_a_case_without_expected_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "broken.toml").write_text('url = "x"\nlog = "y"\n', encoding="utf-8")
    result = score(tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"blind_explain_score: {tmp_path / 'broken.toml'}: a case needs [expected] rules or keywords"
    ]
