"""The README's install, followed word for word in a fresh venv, gives a working doctor: `check`,
`repro rotary-dim --device cpu` (REPRODUCED and NOT REPRODUCED) and `explain` on a seed log.

The suite's own environment has the test extra (numpy among it), so it never saw that the repro
extra lacked numpy; this venv holds only what the README's commands install. It is built once per
pyproject.toml and README command (``ATTN_DOCTOR_README_VENV_CACHE``, default
~/.cache/attn-doctor/readme-venvs; older ones are removed), and the package itself is reinstalled
from this checkout (non-editable) on every run, so the test sees the current code.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import needs_package_index

from attn_doctor._compat import tomllib
from tests import release_venvs

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(
    os.environ.get("ATTN_DOCTOR_README_VENV_CACHE", Path.home() / ".cache" / "attn-doctor" / "readme-venvs")
)
SEED_LOG = REPO / "tests" / "logs" / "seed_a.log"


def readme_install() -> str:
    """The repro section's install command, exactly as the README gives it."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## repro\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"`(pip install torch==[^`]+&& pip install '\.\[repro\]')`", section)
    assert len(found) == 1, "the README's repro section gives one install command"
    return str(found[0])


def _run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=cwd, env=env)
    if done.returncode != 0:
        raise AssertionError(f"{shlex.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def readme_venv() -> Path:
    """A venv with what the README's install puts there, and this checkout's package in it."""
    needs_package_index()
    install = readme_install()
    key = hashlib.sha256(
        b"\0".join([(REPO / "pyproject.toml").read_bytes(), install.encode(), sys.version.encode()])
    ).hexdigest()[:16]
    path = CACHE / key
    python = str(path / "bin" / "python")
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (path / ".ready").exists():  # the dependencies are there: this checkout's package, fresh
            pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(REPO)]
            _run(pip, cwd=path)
            return path
        for stale in CACHE.iterdir():
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(path)])
        for part in install.split("&&"):  # the README's words; `pip` is the venv's
            words = shlex.split(part)
            assert words[0] == "pip", install
            _run([python, "-m", "pip", *words[1:]], cwd=REPO)
        release_venvs.deduplicate(path)  # torch's files are the release venvs' base's: one copy
        (path / ".ready").write_text(install + "\n")
    return path


@pytest.mark.releases
def test_the_readme_install_runs_check_repro_and_explain(tmp_path: Path) -> None:
    venv = readme_venv()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("COLUMNS", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    doctor = str(venv / "bin" / "attn-doctor")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # from an empty folder: nothing of this checkout is importable but the installed copy
        return subprocess.run(
            [doctor, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
        )

    where = _run(
        [str(venv / "bin" / "python"), "-c", "import attn_doctor; print(attn_doctor.__file__)"],
        env=env,
        cwd=tmp_path,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), "the doctor runs from the installed copy"
    pip_list = _run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"], env=env)
    listed = {canonicalize_name(row["name"]) for row in json.loads(pip_list.stdout)}
    assert not listed & {"pytest", "jsonschema", "hypothesis"}, "no test extra in the README's venv"

    check = run("check")
    assert check.returncode in (0, 1), check.stdout + check.stderr  # 1: findings; 2/3: it broke
    assert "attn-doctor check" in check.stdout and "torch 2.13.0" in check.stdout, check.stdout

    repro = run("repro", "rotary-dim", "--device", "cpu")
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert "rotary-dim / rotary-dim-is-model-dim: REPRODUCED (bug expected)" in repro.stdout, repro.stdout
    assert "rotary-dim / fixed: NOT REPRODUCED (clean run expected)" in repro.stdout, repro.stdout

    explain = run("explain", str(SEED_LOG))
    assert explain.returncode == 0, explain.stdout + explain.stderr
    assert "gemma2-fa2-generate-4d-mask" in explain.stdout, explain.stdout


def _requirement_closure(names: list[str]) -> set[str]:
    """``names`` and everything they require (installed here), with no extras."""
    seen: set[str] = set()
    todo = [canonicalize_name(name) for name in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requirements = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requirements:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def venv_with_only(folder: Path, distributions: set[str]) -> str:
    """A venv whose site-packages links the files of ``distributions`` (as installed here) and
    nothing else: what installing exactly those would give, without a download. Its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    target = Path(_run([str(python), "-c", purelib]).stdout.strip())
    for name in sorted(distributions):
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for top in {file.parts[0] for file in distribution.files or [] if file.parts[0] != ".."}:
            source = Path(str(distribution.locate_file(top)))
            if source.exists() and not (target / top).exists():
                (target / top).symlink_to(source)
    return str(python)


def test_the_repro_extra_installs_everything_the_cpu_path_imports(tmp_path: Path) -> None:
    """Every case on the CPU (the Triton interpreter) runs with only the core dependencies, the
    repro extra and what they require: numpy was missing (triton's interpreter imports it, and
    neither torch nor triton requires it), so every case was an ERROR."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["repro"]]
    allowed = _requirement_closure([Requirement(line).name for line in requirements])
    python = venv_with_only(tmp_path / "venv", allowed)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    found = subprocess.run(
        [python, "-m", "attn_doctor", "repro", "--all", "--device", "cpu", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    rows = [row for row in json.loads(found.stdout)["results"] if row["expect_bug"] is not None]
    assert rows and found.returncode == 0, found.stdout[-3000:] + found.stderr[-3000:]
    for row in rows:
        assert row["status"] == ("REPRODUCED" if row["expect_bug"] else "NOT REPRODUCED"), row["detail"]
