"""The wheel ships the rules database: a non-editable install into a fresh venv finds every rule."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

from support import REPO, needs_package_index


def test_wheel_ships_every_rule_and_installs(tmp_path: Path):
    needs_package_index()  # the build backend and the wheel's dependencies
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", REPO],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next((tmp_path / "dist").glob("attn_doctor-*.whl"))
    shipped = {
        Path(name).name
        for name in zipfile.ZipFile(wheel).namelist()
        if name.startswith("attn_doctor/rules_db/")
    }
    source = {path.name for path in (REPO / "rules").glob("*.toml")}
    assert shipped == source and len(source) >= 30

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel],
        check=True,
        capture_output=True,
        timeout=600,
    )
    # the installed wheel alone: a PYTHONPATH naming the checkout would import it instead
    alone = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    where = subprocess.run(
        [python, "-c", "import attn_doctor.engine.loader as l; print(l.database_path())"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=alone,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(env_dir)), where
    validated = subprocess.run(
        [env_dir / "bin" / "attn-doctor", "rules", "validate"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=alone,
        timeout=120,
    )
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.strip() == f"ok: {len(source)} rules valid"
