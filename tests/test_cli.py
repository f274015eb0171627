"""The CLI as users start it: console script and ``python -m``, as separate processes."""

from __future__ import annotations

import os
import subprocess
import sys

from support import cli

from attn_doctor import __version__


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_version_and_module_entry():
    result = run("-m", "attn_doctor", "--version")
    assert result.returncode == 0 and result.stdout.strip() == f"attn-doctor {__version__}"


def test_check_imports_no_heavy_library():
    code = (
        "import sys\nfrom attn_doctor.cli import app\n"
        "try:\n    app(['check', '--pin', 'transformers==4.44.0'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'flash_attn', 'triton', 'rich') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    result = run("-c", code)
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr


def test_no_color_gives_plain_output():
    result = run("-m", "attn_doctor", "check", "--pin", "transformers==4.44.0", env={"NO_COLOR": "1"})
    assert result.returncode == 1
    assert "\x1b[" not in result.stdout and "[✗]" in result.stdout


def test_rules_list_and_show():
    listing = cli("rules", "list").stdout.splitlines()
    assert len(listing) >= 30
    shown = cli("rules", "show", "gemma2-fa2-cu-seqlens")
    assert shown.exit_code == 0
    assert "https://" in shown.stdout and "transformers" in shown.stdout
    assert cli("rules", "show", "no-such-rule").exit_code == 2


def test_database_validates():
    result = cli("rules", "validate")
    assert result.exit_code == 0, result.stderr
    assert int(result.stdout.split()[1]) >= 30
