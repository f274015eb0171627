"""What the reports say is true of the stack checked (issue 23, items 4-6): each test runs the real
CLI on real rule files and the shipped release facts, on the stacks a new user tried."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attn_doctor.engine.fix_pins import reconcile
from attn_doctor.engine.loader import load_rules
from attn_doctor.facts.model import Environment, Package
from tests.support import REPO, cli

LOGS = REPO / "tests" / "logs"


def pin_file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_unknowns_are_grouped_by_the_missing_fact(tmp_path: Path):
    """A CI runner without --gpu: one line per missing fact, not a fix block per rule."""
    pins = pin_file(tmp_path, "torch==2.9.1+cu130", "flash-attn==2.8.3")
    text = cli("check", "--no-scan", "-r", pins).stdout
    group = re.search(r"\? (\d+) rules need the GPU: pass --gpu", text)
    assert group and int(group[1]) >= 3
    assert "1 rule needs the NVIDIA driver version" in text or "rules need the NVIDIA driver version" in text
    assert "[error, unknown]" not in text  # no full block for an unknown rule without -v
    assert "torch-wheel-lacks-gpu-arch" in text  # but each rule is named
    verbose = cli("check", "--no-scan", "-r", pins, "-v").stdout
    assert "? torch-wheel-lacks-gpu-arch [error, unknown]" in verbose


def test_github_annotations_are_one_notice_per_missing_fact(tmp_path: Path):
    pins = pin_file(tmp_path, "torch==2.9.1+cu130", "flash-attn==2.8.3", "transformers==4.44.0")
    lines = cli("check", "--no-scan", "-r", pins, "--format", "github").stdout.splitlines()
    notices = [line for line in lines if line.startswith("::notice")]
    assert len([n for n in notices if "need the GPU" in n]) == 1
    # 7 unknowns and 6 feature-dependent rules made 13 notices; grouped, 11 (with --no-scan whether
    # the project builds flash-attention from source is unknown, not "no": one more group; and the
    # Gemma-2 rule applies if you use a gemma2 model too, apart from the other sliding-window rule)
    assert len(notices) <= 11
    assert not any("%0A" in line for line in lines)  # rule prose has no hard line breaks


def test_no_fix_points_at_a_line_that_is_not_there():
    rules = load_rules().rules
    assert [rule.id for rule in rules if "line above" in rule.fix_summary] == []


def test_a_computed_fix_that_finds_nothing_says_so(tmp_path: Path):
    """torch 2.9.1+cu130 with flash-attn 2.8.3: no flash-attn release has a wheel for that torch."""
    pins = pin_file(tmp_path, "torch==2.9.1+cu130", "flash-attn==2.8.3")
    text = cli("check", "--no-scan", "-r", pins, "--python", "3.11").stdout
    block = text.split("flash-attn-no-prebuilt-wheel-for-torch [warning, affected]", 1)[1].split("\n! ")[0]
    assert (
        "for these versions: none: no flash-attn release in the database has a wheel for torch 2.9" in block
    )


def test_a_t4_is_not_told_to_install_a_flash_attn_wheel_for_it(tmp_path: Path):
    """No flash-attn 2 wheel has sm_75 code; the pre-Ampere rule says what to do instead."""
    pins = pin_file(tmp_path, "torch==2.5.1+cu124", "flash-attn==2.7.4.post1")
    report = json.loads(
        cli("check", "--no-scan", "-r", pins, "--gpu", "T4", "--python", "3.11", "--format", "json").stdout
    )
    verdicts = {f["id"]: f["verdict"] for f in report["findings"]}
    assert verdicts["flash-attn-wheel-lacks-gpu-arch"] == "not-affected"
    blackwell = json.loads(
        cli("check", "--no-scan", "-r", pins, "--gpu", "B200", "--python", "3.11", "--format", "json").stdout
    )
    assert {f["id"]: f["verdict"] for f in blackwell["findings"]}[
        "flash-attn-wheel-lacks-gpu-arch"
    ] == "affected"


def test_fix_pins_name_the_companion_that_pip_needs():
    """triton>=3.5 beside torch 2.7.1, whose metadata pins triton==3.3.1 (the release facts)."""
    env = Environment(
        packages={"torch": Package("torch", "2.7.1", "torch", "--pin")}, platform="linux", machine="x86_64"
    )
    pins = reconcile(("triton>=3.5",), env)
    assert pins.conflicts == ("torch 2.7.1 requires triton==3.3.1",)
    assert pins.pins[0] == "triton>=3.5" and pins.pins[1].startswith("torch>=2.9")
    assert reconcile(("triton>=3.3",), env).conflicts == ()


def test_pins_pip_would_refuse_are_said_so(tmp_path: Path):
    pins = pin_file(tmp_path, "torch==2.7.1", "triton==3.5.0")
    text = cli("check", "--no-scan", "-r", pins, "--gpu", "H100", "--platform", "linux").stdout
    assert "pip cannot install these together: torch 2.7.1 requires triton==3.3.1" in text


def test_a_log_that_does_not_name_torch_does_not_make_it_absent():
    text = cli("explain", LOGS / "seed_a.log", "-v").stdout
    assert "torch is not installed" not in text
    assert "declared without a pin at" not in text
    assert "(from the log, line 9: no version)" in text


def test_a_feature_not_in_use_is_not_called_a_version_mismatch():
    args = ["--pin", "transformers==4.51.0", "--feature", "flash_attention_2"]
    text = cli("explain", LOGS / "seed_a.log", *args).stdout
    assert "your versions do not" not in text
    assert "symptom matches, but attention_mask_4d not in use" in text


def test_one_line_is_one_line(tmp_path: Path):
    log = tmp_path / "one.log"
    log.write_text("RuntimeError: something unrelated\n")
    assert "(34 bytes, 1 line;" in cli("explain", log).stdout


def test_a_url_given_to_r_is_refused_as_a_url():
    result = cli("check", "-r", "https://example.com/requirements.txt")
    assert result.exit_code == 2
    assert "-r https://example.com/requirements.txt: URLs are not supported: download the file first" in (
        result.stderr
    )


def test_an_unknown_image_tag_lists_the_tags_known():
    result = cli("check", "--image", "nvcr.io/nvidia/pytorch:25.06-py3")
    assert result.exit_code == 2
    assert re.search(r"the release facts know: (\d\d\.\d\d-py3, )+25\.12-py3", result.stderr)


def test_rules_show_guesses_and_takes_an_issue():
    typo = cli("rules", "show", "cuda-driver-too-old-for-tourch")
    assert typo.exit_code == 2 and "did you mean cuda-driver-too-old-for-torch?" in typo.stderr
    for name in ("pytorch/pytorch#133254", "https://github.com/pytorch/pytorch/issues/133254"):
        assert cli("rules", "show", name).stdout.startswith("flex-attention-shared-memory-limit [error")


def test_rules_show_says_conditions_in_words():
    text = cli("rules", "show", "flex-attention-shared-memory-limit").stdout
    assert "GPU compute capability: >=8.6 and <13.0, except 8.7, 9.0, 10.0" in text
    assert "torch built for CUDA: any version" in text
    assert not re.search(r"^  cuda\s*$", text, re.M)


def test_command_help_is_not_cut():
    commands = cli("--help").stdout.split("Commands:", 1)[1]
    assert "..." not in commands and "…" not in commands
    assert "Check this machine, or a target, against known-bad stacks." in commands


def test_report_names_the_gpu_once():
    # a CUDA torch, so that a compute-capability rule applies and its reason names the GPU too
    text = cli("report", "--no-scan", "--gpu", "sm_90", "--pin", "torch==2.11.0+cu130").stdout
    assert "sm_90 (sm_90" not in text and "- GPU 0: sm_90\n" in text
    assert "yes: sm_90 is in compute capability ==9.0" in text


def test_a_gpu_given_as_its_architecture_is_named_once_in_the_reasons():
    """``--gpu sm_120``: the reasons said "sm_120 (sm_120) is in ..." and "not sm_120 (sm_120)"."""
    text = cli("check", "--no-scan", "-v", "--gpu", "sm_120", "--pin", "torch==2.7.1+cu126").stdout
    words = " ".join(text.split())
    assert "sm_120 (sm_120" not in words
    assert "yes sm_120 is in compute capability >=10.0" in words
    assert "has code for sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90, not sm_120 " in words


@pytest.mark.parametrize("torch", ["2.7.1+cu128", "2.9.1+cu130"])
def test_a_cuda_torch_on_an_amd_gpu_is_flagged(torch: str):
    def verdict(*args: str) -> str:
        report = json.loads(cli("check", "--no-scan", "--format", "json", *args).stdout)
        return {f["id"]: f["verdict"] for f in report["findings"]}["torch-cuda-build-on-amd-gpu"]

    assert verdict("--pin", f"torch=={torch}", "--gpu", "MI300X") == "affected"
    assert verdict("--pin", f"torch=={torch}", "--gpu", "H100") == "not-affected"
    assert verdict("--pin", "torch==2.7.1+rocm6.3", "--gpu", "MI300X") == "not-affected"


def test_a_cpu_torch_with_flash_attn_on_a_gpu_target_is_flagged(tmp_path: Path, site):
    """Issue 36: torch==2.5.1+cpu and flash-attn, --gpu H100, --feature flash_attention_2 gave 0
    affected, though `wheel` knew torch was a CPU build."""

    def verdict(*args: str | Path) -> str:
        report = json.loads(cli("check", "--no-scan", "--format", "json", *args).stdout)
        return {f["id"]: f["verdict"] for f in report["findings"]}["torch-cpu-build-with-flash-attn-on-gpu"]

    cpu = pin_file(tmp_path, "torch==2.5.1+cpu", "flash-attn")  # flash-attn at any version
    assert verdict("-r", cpu, "--gpu", "H100", "--feature", "flash_attention_2") == "affected"
    assert verdict("-r", cpu, "--gpu", "H100") == "affected"  # a build that cannot install needs no feature
    assert verdict("-r", cpu, "--gpu", "MI300X") == "not-affected"  # the rule is about NVIDIA GPUs
    assert verdict("-r", cpu) == "unknown"  # which GPU: a requirements file does not say
    # the build read from an installed torch's version.py (cuda = None), not from a label
    site.install("torch", "2.5.1", torch_cuda=None)
    site.install("flash-attn", "2.7.4.post1")
    assert verdict("--path", site.path, "--gpu", "H100") == "affected"
    assert verdict("--path", site.path, "--gpu", "H100", "--pin", "torch==2.5.1+cu124") == "not-affected"


def test_sarif_points_at_each_place_once(tmp_path: Path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text(
        'model = load("google/gemma-2-9b", attn_implementation="flash_attention_2")\n'
    )
    sarif = json.loads(
        cli(
            "check",
            "--project",
            project,
            "--pin",
            "transformers==4.44.0",
            "--gpu",
            "H100",
            "--format",
            "sarif",
        ).stdout
    )
    for result in sarif["runs"][0]["results"]:
        places = [
            (r["physicalLocation"]["artifactLocation"]["uri"], r["physicalLocation"]["region"]["startLine"])
            for r in result.get("relatedLocations", [])
        ]
        assert len(places) == len(set(places)), result["ruleId"]
        assert "\n" not in result["message"]["text"]
