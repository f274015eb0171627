"""`attn-doctor fix`: the real CLI on the real rules database (plus test rules where a case needs
one), and every plan proved by feeding its versions back to `check`."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest
from packaging.requirements import Requirement
from referencing import Registry, Resource
from support import GEMMA2_PROJECT, cli, lines_wider_than, write_rule

SEED = ("transformers==4.44.0", "flash-attn==2.3.6")
# what a Gemma-2 training and generation project on FA2 uses, and the project (its code runs Gemma-2)
USED = ("flash_attention_2", "generate", "sliding_window", "softcap", "alibi", "torch_compile")
SEED_FEATURES = (*(a for feature in USED for a in ("--feature", feature)), "--project", str(GEMMA2_PROJECT))
SEED_ERRORS = {
    "gemma2-fa2-cu-seqlens",
    "gemma2-fa2-generate-4d-mask",
    "gemma2-fa2-sliding-window-slice-4-44-0",
    "flash-attn-alibi-before-2-4",
    "flash-attn-softcap-before-2-6",
}


@pytest.fixture
def seed_site(site, no_gpu):
    """transformers 4.44.0 and flash-attn 2.3.6 installed next to a CUDA 12.1 torch 2.5.1."""
    site.install("torch", "2.5.1+cu121", torch_cuda="12.1")
    site.install("transformers", "4.44.0")
    site.install("flash_attn", "2.3.6")
    return site


def fix_json(*args):
    result = cli("fix", "--format", "json", *args)
    return result, json.loads(result.stdout)


def pins(*requirements: str) -> list[str]:
    return [arg for requirement in requirements for arg in ("--pin", requirement)]


def test_seed_versions_the_rules_name(seed_site):
    """The seed's stack: transformers 4.48.2 (Gemma-2 FA2 generate with a sliding window is wrong
    through 4.46.3, crashes in 4.47.x and 4.48.0-4.48.1: the 2026-11 audit, read in the wheels) and
    flash-attn 2.6.0.post1 (no 2.6.0 was published), the softcap minimum, above the ALiBi one
    (2.4.0.post1); 2.7.0.post2 is only a warning's (no 2.7.0 was published)."""
    result = cli("fix", "--path", seed_site.path, "--gpu", "sm_80", *SEED_FEATURES)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "pip install 'flash-attn==2.6.0.post1' 'transformers==4.48.2'" in result.stdout
    assert "clears flash-attn-alibi-before-2-4, flash-attn-softcap-before-2-6" in result.stdout
    assert "5 findings at or above --fail-on error; checked again with the versions below: 0 left." in (
        result.stdout
    )


def test_seed_fail_on_warning_also_clears_warnings(seed_site):
    args = ("--path", seed_site.path, "--gpu", "sm_80", *SEED_FEATURES, "--feature", "attention_mask_4d")
    result, plan = fix_json(*args, "--fail-on", "warning")
    # 4.56.0: the first release whose FA2 sliding window is not one key too wide (a warning)
    assert plan["constraints"] == ["flash-attn==2.7.0.post2", "transformers==4.56.0"]
    flash_attn = next(c for c in plan["changes"] if c["package"] == "flash-attn")
    assert "flash-attn-torch-compile-graph-break-before-2-7" in flash_attn["clears"]
    stays = {s["id"]: s["kind"] for s in plan["stays"]}
    # a 4-D mask is the code's business, not pip's
    assert stays == {"transformers-fa2-4d-attention-mask": "not-pip"}
    assert result.exit_code == plan["exit_code"] == 1


