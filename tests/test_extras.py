"""Optional extras are installed only when asked (`--extra`, as `pip install .[x]` and `uv sync
--extra x`), and a package only an extra not asked for installs is "installed or not", never "not
installed" (issue 37, cause 3). axolotl's pyproject.toml (at 067b021, tests/projects/axolotl)
puts flash-attn in its `flash-attn` extra; open-instruct's uv.lock (at e6c3044) has the extras
`code` and `dr-tulu`."""

from __future__ import annotations

import json
from pathlib import Path

from support import REPO, cli

AXOLOTL = REPO / "tests" / "projects" / "axolotl" / "tree" / "pyproject.toml"
OPEN_INSTRUCT = REPO / "tests" / "fixtures" / "rulecond" / "open-instruct" / "uv.lock"


def report(*args: str | Path) -> dict:
    result = cli("check", *args, "--gpu", "H100", "--python", "3.11", "--no-scan", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_an_extra_not_asked_for_leaves_its_packages_installed_or_not():
    document = report("-r", AXOLOTL)
    assert "flash-attn" not in document["environment"]["packages"]
    maybe = document["environment"]["origins"]["maybe: flash-attn"]
    assert maybe.startswith("installed only with the extra 'flash-attn' (") and "--extra flash-attn" in maybe
    rule = {f["id"]: f for f in document["findings"]}["usage-flash-attn-not-installed"]
    assert rule["verdict"] != "affected"


def test_an_extra_asked_for_is_installed():
    document = report("-r", AXOLOTL, "--extra", "flash-attn")
    assert document["environment"]["packages"]["flash-attn"]["version"] == "2.8.3"


def fla_in_extra_code(tmp_path: Path) -> Path:
    """open-instruct's lock with flash-linear-attention moved from the project's dependencies into
    its extra ``code``, as a project that makes fla optional writes it."""
    text = OPEN_INSTRUCT.read_text(encoding="utf-8")
    edge = '    { name = "flash-linear-attention" },\n'
    assert text.count(edge) == 1
    text = text.replace(edge, "").replace("code = [\n", "code = [\n" + edge, 1)
    lock = tmp_path / "uv.lock"
    lock.write_text(text, encoding="utf-8")
    pyproject = OPEN_INSTRUCT.with_name("pyproject.toml")  # its default groups
    (tmp_path / "pyproject.toml").write_text(pyproject.read_text(encoding="utf-8"), encoding="utf-8")
    return lock


def test_a_uv_lock_extra_asked_for_is_walked(tmp_path):
    lock = fla_in_extra_code(tmp_path)
    document = report("-r", lock)
    assert "flash-linear-attention" not in document["environment"]["packages"]
    maybe = document["environment"]["origins"]["maybe: flash-linear-attention"]
    assert maybe.startswith("installed only with the extra 'code' (") and "--extra code" in maybe
    packages = report("-r", lock, "--extra", "code")["environment"]["packages"]
    assert packages["flash-linear-attention"]["version"] == "0.5.0"
    assert packages["torch"]["origin"].endswith("(groups dev, cuda12; extras code)")


def test_an_extra_no_file_defines_is_one_line_and_exit_2():
    result = cli("check", "-r", AXOLOTL, "--extra", "flash_attn", "--no-scan")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "--extra flash_attn: no -r file defines this extra (they define:" in result.stderr
