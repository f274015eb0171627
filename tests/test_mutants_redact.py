"""Tests for the mutants of attn_doctor/redact.py that survived mutmut (benchmarks/mutation_score.py
--part redact; docs/mutation-testing.md). Each docstring names the mutant it kills (mutmut's name,
``x_<function>__mutmut_<n>``) and what the mutant would have let through."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_doctor.redact import SECRET_NAME_WORDS, home_dirs, scrub


def test_home_dirs_reads_home_and_userprofile_longest_first():
    """x_home_dirs__mutmut_4, 5, 7, 14, 17, 21, 24, 25, 28: both variables are read (not
    "XXUSERPROFILEXX" or "userprofile"), a trailing slash is stripped (rstrip of "/\\", not of
    whitespace), a name ending in X keeps its X (not rstrip of "XX/\\XX"), the second home adds to
    the first (``|=``, not ``=``), and the longest comes first (key=len, reverse=True; not by name,
    not shortest first), so that a home inside another is replaced before the outer one."""
    homes = home_dirs({"HOME": "/zz/bob/", "USERPROFILE": "/home/bob/ALEX/"})
    assert homes == ["/home/bob/ALEX", "/zz/bob"]
    nested = home_dirs({"HOME": "/home/bob/", "USERPROFILE": "/home/bob/work/ALEX/"})
    assert nested == ["/home/bob/work/ALEX", "/home/bob"]
    text = "/home/bob/work/ALEX/x.py and /home/bob/y.py"
    assert scrub(text, nested) == "~/x.py and ~/y.py"


def test_home_dirs_of_an_environment_without_them_is_empty():
    """x_home_dirs__mutmut_13: a variable that is not set is no home (its default is "", not
    "XXXX", which would then be scrubbed from every text)."""
    assert home_dirs({}) == []
    assert home_dirs({"HOME": "/home/bob"}) == ["/home/bob"]


def test_home_dirs_adds_where_a_home_really_is(tmp_path: Path):
    """x_home_dirs__mutmut_19: a HOME that is a symbolic link is also scrubbed where it points
    (paths in tracebacks are resolved ones)."""
    real = tmp_path / "real-home"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert set(home_dirs({"HOME": str(tmp_path / "link")})) == {str(tmp_path / "link"), str(real)}


@pytest.mark.parametrize(
    ("home", "expected"),
    [
        ("/x", ["/x"]),  # two characters are a home (mutants 16, 27: > 2)
        ("a", []),  # one is not: it would replace every "a" (mutant 15: >= 1)
        ("/", []),
        ("/.", ["/."]),  # its real path "/" is dropped (mutant 26: >= 1 keeps it)
        ("", []),
    ],
)
def test_home_dirs_drops_homes_too_short_to_scrub(home: str, expected: list[str]):
    """x_home_dirs__mutmut_15, 16, 26, 27: a "home" of one character (or the root, as a real
    path) would turn every occurrence of it into ``~``; a home of two characters is kept."""
    assert home_dirs({"HOME": home}) == expected


@pytest.mark.parametrize("word", SECRET_NAME_WORDS)
def test_secret_name_matches_each_word_in_any_case(word: str):
    """x_secret_name__mutmut_2, 4: ``hf_token`` is a secret name (the name is upper-cased, not
    lower-cased, before the words are looked for) and ``HOME`` is not (``in``, not ``not in``)."""
    from attn_doctor.redact import secret_name

    assert secret_name(f"my_{word.lower()}_value") and secret_name(word)
    assert not secret_name("HOME") and not secret_name("CUDA_VISIBLE_DEVICES")