def test_proposed_versions_fed_back_to_check_clear_every_error(seed_site, tmp_path):
    constraints = tmp_path / "constraints.txt"
    result = cli("fix", "--path", seed_site.path, "--gpu", "sm_80", *SEED_FEATURES, "--output", constraints)
    assert result.exit_code == 0 and f"Constraints written to {constraints}." in result.stdout
    text = constraints.read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    requirements = [Requirement(line) for line in lines]
    assert {(r.name, str(r.specifier)) for r in requirements} == {
        ("flash-attn", "==2.6.0.post1"),
        ("transformers", "==4.48.2"),
    }
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert all(rule_id in header for rule_id in SEED_ERRORS)
    check = ("check", "--path", seed_site.path, "--gpu", "sm_80", *SEED_FEATURES)
    assert cli(*check).exit_code == 1
    # the versions as pins over the installed packages
    proposed = [f"{r.name}=={next(iter(r.specifier)).version}" for r in requirements]
    assert cli(*check, *pins(*proposed)).exit_code == 0


def constraint_lines(path) -> tuple[list[str], list[Requirement]]:
    """A constraints file as pip reads it (pip's requirements file format): each line an option
    (``--extra-index-url URL``), a comment, or a requirement."""
    options, requirements = [], []
    for line in path.read_text().splitlines():
        if line.startswith("--"):
            option, _, value = line.partition(" ")
            assert option == "--extra-index-url" and value.startswith("https://") and " " not in value, line
            options.append(value)
        elif line and not line.startswith("#"):
            requirements.append(Requirement(line))
    return options, requirements


@pytest.mark.parametrize(
    ("pins", "args", "clears"),
    [
        # the line: torch 2.7.1+cu126 has no Blackwell code, fix proposes 2.7.1+cu128
        (["torch==2.7.1+cu126"], ["--gpu", "B200"], "torch-wheel-lacks-gpu-arch"),
        # flash-attn beside a CPU-only torch, on an H100
        (
            ["torch==2.5.1+cpu", "flash-attn"],
            ["--gpu", "H100"],
            "torch-cpu-build-with-flash-attn-on-gpu",
        ),
    ],
    ids=["cu126-on-b200", "cpu-on-h100"],
)
def test_a_local_version_in_the_constraints_comes_with_its_index(tmp_path, pins, args, clears):
    """pip finds torch 2.7.1+cu128 only on download.pytorch.org/whl/cu128: the file says where,
    on its first line, the same index as the pip command's."""
    requirements, constraints = tmp_path / "requirements.txt", tmp_path / "constraints.txt"
    requirements.write_text("\n".join(pins) + "\n")
    common = ("--no-scan", "-r", requirements, "--python", "3.11", *args)
    result, plan = fix_json(*common)
    valid_fix_json(plan)
    assert clears in plan["changes"][0]["clears"] and result.exit_code == 0
    torch = next(c for c in plan["changes"] if c["package"] == "torch")
    variant = torch["proposed"].split("+")[1]
    index = f"https://download.pytorch.org/whl/{variant}"
    assert variant.startswith("cu") and plan["extra_index_urls"] == [index]
    assert f"--index-url {index}" in plan["pip_command"]

    assert cli("fix", *common, "--output", constraints).exit_code == 0
    assert constraints.read_text().splitlines()[0] == f"--extra-index-url {index}"
    options, lines = constraint_lines(constraints)
    assert options == [index] and f"torch=={torch['proposed']}" in map(str, lines)


def test_constraints_of_public_versions_name_no_index(seed_site, tmp_path):
    constraints = tmp_path / "constraints.txt"
    cli("fix", "--path", seed_site.path, "--gpu", "sm_80", *SEED_FEATURES, "--output", constraints)
    options, lines = constraint_lines(constraints)
    assert options == [] and {line.name for line in lines} == {"flash-attn", "transformers"}


def test_one_finding(site, no_gpu):
    args = ["--path", site.path, "--gpu", "sm_90", "--feature", "flash_attention_2", *pins(SEED[0])]
    result, plan = fix_json(*args)
    assert plan["failing_before"] == ["gemma2-fa2-cu-seqlens"] and plan["failing_after"] == []
    assert plan["changes"] == [
        {
            "package": "transformers",
            "distribution": "transformers",
            "installed": "4.44.0",
            "proposed": "4.44.1",
            "requirement": "transformers==4.44.1",
            "downgrade": False,
            "clears": ["gemma2-fa2-cu-seqlens"],
            "keeps_clear": [],
            "build": None,
        }
    ]
    assert result.exit_code == 0
    assert cli("check", *args[:-2], *pins("transformers==4.44.1")).exit_code == 0


