"""Tests for the mutants of attn_doctor/wrap/diagnose.py that survived mutmut
(benchmarks/mutation_score.py --part wrap; docs/mutation-testing.md). Each docstring names the
mutants it kills (mutmut's ``x_<function>__mutmut_<n>``) and what they would have let through."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource
from support import REPO

from attn_doctor.engine.matcher import Verdict
from attn_doctor.report.github import gh_data
from attn_doctor.wrap.diagnose import Diagnosis, _size, banner, diagnose, to_github, to_json, to_text
from attn_doctor.wrap.tail import OutputTail
from tests.conftest import Site

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


def test_the_diagnosis_as_json_is_its_schema_s_document(seed_a):
    """The same in this process (mutmut maps a test to what its own process calls): x_to_json's
    mutants 5, 7, 14, 17, 19, 23, 24, 33, 35, 36."""
    diagnosis, _ = seed_a
    text = to_json(diagnosis)
    document = json.loads(text)
    run_schema_validator().validate(document)
    assert text == json.dumps(document, indent=2) + "\n"
    assert document["command"] == ["python", "train.py"] and document["ended"] == "exited with code 1"
    assert document["rerun_blocking"] == "CUDA_LAUNCH_BLOCKING=1 python train.py"
    assert document["explanation"]["causes"][0]["id"] == "gemma2-fa2-generate-4d-mask"


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


SEED_A = REPO / "tests" / "logs" / "seed_a.log"  # gemma2 under FA2: a device-side assert


def tail_of(data: bytes) -> OutputTail:
    tail = OutputTail()
    tail.feed(data)
    return tail


@pytest.fixture(scope="module")
def seed_a(tmp_path_factory: pytest.TempPathFactory) -> tuple[Diagnosis, OutputTail]:
    """seed_a.log diagnosed on a machine like the one it came from: transformers 4.44.0 and
    flash-attn 2.6.3 (metadata) first on the path, whatever this machine has installed."""
    site = Site(tmp_path_factory.mktemp("site-packages"))
    site.install("transformers", "4.44.0")
    site.install("flash-attn", "2.6.3")
    tail = tail_of(SEED_A.read_bytes())
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site.path))
        return diagnose(["python", "train.py"], 1, tail, blocking=False), tail


def test_diagnose_explains_the_output_it_was_given(seed_a):
    """x_diagnose__mutmut_24 (``explain(str(None), ...)``): the command's output is what gets
    explained; the mutant read a file named "None" and turned the diagnosis into an input problem."""
    diagnosis, _ = seed_a
    assert diagnosis.explanation is not None and diagnosis.problems == []
    assert diagnosis.explanation.causes[0].finding.rule.id == "gemma2-fa2-generate-4d-mask"
    assert diagnosis.asynchronous and diagnosis.printed == SEED_A.stat().st_size


def test_github_annotations_name_each_cause_and_the_synchronous_rerun(seed_a):
    """x_to_github__mutmut_2, 10, 14, 15, 29: an annotation per cause (``error``, or ``notice``
    where the stack is not affected), whose message says how the command ended, the rule's title,
    fix and first reference; and the rerun under CUDA_LAUNCH_BLOCKING=1 after an asynchronous
    CUDA error. The mutants dropped the causes, wrote ``NOTICE`` (GitHub ignores the line), or
    printed ``None`` for the message or the hint."""
    diagnosis, _ = seed_a
    cause = diagnosis.explanation.causes[0]
    rule = cause.finding.rule
    lines = to_github(diagnosis).splitlines()
    kind = "notice" if cause.finding.verdict is Verdict.NOT_AFFECTED else "error"
    assert lines[0] == (
        f"::{kind} title=attn-doctor {rule.id}::"
        + gh_data(
            f"The command exited with code 1: {rule.title}. Fix: {rule.fix_summary} See {rule.references[0]}"
        )
    )
    assert lines[-1] == (
        "::notice title=attn-doctor::CUDA reported the error asynchronously; rerun with: "
        "CUDA_LAUNCH_BLOCKING=1 python train.py"
    )
    explanation = copy.copy(diagnosis.explanation)
    explanation.causes = [replace(cause, finding=replace(cause.finding, verdict=Verdict.NOT_AFFECTED))]
    quiet = to_github(replace(diagnosis, explanation=explanation))
    assert quiet.startswith(f"::notice title=attn-doctor {rule.id}::The command exited with code 1: ")


def test_the_text_diagnosis_at_a_given_width(seed_a):
    """x_to_text__mutmut_2, 34, 35, 36, 40, 44, 51, 65: the banner is as wide as the terminal
    (not BANNER_WIDTH's 80), the explanation follows it without a second blank line, and the
    advice on asynchronous errors is wrapped flush left at the width. The mutants drew an 80-column
    banner on a 100-column terminal, left a blank line too many, or indented wrapped advice."""
    diagnosis, tail = seed_a
    text = to_text(diagnosis, tail, 100)
    lines = text.splitlines()
    title = "attn-doctor: the command exited with code 1; diagnosis of its output"
    assert lines[1] == f"── {title} {'─' * (100 - len(title) - 4)}"
    assert "gemma2-fa2-generate-4d-mask" in text and "\n\n\n" not in text
    narrow = to_text(diagnosis, tail, 40).splitlines()
    start = narrow.index("CUDA reported this error asynchronously:")
    assert narrow[start + 1].startswith("the traceback") and all(len(line) <= 40 for line in narrow[start:])
    advice = narrow[start : next(i for i, line in enumerate(narrow) if "synchronous launches:" in line) + 1]
    assert len(advice) > 2 and not any(line.startswith(" ") for line in advice), advice


def test_output_that_could_not_be_read_back_or_has_no_known_cause():
    """x_to_text__mutmut_8, x__amount__mutmut_1, x__count__mutmut_3, x__size__mutmut_2, 11: how
    much output there was, in the unit that reads best (1 byte, 12 bytes, 2 KiB, 3 MiB), where the
    output file could not be read back and where nothing in it is a known cause."""
    unreadable = OutputTail()
    unreadable.total = 2048
    gone = Diagnosis(["python", "t.py"], 1, None, False, [], 2048)
    assert to_text(gone, unreadable, None) == (
        "attn-doctor: the command exited with code 1; its 2 KiB of output could not be read back.\n"
    )
    tail = tail_of(b"hello world\n")
    plain = diagnose(["python", "t.py"], 1, tail, blocking=False)
    assert "Read all it printed: 1 line (12 bytes)." in to_text(plain, tail, None).splitlines()
    assert [_size(n) for n in (1, 1023, 2048, 3 * 1024 * 1024)] == ["1 byte", "1,023 bytes", "2 KiB", "3 MiB"]


def test_a_banner_title_too_long_goes_under_a_bare_rule():
    """x_banner__mutmut_11, 12, 16: a title wider than the terminal goes on lines of its own, under
    a rule of the terminal's width."""
    lines = banner("x" * 100, 40)
    assert lines[0] == "─" * 40 and "".join(lines[1:]) == "x" * 100


def test_output_sizes_are_counted_in_bytes_then_kib_then_mib():
    """x__size__mutmut_10 (``>= 1025``: exactly 1 KiB was written "1,024 bytes")."""
    from attn_doctor.wrap.diagnose import _size

    sizes = [1, 1023, 1024, 1536, 1024 * 1024 - 1, 1024 * 1024, 5 * 1024 * 1024]
    assert [_size(n) for n in sizes] == [
        "1 byte",
        "1,023 bytes",
        "1 KiB",
        "2 KiB",
        "1024 KiB",
        "1 MiB",
        "5 MiB",
    ]


def test_the_explanation_says_which_output_it_read(seed_a):
    """x_diagnose__mutmut_29 (the source upper-cased): the report names what was explained, the
    whole output or, where the tail kept only its end, how much of how much."""
    diagnosis, _ = seed_a
    assert diagnosis.explanation.source == "the command's output"
    tail = tail_of(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    tail.total = 3 * 1024 * 1024  # the command printed more than the tail keeps
    cut = diagnose(["python", "t.py"], 1, tail, blocking=False)
    assert cut.explanation.source == "the last 67 bytes of the command's 3 MiB of output"


def test_only_an_asynchronous_cuda_error_without_blocking_launches_asks_for_a_rerun(seed_a):
    """x_diagnose__mutmut_42 (``not blocking or ...``: every output of a run without
    --rerun-blocking was called asynchronous)."""
    diagnosis, tail = seed_a
    assert diagnosis.asynchronous
    assert not diagnose(["python", "train.py"], 1, tail, blocking=True).asynchronous
    assert not diagnose(
        ["python", "t.py"], 1, tail_of(b"ValueError: bad shape\n"), blocking=False
    ).asynchronous


def test_a_problem_of_the_machine_is_kept_in_the_diagnosis(tmp_path, monkeypatch):
    """x_diagnose__mutmut_36 (the filter kept only problems about the temporary log file): broken
    installed metadata on this machine, whose output `run` diagnoses, is an input problem the
    diagnosis reports (and exits 2 on), not one the temporary log's filter may drop."""
    broken = tmp_path / "xformers-0.0.28.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: xformers\nVersion: not a version!!\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tail = tail_of(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    diagnosis = diagnose(["python", "t.py"], 1, tail, blocking=False)
    assert diagnosis.problems == [f"{broken}: unparsable version 'not a version!!'"]
