"""`attn-doctor probe --json` is a contract: it matches its published schema, every field is
documented, `check --env-file` reads it back to the same verdicts, and a file this version
cannot read is refused with one line."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from support import REPO, cli

from attn_doctor.facts.model import ENV_SCHEMA_VERSION, Environment

SCHEMA = json.loads((resources.files("attn_doctor") / "schemas" / "environment.schema.json").read_text())


@pytest.fixture
def probed(site, fake_nvidia_smi) -> dict:
    site.install("transformers", "4.44.0")
    site.install("torch", "2.4.0+cu121", torch_cuda="12.1")
    site.install("flash-attn", "2.6.3")
    fake_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 550.54.15")
    result = cli("probe", "--json", "--path", site.path)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_probe_json_matches_the_schema(probed: dict):
    jsonschema.Draft202012Validator(SCHEMA).validate(probed)
    assert probed["schema_version"] == ENV_SCHEMA_VERSION
    assert probed["gpus"] == [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "compute_capability": "9.0",
            "driver": "550.54.15",
            "gfx": None,
            "capabilities": [],
        }
    ]
    assert probed["torch_build"] == {"cuda": "12.1", "hip": None}


def test_schema_requires_exactly_what_probe_writes():
    written = set(Environment().to_json_dict())
    assert set(SCHEMA["required"]) == written == set(SCHEMA["properties"])


def test_every_field_is_documented():
    docs = (REPO / "docs" / "output.md").read_text()
    facts = docs.split("## Facts (`attn-doctor probe --json`)", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([\w.*\[\]]+)` \|", facts, re.M))
    package_fields = {
        f"packages.*.{name}" for name in SCHEMA["properties"]["packages"]["additionalProperties"]["required"]
    }
    gpu_fields = {f"gpus[].{name}" for name in SCHEMA["properties"]["gpus"]["items"]["required"]}
    torch_fields = {
        f"torch_build.{name}" for name in SCHEMA["properties"]["torch_build"]["oneOf"][1]["required"]
    }
    assert set(SCHEMA["properties"]) | package_fields | gpu_fields | torch_fields <= documented


def test_env_file_gives_the_same_verdicts_as_the_same_facts(tmp_path: Path, site, probed: dict):
    env_file = tmp_path / "node7.json"
    env_file.write_text(json.dumps(probed))
    args = ("--format", "json", "--gpu", "H100", "--feature", "flash_attention_2")
    direct = json.loads(cli("check", "--path", site.path, *args).stdout)
    remote = json.loads(cli("check", "--env-file", env_file, *args).stdout)
    verdicts = [(f["id"], f["verdict"]) for f in direct["findings"]]
    assert [(f["id"], f["verdict"]) for f in remote["findings"]] == verdicts
    assert dict(verdicts)["gemma2-fa2-cu-seqlens"] == "affected"
    facts = ("torch_build", "gpus", "nvcc", "python", "platform", "os", "libc")
    assert {k: remote["environment"][k] for k in facts} == {k: direct["environment"][k] for k in facts}
    versions = {name: p["version"] for name, p in direct["environment"]["packages"].items()}
    assert {name: p["version"] for name, p in remote["environment"]["packages"].items()} == versions


def one_line_error(result) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    (line,) = result.stderr.splitlines()
    assert line.startswith("attn-doctor: error: ")
    return line


def test_a_future_schema_version_is_refused(tmp_path: Path, probed: dict):
    env_file = tmp_path / "future.json"
    env_file.write_text(json.dumps({**probed, "schema_version": ENV_SCHEMA_VERSION + 1}))
    line = one_line_error(cli("check", "--env-file", env_file))
    assert "future.json" in line and f"schema_version {ENV_SCHEMA_VERSION + 1} is newer" in line
    assert "upgrade attn-doctor" in line


@pytest.mark.parametrize("field", sorted(set(SCHEMA["required"]) - {"schema", "schema_version"}))
def test_a_missing_field_is_refused(tmp_path: Path, probed: dict, field: str):
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps({k: v for k, v in probed.items() if k != field}))
    line = one_line_error(cli("check", "--env-file", env_file))
    assert "env.json: malformed environment: missing" in line and field in line


@pytest.mark.parametrize(("where", "field"), [("packages", "version"), ("gpus", "driver")])
def test_a_missing_nested_field_is_refused(tmp_path: Path, probed: dict, where: str, field: str):
    entry = probed[where]["torch"] if where == "packages" else probed[where][0]
    del entry[field]
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps(probed))
    line = one_line_error(cli("check", "--env-file", env_file))
    assert f"missing field '{field}'" in line
