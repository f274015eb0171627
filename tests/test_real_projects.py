"""The real-project corpus of issue 37 (tests/projects/*/project.toml) and check's score on it."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import real_projects  # noqa: E402

FOLDERS = real_projects.project_folders()
RULE_IDS = {path.stem for path in (ROOT / "rules").glob("*.toml")}
FIELDS = ("name", "repo", "commit", "url", "license", "files", "args", "expected")


def test_at_least_ten_projects() -> None:
    assert len(FOLDERS) >= 10


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_project_toml(folder: Path) -> None:
    project: dict[str, Any] = real_projects.load_project(folder)
    missing = [name for name in FIELDS if name not in project]
    assert not missing, f"{folder.name}: missing {missing}"
    assert project["name"] == folder.name
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", project["repo"])
    assert re.fullmatch(r"[0-9a-f]{40}", project["commit"])
    assert project["url"] == f"https://github.com/{project['repo']}/tree/{project['commit']}"
    assert project["license"] and isinstance(project["license"], str)
    assert project["args"] and all(isinstance(arg, str) for arg in project["args"])
    tree = folder / "tree"
    assert project["files"], folder.name
    for name in project["files"]:
        assert not Path(name).is_absolute() and ".." not in Path(name).parts, name
        assert (tree / name).is_file(), f"{folder.name}: {name} listed but not in tree/"
    copied = {
        str(p.relative_to(tree))
        for p in tree.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(tree).parts)
    }  # a tool's cache (.ruff_cache/) is not a copied file
    assert copied == set(project["files"]), f"{folder.name}: tree/ and files differ"
    seen = set()
    for entry in project["expected"]:
        assert entry["rule"] in RULE_IDS, f"{folder.name}: no rule {entry['rule']}"
        assert entry["rule"] not in seen, f"{folder.name}: {entry['rule']} judged twice"
        seen.add(entry["rule"])
        assert entry["verdict"] in real_projects.VERDICTS, entry
        assert len(entry["why"]) >= 40, entry
        assert entry["references"] and all(r.startswith("https://") for r in entry["references"]), entry
        assert isinstance(entry.get("judged_after_run", False), bool)
        # an expectation changed after a run says when and why, with the fact it was read in
        assert isinstance(entry.get("corrected", ""), str) and len(entry.get("corrected", "x" * 40)) >= 40


def test_check_on_real_projects_meets_issue_37() -> None:
    scores = [real_projects.score(folder) for folder in FOLDERS]
    refused = [s.name for s in scores if s.refused]
    assert not refused, f"an input refused whole (exit 2): {refused}"
    missed = {s.name: s.missed for s in scores if s.missed}
    assert not missed, f"expected-affected findings missed: {missed}"
    value = real_projects.precision(scores)
    false = {s.name: s.false for s in scores if s.false}
    assert value is None or value >= 0.9, f"precision {value:.2f}; false findings: {false}"
