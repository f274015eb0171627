"""The shipped message catalogue against real text of today's releases (issue 24).

The log lines come from tests/cases/*/produced-*.toml: failures made to happen on an H100 with
torch 2.11.0+cu130, triton 3.6.0 and transformers 5.17.0 (tests/cases/produced/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from attn_doctor._compat import tomllib
from attn_doctor.engine.loader import load_rules
from attn_doctor.releases.messages import CATALOGUE, catalogue
from tests.support import REPO, cli, write_rule
from tools.messages.symptom_audit import unquoted

CASES = REPO / "tests" / "cases"


def produced(name: str) -> tuple[Path, str]:
    (path,) = CASES.glob(f"*/produced-{name}.toml")
    return path, tomllib.loads(path.read_text())["log"]["error"]


def last_line(name: str) -> str:
    return produced(name)[1].strip().splitlines()[-1]


def test_the_catalogue_is_shipped_small_and_names_what_it_read():
    assert CATALOGUE.is_file() and CATALOGUE.stat().st_size < 5_000_000
    packages = catalogue().packages
    for name in ("transformers", "torch", "flash-attn", "triton", "xformers", "flash-linear-attention"):
        assert len(packages[name]["releases_read"]) >= 10, name
    assert "5.17.0" in packages["transformers"]["releases_read"]


def test_the_5x_fa2_error_is_traced_to_its_function_and_releases():
    origins = catalogue().origins(last_line("fa2-not-installed"))
    top = origins[0]
    assert top.id == "transformers:transformers.modeling_utils.PreTrainedModel._flash_attn_import_error"
    assert any(Version(first) <= Version("5.17.0") <= Version(last) for first, last in top.releases)
    assert "pkg_availability_check()" in top.guard


def test_a_flex_attention_value_error_is_traced_with_its_guard():
    top = catalogue().origins(last_line("flex-head-dim-mismatch"))[0]
    assert top.package == "torch" and top.file.endswith("nn/attention/flex_attention.py")
    assert top.kind == "ValueError" and top.guard


@pytest.mark.parametrize("name", ["fa2-not-installed", "flash-attn-import"])
def test_flash_attn_missing_is_named_with_its_install(name: str, tmp_path: Path):
    log = tmp_path / "error.log"
    log.write_text(produced(name)[1])
    report = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)
    first = report["causes"][0]
    assert first["id"] == "usage-flash-attn-not-installed"
    rule = load_rules().get(first["id"])
    assert rule is not None and "install" in rule.fix_summary.lower() and "flash-attn" in rule.fix_summary
    assert report["origins"] or name == "flash-attn-import"  # Python's own ImportError has no release origin


def test_every_symptom_quotes_a_release_or_says_why_not():
    assert unquoted(load_rules().rules, catalogue()) == []


def test_check_never_loads_the_catalogue():
    code = (
        "import sys\n"
        "from attn_doctor.__main__ import main\n"
        "sys.argv = ['attn-doctor', 'check', '--no-scan', '--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'attn_doctor.releases.messages' not in sys.modules, 'check imported the catalogue'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_flex_value_error_no_rule_covers_is_reported_with_origin_and_guard(tmp_path: Path):
    log = tmp_path / "error.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/torch/nn/attention/flex_attention.py", line 1548, '
        "in flex_attention\n"
        "ValueError: Expect number of query heads to be a multiple of kv heads for GQA but got Hq=6 "
        "and Hkv=4.\n"
    )
    result = cli("explain", log, "--no-scan", "--format", "json")
    report = json.loads(result.stdout)
    assert report["causes"] == []
    (origin,) = report["origins"]
    top = origin["messages"][0]
    assert top["package"] == "torch" and top["file"].endswith("torch/nn/attention/flex_attention.py")
    assert top["kind"] == "ValueError" and top["guard"] == "enable_gqa and Hq % Hkv != 0"
    text = " ".join(cli("explain", log, "--no-scan").stdout.split())
    assert "ValueError raised by torch (nn/attention/flex_attention.py" in text
    assert "when enable_gqa and Hq % Hkv != 0" in text


def test_a_message_says_which_releases_can_print_it(tmp_path: Path):
    """transformers 5.17.0's FA2 error exists only in some releases: that range is a fact of the log."""
    log = tmp_path / "error.log"
    log.write_text(produced("fa2-not-installed")[1])
    report = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)
    (implied,) = [i for i in report["implied_releases"] if i["package"] == "transformers"]
    assert any(Version(a) <= Version("5.17.0") <= Version(b) for a, b in implied["releases"])
    assert all(Version(a) >= Version("5.0.0") for a, _ in implied["releases"])  # 4.x worded it otherwise
    assert "from its messages: transformers 5." in cli("explain", log, "--no-scan").stdout


def test_every_message_a_rule_names_is_in_the_catalogue():
    rules = load_rules().rules
    named = [(rule.id, message_id) for rule in rules for message_id in rule.messages]
    assert named, "no rule names a message: the check below would pass vacuously"
    assert [pair for pair in named if not catalogue().named(pair[1])] == []


