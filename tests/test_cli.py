"""The CLI as users start it: console script and ``python -m``, as separate processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import cli

from attn_doctor import __version__


def run(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def test_version_and_module_entry():
    result = run("-m", "attn_doctor", "--version")
    assert result.returncode == 0 and result.stdout.strip() == f"attn-doctor {__version__}"


# what `check` must never load: heavy libraries, and the other commands' modules
NOT_IN_CHECK = (
    "torch",
    "transformers",
    "flash_attn",
    "triton",
    "re2",
    "attn_doctor.kernels",
    "attn_doctor.repro",
    "attn_doctor.probes.runner",
    "attn_doctor.explain",
    "attn_doctor.engine.patterns",
    "attn_doctor.fixer",
    "attn_doctor.cluster",
    "attn_doctor.redact",
    "attn_doctor.report.explain_report",
    "attn_doctor.report.fix_report",
    "attn_doctor.report.issue",
    "attn_doctor.report.env_vars",
    "attn_doctor.report.repro_file",
)


@pytest.mark.parametrize("output_format", ["rich", "json", "markdown", "npd", "prometheus", "verdict"])
def test_check_imports_no_heavy_library_and_no_other_command(output_format):
    # not a TTY: the rich format prints plain text without importing rich
    names = NOT_IN_CHECK + (("rich",) if output_format == "rich" else ())
    code = (
        "import sys\nfrom attn_doctor.cli import app\n"
        f"try:\n    app(['check', '--pin', 'transformers==4.44.0', '--format', {output_format!r}])\n"
        "except SystemExit:\n    pass\n"
        f"names = {names!r}\n"
        "print('LOADED', sorted({m for m in sys.modules for n in names if (m + '.').startswith(n + '.')}))\n"
    )
    result = run("-c", code)
    assert "LOADED []" in result.stdout, result.stdout + result.stderr


# what `check` of a target that needs no install plan and no release fact must not load (issue 36:
# the planners, the release facts and packaging's requirement parser had crept onto every run);
# tomllib neither, once the rules are in their cache
NOT_WITHOUT_A_PLAN = (
    "attn_doctor.planner.registry",
    "attn_doctor.planner.stack",
    "attn_doctor.releases",
    "attn_doctor.engine.release_conditions",
    "attn_doctor.engine.fix_pins",
    "packaging.requirements",
    "packaging.utils",
    "tomllib",
    "importlib.resources",
)


def test_check_of_a_bare_target_loads_no_planner_release_facts_or_toml_parser(site, tmp_path):
    # what the libraries check needs load by themselves is not the doctor's doing: packaging's
    # version and specifiers load packaging.utils in some releases, typer loads what it loads
    code = (
        "import sys, importlib\n"
        "for needed in ('packaging.version', 'packaging.specifiers', 'typer', 'typer.main'):\n"
        "    importlib.import_module(needed)\n"
        "already = set(sys.modules)\n"
        "from attn_doctor.cli import app\n"
        f"try:\n    app(['check', '--no-scan', '--path', {str(site.path)!r}])\n"
        "except SystemExit:\n    pass\n"
        f"names = {NOT_WITHOUT_A_PLAN!r}\n"
        "print('LOADED', sorted({m for m in set(sys.modules) - already for n in names\n"
        "    if (m + '.').startswith(n + '.')}))\n"
    )
    # in a folder without a pyproject.toml; the first run fills the rules cache (parsing TOML)
    run("-c", code, cwd=tmp_path)
    result = run("-c", code, cwd=tmp_path)
    assert "LOADED []" in result.stdout, result.stdout + result.stderr


def test_no_color_gives_plain_output():
    args = ("check", "--pin", "transformers==4.44.0", "--feature", "flash_attention_2")
    result = run("-m", "attn_doctor", *args, env={"NO_COLOR": "1"})
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
