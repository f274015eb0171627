"""A uv.lock is read as ``uv sync`` installs it (issue 37, cause 3): from the project through its
dependencies and its default dependency groups, no optional extras. open-instruct (at e6c3044,
tests/fixtures/rulecond/open-instruct) locks torch twice, 2.10.0 from the package index and
2.10.0+cu128 for its `cuda12` group, which its pyproject makes a default group
(``default-groups = ["dev", "cuda12"]``, conflicting with `cuda13`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support import REPO, cli

OPEN_INSTRUCT = REPO / "tests" / "fixtures" / "rulecond" / "open-instruct"


def packages(lock: Path) -> dict[str, dict]:
    result = cli("check", "-r", lock, "--gpu", "H100", "--no-scan", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["environment"]["packages"]


def test_the_default_groups_of_the_pyproject_choose_the_cuda12_torch():
    found = packages(OPEN_INSTRUCT / "uv.lock")
    assert found["torch"]["version"] == "2.10.0+cu128"
    assert found["torch"]["origin"].endswith("(groups dev, cuda12)")
    assert found["flash-attn"]["version"] == "2.8.3+cu128torch2.10"  # the cuda12 group's wheel


def test_without_the_pyproject_only_uvs_default_group_is_resolved(tmp_path: Path):
    """uv's own default is the `dev` group: without the cuda12 group, the project's own dependencies
    take torch and flash-attn from the package index (the lock's entries for neither group)."""
    shutil.copy(OPEN_INSTRUCT / "uv.lock", tmp_path / "uv.lock")
    found = packages(tmp_path / "uv.lock")
    assert found["torch"]["origin"].endswith("(groups dev)")
    assert found["torch"]["version"] == "2.10.0"
    assert found["flash-attn"]["version"] == "2.8.3.post1" and found["flash-attn"]["wheel"] is None


def test_optional_extras_are_not_installed():
    """`code` and `dr-tulu` are the project's extras: `uv sync` installs them only when asked."""
    lock = (OPEN_INSTRUCT / "uv.lock").read_text()
    assert '[package.optional-dependencies]\ncode = [\n    { name = "pydantic" }' in lock
    assert "authlib" not in packages(OPEN_INSTRUCT / "uv.lock")
