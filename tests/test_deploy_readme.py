"""The README's "On a fleet" section shows real output: each ```text block that starts with a
`$ ` command is run as one bash script in the checkout (stdout and stderr together, as a terminal
shows them), with the CLI under test first on PATH, and its output must be the block's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def fleet_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## On a fleet", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    return [block for block in blocks if block.startswith("$ ")]


def test_the_section_has_its_examples() -> None:
    commands = [line for block in fleet_blocks() for line in block.splitlines() if line.startswith("$ ")]
    joined = "\n".join(commands)
    for script in ("attn-doctor-npd-plugin.sh", "attn-doctor-prolog.sh", "attn-doctor-taskprolog.sh"):
        assert script in joined
    assert "--format verdict" in joined and "attn-doctor-textfile.sh" in joined


@pytest.mark.parametrize("block", fleet_blocks(), ids=lambda block: block.splitlines()[-1][:40])
def test_the_example_prints_what_the_readme_shows(block: str, tmp_path: Path) -> None:
    lines = block.splitlines()
    script = "exec 2>&1\n" + "\n".join(line[2:] for line in lines if line.startswith("$ ")) + "\n"
    expected = [line for line in lines if not line.startswith("$ ")]
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "ATTN_DOCTOR")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["ATTN_DOCTOR_CONF"] = str(tmp_path / "no-such.conf")  # not a node's /etc/slurm/attn-doctor.conf

    done = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )

    assert done.stdout.splitlines() == expected
