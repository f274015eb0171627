"""Tests for the mutants of attn_doctor/explain/ that survived mutmut (benchmarks/mutation_score.py
--part explain; docs/mutation-testing.md). Each runs in this process (mutmut maps a test only to
the functions its own process calls) on a real log: the H100 runs of tests/cases/ or bytes built
to reach one branch. The docstring names the mutant a test kills."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from support import case_log

import attn_doctor.explain as explain_module
from attn_doctor.config import Config
from attn_doctor.errors import InputError
from attn_doctor.explain.origins import ImpliedReleases, _intersection, union_runs
from attn_doctor.explain.reader import LogReader
from attn_doctor.facts.assemble import EnvironmentInputs


def explained(tmp_path: Path, case: str) -> explain_module.Explanation:
    """``explain`` in this process on the error text of tests/cases/CASE."""
    log = case_log(case, tmp_path)
    return explain_module.explain(str(log), EnvironmentInputs(scan=False), Config(), [])


def test_a_crlf_split_between_two_chunks_keeps_the_next_line():
    """xǁLogReaderǁ_normalised_chunks__mutmut_13: after a chunk that ends in \\r, only the \\n of
    the next chunk is dropped (chunk[1:]), not the first byte of the next line too."""
    reader = LogReader(io.BytesIO(b"a\r\nbc\r\nd\r\n"), "error.log", chunk_bytes=2)
    assert b"".join(block.text for block in reader) == b"a\nbc\nd\n"
    assert reader.lines == 3


def test_an_implied_range_says_or_later_only_when_it_reaches_the_newest_release_read():
    """xǁImpliedReleasesǁtext__mutmut_11 (the wording " or later")."""
    runs = (("5.4.0", "5.24.0"),)
    assert ImpliedReleases("transformers", runs, 21, "5.24.0").text() == (
        "transformers 5.4.0–5.24.0 or later (from the message, line 21)"
    )
    assert ImpliedReleases("transformers", runs, 21, "5.25.0").text() == (
        "transformers 5.4.0–5.24.0 (from the message, line 21)"
    )


def test_ranges_merge_in_version_order_not_string_order():
    """x__union__mutmut_5: runs sorted by version ("4.9.0" before "4.10.0"); sorted as strings,
    4.10.0–4.11.0 came first and swallowed 4.9.0–4.9.1."""
    groups = [(("4.10.0", "4.11.0"),), (("4.9.0", "4.9.1"),), (("4.11.0", "4.12.0"),)]
    assert union_runs(groups) == (("4.9.0", "4.9.1"), ("4.10.0", "4.12.0"))


def test_a_message_the_newest_release_read_still_prints_implies_later_releases_too(tmp_path: Path):
    """x__imply__mutmut_11 (explain._imply lost the newest release of each package the catalogue
    read): transformers' "FlashAttention2 has been toggled on" error of the H100 run is in the
    newest release read, so the releases it implies go on past it."""
    result = explained(tmp_path, "transformers/produced-fa2-not-installed.toml")
    (implied,) = [i for i in result.implied if i.package == "transformers"]
    assert implied.newest_read and implied.runs[-1][1] == implied.newest_read
    assert implied.open_ended and implied.text().endswith(f"or later (from the message, line {implied.line})")


def test_a_mistyped_implementation_name_gets_the_nearest_valid_one(tmp_path: Path):
    """x__with_nearest__mutmut_12 (cause_notes: the given name never read): transformers 5.17.0
    on the H100 with attn_implementation="flash_attn_2"."""
    result = explained(tmp_path, "usage/produced-attn-implementation-typo.toml")
    assert result.causes[0].finding.rule.id == "usage-attn-implementation-invalid"
    assert result.causes[0].nearest == ("flash_attn_2", "flash_attention_2")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/mem: Linux's")
def test_a_log_that_cannot_be_read_is_named_in_the_error():
    """x_explain__mutmut_14 (the reader was given no name): /proc/self/mem opens, and its first
    read fails with EIO, the way a failing disk or a vanished network file does."""
    with pytest.raises(InputError) as error:
        explain_module.explain("/proc/self/mem", EnvironmentInputs(scan=False), Config(), [])
    assert str(error.value).startswith("/proc/self/mem: ")


def test_a_range_of_one_release_is_written_as_that_release():
    """xǁImpliedReleasesǁtext__mutmut_4 ("5.4.0–5.4.0" for a run of one release)."""
    runs = (("4.36.0", "4.36.0"), ("5.4.0", "5.6.0"))
    assert ImpliedReleases("transformers", runs, 3).text() == (
        "transformers 4.36.0, 5.4.0–5.6.0 (from the message, line 3)"
    )


def test_ranges_intersect_in_version_order_not_string_order():
    """x__intersection__mutmut_11 (the end of the common run chosen as strings: "4.10.0" < "4.9.0")."""
    assert _intersection((("4.8.0", "4.10.0"),), (("4.9.0", "4.12.0"),)) == (("4.9.0", "4.10.0"),)
    assert _intersection((("4.8.0", "4.9.0"),), (("4.10.0", "4.12.0"),)) == ()