@pytest.mark.parametrize(
    ("transformers", "verdict"),
    [("<4.45", "not affected"), (">=4.44", "affected"), ("<5.10", "unknown")],
)
def test_a_rule_range_is_decided_by_the_releases_a_message_exists_in(
    tmp_path: Path, transformers: str, verdict: str
):
    """No version in the log, only 5.x's wording of the FA2 error: transformers is one of the
    releases that print it (5.4.0 and later), so a 4.x rule is refuted, a rule for all of them
    holds, and one whose boundary falls among them stays unknown."""
    rules = tmp_path / "rules"
    write_rule(
        rules,
        "fa2-range",
        f'packages = {{ transformers = "{transformers}" }}',
        symptoms='["FlashAttention2 has been toggled on, but it cannot be used"]',
    )
    log = tmp_path / "error.log"
    log.write_text(produced("fa2-not-installed")[1])
    report = json.loads(cli("explain", log, "--no-scan", "--rules", rules, "--format", "json").stdout)
    (cause,) = [c for c in report["causes"] if c["id"] == "fa2-range"]
    assert cause["verdict"] == verdict.replace(" ", "-")
    (reason,) = [r for r in cause["reasons"] if r["condition"] == "transformers"]
    assert reason["text"].startswith("transformers 5.4.0–") and f"{transformers}" in reason["text"]
    package = report["environment"]["packages"]["transformers"]
    assert (
        package["version"] is None and "5.17.0" in package["releases"] and "4.57.1" not in package["releases"]
    )


def test_every_wording_of_a_message_a_rule_names_triggers_it(tmp_path: Path):
    """The point of naming messages: each release's wording (from the releases' own source, fields
    filled in) is a symptom of the rule, also those no hand-written symptom quotes, such as 5.4's
    'Flash Attention 2 with a model not initialized on GPU. Please make sure ...'."""
    rules = [rule for rule in load_rules().rules if rule.messages]
    lines = {
        (rule.id, message.template.replace("{}", "2").strip().splitlines()[0])
        for rule in rules
        for reference in rule.messages
        for message in catalogue().named(reference)
    }
    assert len({rule_id for rule_id, _ in lines}) >= 5
    for rule_id, line in sorted(lines):
        log = tmp_path / "error.log"
        log.write_text(f"RuntimeError: {line}\n")
        causes = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)["causes"]
        assert rule_id in [cause["id"] for cause in causes], line
    five_four = (
        "You are attempting to use Flash Attention 2 with a model not initialized on GPU. Please make sure"
    )
    assert any(
        line.startswith(five_four) for rule_id, line in lines if rule_id == "usage-fa2-model-not-on-gpu"
    )


def test_no_available_kernel_says_why_in_torchs_own_words(tmp_path: Path):
    """The H100 run: fp32 inputs with only the flash backend allowed. The reasons torch printed
    above the error (its sdp_utils checks, traced by the catalogue) are shown with the cause."""
    log = tmp_path / "error.log"
    log.write_text(produced("sdpa-flash-only-float32")[1])
    report = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)
    first = report["causes"][0]
    assert first["id"] == "usage-sdpa-no-available-kernel"
    said = [reason["text"] for reason in first["log_reasons"]]
    assert any(
        text.startswith("Expected query, key and value to all be of dtype: {Half, BFloat16}") for text in said
    )
    assert not any("not used because" in text for text in said)  # the headers are not reasons
    assert "the log says why, line" in cli("explain", log, "--no-scan").stdout


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("sdpa-gqa-without-flag", "usage-sdpa-gqa-without-enable-gqa"),
        ("sdpa-mask-shape", "usage-sdpa-mask-shape"),
    ],
)
def test_a_generic_shape_error_is_an_sdpa_mistake_only_where_the_log_shows_the_call(
    tmp_path: Path, name: str, rule: str
):
    """torch's broadcast and expand messages are any shape mismatch: the H100 traceback's call to
    scaled_dot_product_attention is what makes them these user errors (feature sdpa, from the log)."""
    text = produced(name)[1]
    log = tmp_path / "error.log"
    log.write_text(text)
    report = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)
    assert (report["causes"][0]["id"], report["causes"][0]["verdict"]) == (rule, "affected")
    sdpa = [f for f in report["environment"]["features"]["facts"] if f["name"] == "sdpa"]
    assert sdpa and sdpa[0]["source"] == "from the log"
    log.write_text(text.replace("F.scaled_dot_product_attention(", "torch.add("))
    other = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)
    assert [(c["id"], c["verdict"]) for c in other["causes"]] == [(rule, "unknown")]


def test_a_mistyped_attn_implementation_gets_the_nearest_name_the_message_lists(tmp_path: Path):
    """transformers 5.17.0 on the H100, attn_implementation="flash_attn_2": the valid names are
    the message's own, so the answer follows whatever the installed release lists."""
    text = produced("attn-implementation-typo")[1]
    log = tmp_path / "error.log"
    log.write_text(text)
    first = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)["causes"][0]
    assert first["id"] == "usage-attn-implementation-invalid"
    assert first["nearest"] == {"given": "flash_attn_2", "nearest": "flash_attention_2"}
    log.write_text(text.replace('"flash_attn_2"', '"flex_atention"'))
    first = json.loads(cli("explain", log, "--no-scan", "--format", "json").stdout)["causes"][0]
    assert first["nearest"] == {"given": "flex_atention", "nearest": "flex_attention"}


def test_db_info_shows_the_catalogue_one_aligned_row_per_package():
    text = cli("db", "info").stdout
    assert f"message catalogue: snapshot of {catalogue().generated}" in text
    rows = text.split("message catalogue:", 1)[1].splitlines()[2:]
    assert {row.split()[0] for row in rows if row.strip()} == set(catalogue().packages)
    assert len({row.index(row.split()[1]) + len(row.split()[1]) for row in rows if row.strip()}) == 1
    document = json.loads(cli("db", "info", "--format", "json").stdout)["message_catalogue"]
    assert document["packages"]["transformers"]["releases"] >= 100
