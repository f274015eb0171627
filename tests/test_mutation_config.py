"""The mutation benchmark's parts (benchmarks/mutation_score.py) and mutmut's configuration
(pyproject.toml [tool.mutmut]) name the same code: a module mutmut mutates but no part runs would
never be scored, and a part over a module mutmut does not mutate would score nothing."""

from __future__ import annotations

import fnmatch
import importlib.util
import sys

import pytest
from support import REPO

from attn_doctor._compat import tomllib


@pytest.fixture(scope="module")
def mutation_score():
    spec = importlib.util.spec_from_file_location("mutation_score", REPO / "benchmarks" / "mutation_score.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_score"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def mutated_modules() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    files = {
        path.relative_to(REPO).as_posix()
        for glob in config["only_mutate"]
        for path in REPO.glob(glob if glob.endswith(".py") else f"{glob.rstrip('*')}**/*.py")
    }
    return sorted(name.removesuffix(".py").replace("/", ".") for name in files)


def test_every_mutated_module_belongs_to_a_part(mutation_score):
    modules = mutated_modules()
    assert "attn_doctor.facts.sources.common" in modules  # facts/ with its subfolders
    for module in modules:
        function = f"{module}.x_anything"  # mutmut's name of a function of that module
        method = f"{module}.xǁLauncherǁrun"
        parts = [
            name
            for name, globs in mutation_score.PARTS.items()
            if any(fnmatch.fnmatchcase(n, g) for g in globs for n in (function, method))
        ]
        assert parts, f"{module} is mutated but no part of benchmarks/mutation_score.py runs it"


def test_every_part_names_mutated_code(mutation_score):
    modules = mutated_modules()
    for name, globs in mutation_score.PARTS.items():
        assert any(
            fnmatch.fnmatchcase(f"{module}.{glob.rpartition('.')[2]}", glob)
            for module in modules
            for glob in globs
        ), f"part {name} matches no module mutmut mutates"


@pytest.mark.parametrize(("killed", "decided"), [(85, 100), (0, 10), (10, 10), (1, 1), (430, 500)])
def test_the_sampled_score_interval_holds_the_estimate(mutation_score, killed, decided):
    low, high = mutation_score.wilson_interval(killed, decided)
    assert 0.0 <= low <= killed / decided <= high <= 1.0
    assert high - low < (0.15 if decided >= 100 else 1.0)


def test_the_weighted_score_stands_each_sample_for_its_parts_size(mutation_score):
    """A part run in full is exact (no variance), a sampled part weighs its size, not its sample:
    61 of 61 killed and 80 of 100 sampled from 4,000 is about 80.3%, not 141 / 161 (87.6%)."""
    from collections import Counter

    def part(name, killed, survived, pending):
        return mutation_score.ModuleScore(
            name, Counter({"killed": killed, "survived": survived, "not checked": pending})
        )

    value, low, high, size = mutation_score.weighted_score([part("a", 61, 0, 0), part("b", 80, 20, 3900)])
    assert size == 4061 and value == pytest.approx((61 + 4000 * 0.8) / 4061)
    assert low < value < high and high - low == pytest.approx(
        2 * 1.96 * (4000 / 4061) * (0.16 / 100 * 3900 / 3999) ** 0.5
    )
    assert mutation_score.weighted_score([part("a", 61, 0, 0)])[1:3] == (1.0, 1.0)
    assert mutation_score.weighted_score([part("a", 61, 0, 0), part("b", 0, 0, 10)]) is None
