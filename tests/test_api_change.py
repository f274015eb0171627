"""API errors in a log meet the API-change tables: the ``api_change`` condition (engine/api_change.py)
names the release that removed, renamed or added the missing name and the nearest release on the
calling code's side of it. Error text is the reporters' own (tests/cases/); the boundaries are the
shipped tables' (attn_doctor/releases/snapshot/api-changes.json, read from the released code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import case_log
from typer.testing import CliRunner

from attn_doctor._compat import tomllib
from attn_doctor.cli import app
from attn_doctor.facts.missing_names import MEMBER, MODULE, NAME, PARAMETER, REQUIRED, missing_in
from attn_doctor.releases.facts import snapshot

CASES = Path(__file__).parent / "cases"


def explain_json(*args: str | Path) -> dict:
    result = CliRunner().invoke(app, ["explain", *map(str, args), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)


def cause(report: dict, rule_id: str) -> dict:
    return next(c for c in report["causes"] if c["id"] == rule_id)


def api_reason(found: dict) -> dict:
    return next(r for r in found["reasons"] if r["condition"] == "release")


@pytest.mark.parametrize(
    "case, kind, owner, name",
    [
        (
            "transformers/deepseek-ai-deepseek-ocr-7.toml",
            NAME,
            "transformers.models.llama.modeling_llama",
            "LlamaFlashAttention2",
        ),
        ("flash-attn/xdit-project-xdit-217.toml", REQUIRED, "_flash_attn_forward", "softcap"),
        ("flash-attn/internlm-xtuner-744.toml", PARAMETER, "flash_attn_func", "window_size"),
        ("fla/tile-ai-tilelang-574.toml", MODULE, "fla.ops.common.utils", ""),
        ("triton/pytorch-pytorch-127271.toml", NAME, "triton.compiler.compiler", "triton_key"),
    ],
)
def test_api_errors_read_from_real_reports(case: str, kind: str, owner: str, name: str) -> None:
    error = tomllib.loads((CASES / case).read_text(encoding="utf-8"))["log"]["error"]
    seen = [m for line in error.splitlines() for m in missing_in(line, "line")]
    assert (kind, owner, name) in [(m.kind, m.owner, m.name) for m in seen]


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "AttributeError: 'DynamicCache' object has no attribute 'seen_tokens'",
            (MEMBER, "DynamicCache", "seen_tokens"),
        ),
        (
            "AttributeError: module 'triton.language' has no attribute 'libdevice'",
            (NAME, "triton.language", "libdevice"),
        ),
        # a circular import and a package that is not installed say nothing about a release
        ("AttributeError: partially initialized module 'triton' has no attribute 'jit'", None),
        ("ModuleNotFoundError: No module named 'fla'", None),
        ("ImportError: cannot import name 'x' from partially initialized module 'flash_attn'", None),
    ],
)
def test_which_messages_are_api_errors(line: str, expected: tuple[str, str, str] | None) -> None:
    seen = [(m.kind, m.owner, m.name) for m in missing_in(line, "line 1")]
    assert seen == ([expected] if expected else [])


def test_timelines_follow_the_released_code() -> None:
    [flash_attention_2] = snapshot().api_changes.timelines(
        missing_in(
            "cannot import name 'LlamaFlashAttention2' from 'transformers.models.llama.modeling_llama'", ""
        )[0]
    )
    assert [flash_attention_2.present_at(v) for v in ("4.33.3", "4.34.0", "4.47.1", "4.48.0", "4.57.1")] == [
        False,
        True,
        True,
        False,
        False,
    ]
    assert flash_attention_2.present_at("4.29.0") is None  # older than the releases compared
    [triton_key] = snapshot().api_changes.timelines(
        missing_in("cannot import name 'triton_key' from 'triton.compiler.compiler'", "")[0]
    )
    assert [triton_key.present_at(v) for v in ("2.3.1", "3.0.0", "3.4.0", "3.5.0")] == [
        False,
        True,
        True,
        False,
    ]
    assert triton_key.cause("2.3.1", False) == ("added", "3.0.0")  # the code needs a newer triton
    assert triton_key.cause("3.5.1", False) == ("removed", "3.5.0")  # or was written for an older one


def test_removed_name_past_its_release_names_the_last_release_with_it(tmp_path: Path) -> None:
    log = case_log("transformers/deepseek-ai-deepseek-ocr-7.toml", tmp_path)
    report = explain_json(log, "--pin", "transformers==4.57.1")
    first = report["causes"][0]
    assert (first["id"], first["verdict"]) == ("transformers-downstream-attention-api-drift", "affected")
    reason = api_reason(first)
    assert reason["holds"] is True
    assert "removed in transformers 4.48.0" in reason["text"]
    assert reason["suggested_pins"] == ["transformers==4.47.1"]  # what the thread's reporters did


def test_a_release_that_has_the_name_is_not_the_cause(tmp_path: Path) -> None:
    log = case_log("transformers/deepseek-ai-deepseek-ocr-7.toml", tmp_path)
    reason = api_reason(
        cause(
            explain_json(log, "--pin", "transformers==4.47.1"), "transformers-downstream-attention-api-drift"
        )
    )
    assert reason["holds"] is False
    assert "4.47.1 has LlamaFlashAttention2" in reason["text"]


def test_an_unstated_release_is_unknown_and_still_names_the_change(tmp_path: Path) -> None:
    log = case_log("transformers/deepseek-ai-deepseek-ocr-7.toml", tmp_path)
    found = cause(explain_json(log), "transformers-downstream-attention-api-drift")
    assert found["verdict"] == "unknown"
    assert "removed in transformers 4.48.0" in api_reason(found)["text"]


def test_a_required_parameter_names_the_release_that_added_it(tmp_path: Path) -> None:
    """xDiT#217: the maintainer's advice was flash_attn 2.5.9.post1, the last release before softcap."""
    log = case_log("flash-attn/xdit-project-xdit-217.toml", tmp_path)
    found = cause(explain_json(log, "--pin", "flash-attn==2.6.3"), "flash-attn-private-api-signature-change")
    reason = api_reason(found)
    assert found["verdict"] == "affected"
    assert "softcap" in reason["text"] and "added in flash-attn 2.6.0" in reason["text"]
    assert reason["suggested_pins"] == ["flash-attn==2.5.9.post1"]