def test_a_pin_in_any_spelling_pip_accepts_gets_the_same_plan(site, no_gpu):
    """PEP 503, as `wheel` and pip: the proposed requirement is the package's canonical name."""
    args = ["--path", site.path, "--gpu", "sm_90", "--feature", "flash_attention_2"]
    _, plan = fix_json(*args, *pins("Transformers==4.44.0"))
    assert plan["constraints"] == ["transformers==4.44.1"]


@pytest.mark.parametrize("given_as", ["--pin", "--requirements", "--env-file"])
def test_several_findings_from_each_what_if_input(site, no_gpu, tmp_path, given_as):
    if given_as == "--pin":
        inputs = ["--path", site.path, *pins(*SEED)]
    elif given_as == "--requirements":
        (tmp_path / "requirements.txt").write_text("\n".join(SEED) + "\n")
        inputs = ["-r", tmp_path / "requirements.txt"]
    else:
        site.install("transformers", "4.44.0")
        site.install("flash_attn", "2.3.6")
        (tmp_path / "env.json").write_text(cli("probe", "--json", "--path", site.path).stdout)
        inputs = ["--env-file", tmp_path / "env.json"]
    result, plan = fix_json("--gpu", "sm_90", *SEED_FEATURES, *inputs)
    assert set(plan["failing_before"]) == SEED_ERRORS and plan["failing_after"] == []
    assert plan["pip_command"] == "pip install 'flash-attn==2.6.0.post1' 'transformers==4.48.2'"
    assert result.exit_code == 0


def test_upgrades_torch_rather_than_downgrade_triton(site, no_gpu):
    """triton 3.4 with torch 2.7: the rules name torch 2.8 (upgrade) and triton 3.3 (downgrade)."""
    site.install("torch", "2.7.0+cu126", torch_cuda="12.6")
    site.install("triton", "3.4.0")
    result, plan = fix_json("--path", site.path, "--gpu", "sm_90", "--feature", "torch_compile")
    assert plan["failing_before"] == ["triton-3-4-needs-torch-2-8"]
    assert plan["constraints"] == ["torch==2.8.0"]  # the release's own spelling, from the snapshot
    assert plan["changes"][0]["build"] == "CUDA 12.6"
    assert result.exit_code == 0


def test_conflict_is_resolved_by_changing_a_second_package(tmp_path, site, no_gpu):
    rules = tmp_path / "rules"
    write_rule(rules, "old-demo", 'packages = { demo-lib = "<2.0" }')
    write_rule(rules, "new-demo-old-torch", 'packages = { demo-lib = ">=2.0", torch = "<2.4" }')
    args = ["--path", site.path, "--rules", rules, "--feature", "varlen", "--gpu", "sm_90"]
    result, plan = fix_json(*args, *pins("demo-lib==1.5", "torch==2.3.0+cu121"))
    changes = {c["package"]: c for c in plan["changes"]}
    assert plan["constraints"] == ["demo-lib==2.0", "torch==2.4.0"]
    assert changes["demo-lib"]["clears"] == ["old-demo"]
    assert changes["torch"]["keeps_clear"] == ["new-demo-old-torch"] and changes["torch"]["clears"] == []
    assert result.exit_code == 0
    text = cli("fix", *args, *pins("demo-lib==1.5", "torch==2.3.0+cu121")).stdout
    assert "needed with the other changes: keeps new-demo-old-torch clear" in text


