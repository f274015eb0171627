"""`check -r` reads every common pin file (attn_doctor/facts/sources/): lock files, conda files and
pyproject.toml build the same target as a requirements file, each fact with its FILE:LINE, markers
evaluated for the target. Fixtures: tests/fixtures/pinfiles/README.md says where each comes from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import REPO, cli
from test_bad_input import assert_one_line_error

PINFILES = REPO / "tests" / "fixtures" / "pinfiles"
GEMMA = ("--gpu", "sm_80", "--feature", "flash_attention_2")


def check_json(*args: str | Path) -> dict:
    result = cli("check", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def origin_line(origin: str) -> str:
    """The text of the FILE:LINE an origin names."""
    file, _, line = origin.rpartition(":")
    return Path(file).read_text(encoding="utf-8").splitlines()[int(line) - 1]


@pytest.mark.parametrize(
    "name",
    [
        "uv.lock",
        "poetry.lock",
        "pylock.toml",
        "Pipfile.lock",
        "environment.yml",
        "conda-export.txt",
        "conda-explicit.txt",
        "setup.py",
    ],
)
def test_every_pin_file_pins_transformers_for_the_gemma_rule(name: str) -> None:
    report = check_json("-r", PINFILES / name, *GEMMA)
    transformers = report["environment"]["packages"]["transformers"]
    assert transformers["version"] == "4.44.0"
    assert transformers["origin"].startswith(str(PINFILES / name) + ":")
    assert "transformers" in origin_line(transformers["origin"])
    verdicts = {f["id"]: f["verdict"] for f in report["findings"]}
    assert verdicts["gemma2-fa2-cu-seqlens"] == "affected"


@pytest.mark.parametrize(("python", "torch"), [("3.10", "2.14.1"), ("3.12", "2.15.0")])
def test_a_lock_with_several_resolutions_gives_the_targets(python: str, torch: str) -> None:
    """uv locked torch 2.14.1 for Python < 3.11 and 2.15.0 for newer ones."""
    for name in ("uv.lock", "pylock.toml"):
        packages = check_json("-r", PINFILES / name, "--python", python)["environment"]["packages"]
        assert packages["torch"]["version"] == torch


@pytest.mark.parametrize(("platform", "torch"), [("linux", "2.5.1"), ("darwin", "2.5.1+cpu")])
def test_poetry_markers_choose_by_platform(platform: str, torch: str) -> None:
    packages = check_json("-r", PINFILES / "poetry.lock", "--platform", platform)["environment"]["packages"]
    assert packages["torch"]["version"] == torch


def test_pipfile_lock_reads_default_with_markers() -> None:
    packages = check_json("-r", PINFILES / "Pipfile.lock")["environment"]["packages"]
    assert packages["torch"]["version"] == "2.5.1"
    assert "flash-attn" not in packages  # its marker is sys_platform == 'win32'


@pytest.mark.parametrize("name", ["environment.yml", "conda-export.txt", "conda-explicit.txt"])
def test_conda_names_and_torchs_cuda(name: str) -> None:
    env = check_json("-r", PINFILES / name)["environment"]
    assert env["packages"]["torch"]["distribution"] == "pytorch"
    assert env["torch_build"] == {"cuda": "12.1", "hip": None}
    assert "12.1" in origin_line(env["origins"]["torch_build"])
    # conda's pytorch is not the registry's wheel: its CUDA libraries are not implied from that metadata
    assert not any(name.startswith("nvidia-") for name in env["packages"])


def test_environment_yml_pip_section_and_python() -> None:
    env = check_json("-r", PINFILES / "environment.yml")["environment"]
    assert env["python"] == "3.11" and "python=3.11" in origin_line(env["origins"]["python"])
    assert env["packages"]["accelerate"]["version"] is None  # a range
    assert origin_line(env["packages"]["accelerate"]["origin"]).strip() == '- "accelerate>=0.33"'


def test_sarif_points_at_the_lock_line_that_pins_the_version() -> None:
    result = cli("check", "-r", PINFILES / "uv.lock", *GEMMA, "--format", "sarif")
    sarif = json.loads(result.stdout)
    rules = [rule["id"] for rule in sarif["runs"][0]["tool"]["driver"]["rules"]]
    found = next(r for r in sarif["runs"][0]["results"] if rules[r["ruleIndex"]] == "gemma2-fa2-cu-seqlens")
    location = found["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("uv.lock")
    line = location["region"]["startLine"]
    assert (PINFILES / "uv.lock").read_text().splitlines()[line - 1] == 'name = "transformers"'
    github = cli("check", "-r", PINFILES / "uv.lock", *GEMMA, "--format", "github").stdout
    assert f"file={PINFILES / 'uv.lock'},line={line}" in github


def test_pyproject_ranges_are_unknown_unless_a_lock_is_beside_it(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\nversion = "0"\ndependencies = [\n    "transformers==4.44.0",\n'
        '    "torch>=2.4",\n]\n[project.optional-dependencies]\nfa = ["flash-attn>=2.6"]\n'
        '[dependency-groups]\ndev = ["pytest", {include-group = "fa"}]\n'
    )
    packages = check_json("-r", pyproject, "--extra", "fa")["environment"]["packages"]
    assert packages["transformers"]["version"] == "4.44.0"
    assert packages["transformers"]["origin"] == f"{pyproject}:5"
    assert packages["torch"]["version"] is None and packages["flash-attn"]["version"] is None
    shutil.copy(PINFILES / "uv.lock", tmp_path / "uv.lock")
    packages = check_json("-r", pyproject, "--python", "3.12")["environment"]["packages"]
    assert packages["torch"]["version"] == "2.15.0" and packages["torch"]["origin"].endswith("uv.lock:73")


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("uv.lock", "package = 1\n", "must be an array of tables"),
        (
            "uv.lock",
            '[[package]]\nname = "torch"\nversion = "' + "1" * 5000 + '"\n',
            "not a valid PEP 440 version",
        ),
        ("poetry.lock", "[[package]\n", "not valid TOML"),
        ("Pipfile.lock", '{"default": []}', "must be an object"),
        (
            "pylock.toml",
            '[[packages]]\nname = "torch"\nversion = "2.5.1"\nmarker = "python_version ~= \'x\'"\n',
            "marker",
        ),
    ],
)
def test_malformed_pin_files_name_the_file(tmp_path: Path, name: str, content: str, needle: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert_one_line_error(cli("check", "-r", path), name, needle)


def test_yaml_this_reader_does_not_read_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "environment.yml"
    path.write_text("dependencies:\n  - {name: pytorch}\n  - pytorch=2.5.1\n")
    result = cli("check", "-r", path, "--format", "json")
    assert_one_line_error(result, "environment.yml:2", "YAML this reader does not read")
    assert json.loads(result.stdout)["environment"]["packages"]["torch"]["version"] == "2.5.1"
