# ruff: noqa: E501  (the sources quoted are as long as the releases write them)
"""The message catalogue (issue 24), offline: the extractor and the merge on sources the tests
write, the reader's one-pass matching, explain's origins, and rules that name messages by id.

The sources below are written for the tests in the shape the releases use (a message built in a
variable, f-strings, %-formatting, a logger call); the shipped catalogue itself is checked
against real release text in test_message_catalogue_snapshot.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attn_doctor.explain as explain_module
from attn_doctor.cli import app
from attn_doctor.releases.messages import Catalogue, entries, layout, read, write
from tools.messages.build import merge, pattern_of, runs
from tools.messages.python_source import extract

OLD = """
class PreTrainedModel:
    def _check_and_enable_flash_attn_2(cls, config):
        preface = "FlashAttention2 has been toggled on, but it cannot be used due to the following error:"
        if not is_flash_attn_2_available():
            if importlib.util.find_spec("flash_attn") is None:
                raise ImportError(f"{preface} the package flash_attn seems to be not installed. {install_message}")
            logger.warning("Flash Attention %s is installed but older than %s", version, "2.1.0")
"""
NEW = """
class PreTrainedModel:
    def _flash_attn_import_error(self, flash_attn_version, pkg_availability_check):
        if not general_availability_check():
            preface = f"FlashAttention{flash_attn_version} has been toggled on, but it cannot be used due to the following error:"
            if not pkg_availability_check():
                raise ImportError(
                    f"{preface} the package for FlashAttention{flash_attn_version} doesn't seem to be installed."
                )