def test_a_clear_beyond_the_search_bound_says_so(tmp_path, site, no_gpu, monkeypatch):
    monkeypatch.setattr("attn_doctor.fixer.search.MAX_CHANGED_PACKAGES", 1)
    rules = tmp_path / "rules"
    write_rule(rules, "old-demo", 'packages = { demo-lib = "<2.0" }')
    write_rule(rules, "new-demo-old-torch", 'packages = { demo-lib = ">=2.0", torch = "<2.4" }')
    args = ["--path", site.path, "--rules", rules, "--feature", "varlen"]
    result, plan = fix_json(*args, *pins("demo-lib==1.5", "torch==2.3.0+cu121"))
    [stay] = plan["stays"]
    assert stay["kind"] == "search-bound" and "at most 1 packages changed" in stay["reason"]
    assert plan["search"]["bounded"] is True
    assert result.exit_code == 1


def test_conflict_that_no_version_escapes_stays(tmp_path, site, no_gpu):
    rules = tmp_path / "rules"
    write_rule(rules, "old-demo", 'packages = { demo-lib = "<2.0" }')
    write_rule(rules, "new-demo-any-other", 'packages = { demo-lib = ">=2.0", other-lib = "" }')
    args = ["--path", site.path, "--rules", rules, "--feature", "varlen"]
    result, plan = fix_json(*args, *pins("demo-lib==1.5", "other-lib==1.0"))
    assert plan["changes"] == [] and plan["pip_command"] is None
    [stay] = plan["stays"]
    assert stay["id"] == "old-demo" and stay["kind"] == "conflict"
    assert "demo-lib 2.0 triggers new-demo-any-other" in stay["reason"]
    assert result.exit_code == 1


def test_finding_with_no_fixed_version_stays(tmp_path, site, no_gpu):
    write_rule(tmp_path / "rules", "demo-unfixed", 'packages = { demo-lib = ">=1.0" }')
    args = ["fix", "--path", site.path, "--rules", tmp_path / "rules", "--feature", "varlen"]
    result = cli(*args, *pins("demo-lib==1.5"))
    assert result.exit_code == 1
    assert "✗ demo-unfixed [error]" in result.stdout
    assert "why: no release is known to be fixed: no version the rules name is outside demo-lib >=1.0" in (
        result.stdout
    )
    assert "pip install" not in result.stdout


def test_downgrade_only_when_nothing_else_works(tmp_path, site, no_gpu):
    write_rule(tmp_path / "rules", "demo-regression", 'packages = { demo-lib = ">1.4" }')
    args = ["--path", site.path, "--rules", tmp_path / "rules", "--feature", "varlen", *pins("demo-lib==1.5")]
    result, plan = fix_json(*args)
    assert plan["constraints"] == ["demo-lib==1.4"] and plan["changes"][0]["downgrade"] is True
    assert result.exit_code == 0
    assert (
        "demo-lib 1.5 -> 1.4 (a downgrade: no upgrade the rules name clears it)" in cli("fix", *args).stdout
    )


def test_hardware_finding_stays_not_fixable_by_pip(tmp_path, site, no_gpu):
    write_rule(tmp_path / "rules", "demo-old-gpu", 'compute_capability = "<8.0"', component='"gpu"')
    args = ["--path", site.path, "--rules", tmp_path / "rules", "--gpu", "T4", "--feature", "varlen"]
    result, plan = fix_json(*args, *pins("transformers==4.44.0"))
    assert plan["stays"] == [
        {
            "id": "demo-old-gpu",
            "severity": "error",
            "kind": "not-pip",
            "reason": "not fixable by pip: it depends on the GPU",
            "fix": {"summary": "Upgrade.", "pins": []},
        }
    ]
    assert result.exit_code == 1


def test_shipped_pre_ampere_rule_stays_while_the_rest_is_fixed(seed_site):
    result = cli("fix", "--path", seed_site.path, "--gpu", "T4", *SEED_FEATURES)
    assert result.exit_code == 1
    assert "pip install 'flash-attn==2.6.0.post1' 'transformers==4.48.2'" in result.stdout
    assert "✗ flash-attn-pre-ampere-gpu [error]" in result.stdout
    # flash-attn 1 (Turing's way out) is older than every FA2 feature the project uses, and than
    # the 2.1.0 that transformers 4.35-5.3 requires on CUDA
    assert "every version the rules name conflicts with another rule: flash-attn 1 triggers" in result.stdout
    assert "transformers-flash-attn-too-old" in result.stdout
    assert "fix: Do not use FlashAttention-2 on this GPU" in result.stdout


