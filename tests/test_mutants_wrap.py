"""Tests for the mutants of attn_doctor/wrap/diagnose.py that survived mutmut
(benchmarks/mutation_score.py --part wrap; docs/mutation-testing.md). Each docstring names the
mutants it kills (mutmut's ``x_<function>__mutmut_<n>``) and what they would have let through."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
from referencing import Registry, Resource
from support import REPO

from attn_doctor.wrap.diagnose import banner

SCHEMAS = REPO / "attn_doctor" / "schemas"
# what a CUDA kernel's failed assertion prints: CUDA reports it at a later call, asynchronously
FAILING = (
    "import sys\n"
    "print('RuntimeError: CUDA error: device-side assert triggered', file=sys.stderr)\n"
    "print('CUDA kernel errors might be asynchronously reported at some other API call', file=sys.stderr)\n"
    "sys.exit(1)\n"
)


def run_schema_validator() -> jsonschema.protocols.Validator:
    schemas = {
        name: json.loads((SCHEMAS / name).read_text())
        for name in ("run.schema.json", "explain.schema.json", "environment.schema.json")
    }
    registry = Registry().with_resources(
        (f"attn-doctor/{name}", Resource.from_contents(schema)) for name, schema in schemas.items()
    )
    return jsonschema.Draft202012Validator(schemas["run.schema.json"], registry=registry)


def test_the_run_report_is_its_schema_s_document(tmp_path: Path):
    """x_to_json__mutmut_5, 7, 14, 17, 23, 24, 33, 35, 36: `run --report FILE` writes the
    document run.schema.json describes: ``"schema": "attn-doctor/run"``, ``schema_version`` 1 and
    every key under its documented name (a renamed ``ended``, ``rerun_blocking`` or ``problems``
    broke every script reading the report), indented by two spaces as attn-doctor's other JSON."""
    report = tmp_path / "diagnosis.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attn_doctor",
            "run",
            "--report",
            str(report),
            "--",
            sys.executable,
            "-c",
            FAILING,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    text = report.read_text()
    document = json.loads(text)
    run_schema_validator().validate(document)
    assert document["cuda_asynchronous"] is True
    assert document["rerun_blocking"].startswith("CUDA_LAUNCH_BLOCKING=1 ")
    assert document["ended"] == "exited with code 1" and document["problems"] == []
    assert text == json.dumps(document, indent=2) + "\n"


def test_the_run_schema_rejects_a_renamed_key():
    """The schema itself can fail: a document with a key of another name is not one."""
    document = {
        "schema": "attn-doctor/run",
        "schema_version": 1,
        "command": ["python"],
        "returncode": 1,
        "ENDED": "exited with code 1",
        "cuda_asynchronous": False,
        "rerun_blocking": None,
        "repros": [],
        "problems": [],
        "explanation": None,
    }
    errors = list(run_schema_validator().iter_errors(document))
    assert errors and any("ended" in error.message or "ENDED" in error.message for error in errors)


def test_a_banner_title_that_just_fits_stays_on_the_rule():
    """x_banner__mutmut_5 (``<`` for ``<=``): a title of exactly the width less 8 fits on the
    rule itself; the mutant split it onto a line of its own under a bare rule."""
    [line] = banner("x" * 72, 80)
    assert line == f"── {'x' * 72} ────" and len(line) == 80
    assert len(banner("x" * 73, 80)) == 2