"""


def test_a_message_built_in_steps_is_one_template_with_its_guard():
    (raised, warned) = extract(OLD, "transformers/modeling_utils.py")
    assert raised.kind == "ImportError"
    assert raised.function == "PreTrainedModel._check_and_enable_flash_attn_2"
    assert raised.template == (
        "FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
        "the package flash_attn seems to be not installed. {}"
    )
    assert (
        raised.guard == "not is_flash_attn_2_available() and importlib.util.find_spec('flash_attn') is None"
    )
    assert (
        warned.kind == "log.warning"
        and warned.template == "Flash Attention {} is installed but older than {}"
    )
    (new,) = extract(NEW, "transformers/modeling_utils.py")
    assert new.template.startswith("FlashAttention{} has been toggled on")


def test_patterns_match_the_printed_message_and_nothing_shorter():
    pattern, literal = pattern_of("FlashAttention{} has been toggled on, but it cannot be used: {}")
    assert literal == "has been toggled on, but it cannot be used:"
    import re2

    assert re2.search(pattern, "ImportError: FlashAttention3 has been toggled on, but it cannot be used: x")
    assert not re2.search(pattern, "FlashAttention3 has been toggled off")
    assert pattern_of("{}: {}") is None and pattern_of("bad value {}") is None  # too little text


def test_releases_are_runs():
    versions = ["4.44.0", "4.45.0", "4.46.0", "5.0.0", "5.1.0"]
    assert runs([True, True, False, True, True], versions) == [["4.44.0", "4.45.0"], ["5.0.0", "5.1.0"]]
    assert runs([False, False, False, False, True], versions) == [["5.1.0", "5.1.0"]]


def merged_entries() -> list[dict]:
    old = extract(OLD, "transformers/modeling_utils.py")
    new = extract(NEW, "transformers/modeling_utils.py")
    versions, entries = merge(
        "transformers", [("4.45.0", old), ("4.57.1", old), ("5.0.0", new), ("5.17.0", new)]
    )
    assert versions == ["4.45.0", "4.57.1", "5.0.0", "5.17.0"]
    return entries


def catalogue_of(tmp_path: Path) -> Catalogue:
    data = {"generated": "2026-11-25", "packages": {}, "messages": merged_entries()}
    path = tmp_path / "messages.zip"
    write(data, path)
    return read(path)


def test_the_file_holds_every_entry_and_the_same_data_gives_the_same_bytes(tmp_path: Path):
    catalogue = catalogue_of(tmp_path)
    again = tmp_path / "again.zip"
    write({"generated": "2026-11-25", "packages": {}, "messages": entries(catalogue)}, again)
    assert again.read_bytes() == (tmp_path / "messages.zip").read_bytes()

    def key(entry: dict) -> str:
        return json.dumps(entry, sort_keys=True)

    assert sorted(map(key, entries(catalogue))) == sorted(map(key, merged_entries()))


def test_a_line_reads_only_the_group_it_matches(tmp_path: Path):
    """The reason for the layout: explain on a short log decodes a small part of 12 MB."""
    filler = [
        {
            "id": f"pkg:m.f{n}",
            "package": "pkg",
            "file": "m.py",
            "function": f"f{n}",
            "kind": "ValueError",
            "template": f"message number {n:05d} went wrong",
            "pattern": f"message number {n:05d} went wrong",
            "literal": f"message number {n:05d} went wrong",
            "releases": [["1.0", "1.0"]],
            "guard": "",
        }
        for n in range(1000)
    ]
    parts = layout({"generated": "x", "packages": {}, "messages": filler})
    read_names: list[str] = []
    catalogue = Catalogue(lambda name: read_names.append(name) or parts.get(name, b""))
    (found,) = catalogue.origins("ValueError: message number 00733 went wrong")
    assert found.id == "pkg:m.f733"
    assert [n for n in read_names if n.startswith("groups/")] == ["groups/0005.json"]
    assert len([n for n in parts if n.startswith("groups/")]) == 8


FA2_5X = (
    "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
    "the package for FlashAttention2 doesn't seem to be installed.\n"
)
FA2_4X = (
    "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
    "the package flash_attn seems to be not installed. Please refer to the documentation.\n"
)


def test_a_line_is_traced_to_its_function_and_releases(tmp_path: Path):
    catalogue = catalogue_of(tmp_path)
    (origin,) = catalogue.origins(FA2_5X.strip())
    assert origin.id == "transformers:transformers.modeling_utils.PreTrainedModel._flash_attn_import_error"
    assert origin.release_text() == "5.0.0–5.17.0"
    assert origin.guard == "not general_availability_check() and not pkg_availability_check()"
    assert catalogue.origins(FA2_4X.strip())[0].release_text() == "4.45.0–4.57.1"
    assert catalogue.origins("RuntimeError: something else entirely happened here") == []


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalogue:
    catalogue = catalogue_of(tmp_path)
    monkeypatch.setattr(explain_module, "catalogue", lambda: catalogue)
    return catalogue


def explain_text(tmp_path: Path, log_text: str, *args: str) -> str:
    log = tmp_path / "error.log"
    log.write_text('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n' + log_text)
    result = CliRunner().invoke(app, ["explain", str(log), "--no-scan", *args], catch_exceptions=False)
    return result.stdout


def test_explain_names_the_origin_of_a_message_no_rule_quotes(tmp_path: Path, shipped: Catalogue):
    text = explain_text(tmp_path, FA2_5X)
    assert "Where its messages come from, in the releases' own code:" in text
    assert (
        "ImportError raised by transformers (modeling_utils.py, PreTrainedModel._flash_attn_import_error) "
        "in 5.0.0–5.17.0, when not general_availability_check() and not pkg_availability_check()"
    ) in " ".join(text.split())


def test_a_rule_naming_the_message_matches_every_release_wording(tmp_path: Path, shipped: Catalogue):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "test-fa-missing.toml").write_text(
        'id = "test-fa-missing"\ntitle = "FA requested, not installed"\nseverity = "error"\n'
        'component = "transformers"\nkind = "usage"\nsummary = "x"\n'
        'references = ["https://github.com/huggingface/transformers/pull/1"]\n'
        'messages = ["transformers:transformers.modeling_utils.PreTrainedModel._flash_attn_import_error",'
        ' "transformers:transformers.modeling_utils.PreTrainedModel._check_and_enable_flash_attn_2"]\n'
        '[affects]\n[fix]\nsummary = "Install flash-attn."\npins = []\n'
    )
    for wording in (FA2_5X, FA2_4X):
        assert "1. ? test-fa-missing" in explain_text(tmp_path, wording, "--rules", str(rules)) or (
            "1. ✗ test-fa-missing" in explain_text(tmp_path, wording, "--rules", str(rules))
        )


def test_a_bad_message_id_is_a_rule_problem(tmp_path: Path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bad.toml").write_text(
        'id = "bad"\ntitle = "t"\nseverity = "error"\ncomponent = "transformers"\nsummary = "x"\n'
        'references = ["https://github.com/huggingface/transformers/pull/1"]\nmessages = ["no id here"]\n'
        '[affects]\n[fix]\nsummary = "y"\npins = []\n'
    )
    result = CliRunner().invoke(app, ["rules", "validate", str(rules)])
    assert result.exit_code == 2 and "messages[0]" in result.stderr


def test_verbose_names_the_id_a_rule_can_cite(tmp_path: Path, shipped: Catalogue):
    text = explain_text(tmp_path, FA2_5X, "-v")
    assert "id: transformers:transformers.modeling_utils.PreTrainedModel._flash_attn_import_error" in text
