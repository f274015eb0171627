"""Fuzzing every input kind: property-based tests of the readers (hypothesis, in process) and a few
hundred hostile cases through the real CLI in subprocesses (tests/hostile_inputs.py, the cases
benchmarks/fuzz_inputs.py runs 10,000 of). The properties: a reader returns or raises InputError,
nothing else; the CLI exits 0, 1 or 2, never 3, with no traceback, in bounded time."""

from __future__ import annotations

import contextlib
import io
import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hostile_inputs import (
    GENERATORS,
    HOSTILE_TOKENS,
    LOG_SEED,
    PYPROJECT_SEED,
    REQUIREMENTS_SEED,
    RULE_SEED,
    mutate,
    run_case,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attn_doctor.config import load_config
from attn_doctor.engine.loader import load_rules
from attn_doctor.engine.patterns import UnsafePattern, analyse
from attn_doctor.errors import InputError
from attn_doctor.explain.reader import LogReader
from attn_doctor.facts.gpus import target_gpu
from attn_doctor.facts.log_facts import LogFactCollector
from attn_doctor.facts.model import Environment
from attn_doctor.facts.sources import read_declared
from attn_doctor.facts.whatif import parse_pin
from attn_doctor.inputs import parse_json

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# text built from the shapes that broke things, mixed with arbitrary characters
hostile_text = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(HOSTILE_TOKENS) | st.text(max_size=40), max_size=6).map("".join),
)


def mutated(seed: str) -> st.SearchStrategy[str]:
    return st.integers(min_value=0, max_value=2**32).map(lambda n: mutate(seed, random.Random(n)))


def only_input_errors(call) -> None:
    with contextlib.suppress(InputError):
        call()


PINFILES = Path(__file__).parent / "fixtures" / "pinfiles"
LINUX = {"sys_platform": "linux", "platform_machine": "x86_64", "python_version": "3.11"}
FILE_READERS = {
    "requirements.txt": (lambda path: read_declared(path, {}), REQUIREMENTS_SEED),
    "pyproject.toml": (load_config, PYPROJECT_SEED),
    # a Dockerfile's shell (if/else, ||, ARG values) and setup.py's ast: a problem or an InputError
    "Dockerfile": (lambda path: read_declared(path, LINUX), (PINFILES / "Dockerfile").read_text()),
    "setup.py": (lambda path: read_declared(path, LINUX), (PINFILES / "setup.py").read_text()),
}


@pytest.mark.parametrize("name", sorted(FILE_READERS))
@FAST
@given(data=st.data())
def test_file_readers(tmp_path: Path, name: str, data: st.DataObject) -> None:
    reader, seed = FILE_READERS[name]
    path = tmp_path / name
    path.write_text(data.draw(hostile_text | mutated(seed)), encoding="utf-8", errors="surrogatepass")
    only_input_errors(lambda: reader(path))


@FAST
@given(text=hostile_text)
def test_env_file_reader(text: str) -> None:
    only_input_errors(lambda: Environment.from_json_dict(parse_json(text, "env.json"), "env.json"))


@FAST
@given(text=hostile_text | mutated(RULE_SEED))
def test_rule_loader_reports_every_file_as_a_rule_or_problems(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz-rule.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    ruleset = load_rules([path])
    assert len(ruleset.rules) + bool(ruleset.problems) >= 1


@FAST
@given(pattern=hostile_text)
def test_symptom_analysis(pattern: str) -> None:
    with contextlib.suppress(UnsafePattern, re.error):
        analyse(pattern)


@FAST
@given(value=hostile_text)
def test_pins_and_gpus(value: str) -> None:
    only_input_errors(lambda: parse_pin(value))
    only_input_errors(lambda: target_gpu(value))


@FAST
@given(data=st.binary(max_size=2000) | mutated(LOG_SEED).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_log_reading_and_stated_facts(data: bytes) -> None:
    collector = LogFactCollector()
    for block in LogReader(io.BytesIO(data), "fuzz.log"):
        collector.feed(block)


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_the_cli_on_hostile_inputs(kind: str) -> None:
    """20 cases per kind, each the real CLI in a subprocess: no crash, no hang."""
    rng = random.Random(f"ci-{kind}")
    cases = [GENERATORS[kind](rng) for _ in range(20)]
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda case: run_case(case, timeout=60), cases))
    bad = [(o.code, " ".join(o.args)[:200]) for o in outcomes if o.crashed or o.code is None]
    assert not bad