def test_a_name_the_code_needs_from_a_newer_release(tmp_path: Path) -> None:
    """pytorch#127271: torch's inductor imports triton_key, which triton 2.3 does not have."""
    log = case_log("triton/pytorch-pytorch-127271.toml", tmp_path)
    report = explain_json(log, "--pin", "triton==2.3.1", "--pin", "torch==2.4.0")
    reason = api_reason(cause(report, "triton-api-change"))
    assert reason["holds"] is True and "added in triton 3.0.0" in reason["text"]
    assert reason["suggested_pins"] == ["triton==3.0.0"]


def test_a_name_defined_only_on_some_paths_is_not_blamed_on_the_release(tmp_path: Path) -> None:
    """transformers 4.43-4.52 bind _flash_supports_window_size only when flash-attn imports."""
    log = tmp_path / "window.log"
    log.write_text(
        "ImportError: cannot import name '_flash_supports_window_size' from "
        "'transformers.modeling_flash_attention_utils'\n",
        encoding="utf-8",
    )
    reason = api_reason(
        cause(
            explain_json(log, "--pin", "transformers==4.45.0"), "transformers-downstream-attention-api-drift"
        )
    )
    assert reason["holds"] is False and "only on some paths" in reason["text"]
    reason = api_reason(
        cause(
            explain_json(log, "--pin", "transformers==4.54.0"), "transformers-downstream-attention-api-drift"
        )
    )
    assert reason["holds"] is True and "removed in transformers 4.54.0" in reason["text"]


def test_a_member_no_table_knows_is_folded_into_one_line(tmp_path: Path) -> None:
    """'NoneType' object has no attribute: a bug in the calling code, not an API change."""
    log = case_log("transformers/huggingface-transformers-45588.toml", tmp_path)
    result = CliRunner().invoke(app, ["explain", str(log), "--pin", "transformers==4.56.0"])
    assert "Also matched only by a generic message, on versions they do not fit" in result.output
    assert "1. - triton-api-change" not in result.output
    verbose = CliRunner().invoke(app, ["explain", str(log), "--pin", "transformers==4.56.0", "-v"])
    assert "no package's API tables know it" in verbose.output


def test_a_package_the_log_does_not_name_is_unknown_not_absent(tmp_path: Path) -> None:
    log = case_log("flash-attn/xdit-project-xdit-217.toml", tmp_path)
    found = cause(explain_json(log), "flash-attn-private-api-signature-change")
    assert found["verdict"] == "unknown"
    assert any("not named in the log" in r["text"] for r in found["reasons"])
    with_requirements = tmp_path / "requirements.txt"
    with_requirements.write_text("torch==2.6.0\n", encoding="utf-8")
    found = cause(explain_json(log, "-r", with_requirements), "flash-attn-private-api-signature-change")
    assert found["verdict"] == "not-affected"  # a requirements file lists the whole target