@pytest.mark.parametrize("extra", [(), ("--fail-on", "never")])
def test_nothing_to_fix(site, no_gpu, tmp_path, extra):
    constraints = tmp_path / "constraints.txt"
    args = ["--path", site.path, "--gpu", "sm_90", *pins("transformers==4.44.1"), "--output", constraints]
    result = cli("fix", *args, *extra)
    assert result.exit_code == 0
    assert "Nothing to fix" in result.stdout and "pip install" not in result.stdout
    assert "# nothing to change" in constraints.read_text()
    if not extra:
        assert cli("fix", *pins(*SEED), "--path", site.path, "--fail-on", "never").exit_code == 0


def valid_fix_json(plan: dict) -> None:
    """``plan`` follows attn_doctor/schemas/fix.schema.json."""
    schemas = resources.files("attn_doctor") / "schemas"
    registry = Registry().with_resources(
        [
            (f"attn-doctor/{name}", Resource.from_contents(json.loads((schemas / name).read_text())))
            for name in ("environment.schema.json", "fix.schema.json")
        ]
    )
    schema = json.loads((schemas / "fix.schema.json").read_text())
    jsonschema.Draft202012Validator(schema, registry=registry).validate(plan)


def test_json_matches_its_schema_and_is_deterministic(seed_site):
    args = ["--path", seed_site.path, "--gpu", "T4", "--fail-on", "warning", *SEED_FEATURES]
    first, plan = fix_json(*args)
    valid_fix_json(plan)
    assert plan["schema"] == "attn-doctor/fix" and plan["exit_code"] == first.exit_code == 1
    assert fix_json(*args)[0].stdout == first.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pin", "transformers"], "--pin 'transformers'"),
        (["--pin", "transformers==four"], "not a valid PEP 440 version"),
        (["--format", "sarif"], "--format"),
        (["--fail-on", "fatal"], "--fail-on"),
    ],
)
def test_bad_input_is_one_line_exit_2(site, args, needle):
    result = cli("fix", "--path", site.path, *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("attn-doctor: error: ") and len(result.stderr.splitlines()) == 1
    assert needle in result.stderr and "Traceback" not in result.stderr


def test_malformed_requirements_file_is_one_line_exit_2(site, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("transformers==4.44.0\nflash-attn ==>> 2.3.6\n")
    result = cli("fix", "-r", requirements)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"attn-doctor: error: {requirements}:2: not a requirement")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("extra", [["-v"], ["--gpu", "T4"]], ids=["unknowns-verbose", "stays-on-T4"])
def test_text_fits_80_columns(tmp_path, monkeypatch, extra):
    """Findings, what stays and why, the rejected versions (-v) and the "Not considered" lines
    wrap at spaces within 80 columns; the pip command wraps with backslash line ends."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.9.1+cu130\nflash-attn==2.8.3\ntransformers==4.44.0\n")
    features = [
        arg
        for feature in ("flash_attention_2", "generate", "torch_compile")
        for arg in ("--feature", feature)
    ]
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("fix", "--no-scan", "-r", requirements, *features, *extra)
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    assert "Not considered (unknown: a fact is missing):" in result.stdout
    assert ("Stays (" in result.stdout) == (extra != ["-v"]) and ("Not proposed:" in result.stdout) == (
        extra == ["-v"]
    )
    assert lines_wider_than(result.stdout, 80) == []
    monkeypatch.setenv("COLUMNS", "")  # a pipe nobody sized: whole lines, for grep
    assert lines_wider_than(cli("fix", "--no-scan", "-r", requirements, *features, *extra).stdout, 80)
