"""Big inputs give the answers small ones give (issue 36: a lock of 500,000 pins and an env file of
200,000 GPUs must stay linear; benchmarks/big_inputs.py times them). Here, at a modest size: plain
``NAME==VERSION`` pins, read without packaging's requirement parser, read as packaging reads them;
a target with many copies of a GPU gets the findings of one GPU of each kind, and the report
names each kind once, with its count."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, cli

from attn_doctor.facts.sources import requirements
from attn_doctor.facts.sources.common import Declared, applies, exact_version, requirement

FLASH_ATTN_H100 = REPO / "tests" / "fixtures" / "healthy" / "flash-attn-current.json"
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "580.159.04"}
T4 = {"name": "Tesla T4", "compute_capability": "7.5", "driver": "580.159.04"}

names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,20}", fullmatch=True)
numbers = st.integers(min_value=0, max_value=10**6).map(str)
versions = st.builds(
    lambda release, pre, post, dev, local: ".".join(release) + pre + post + dev + local,
    st.lists(numbers, min_size=1, max_size=4),
    st.sampled_from(["", "a1", "b2", "rc3", "RC1", "c1", "alpha1"]),
    st.sampled_from(["", ".post1", "-1", "post2"]),
    st.sampled_from(["", ".dev0", "dev3"]),
    st.sampled_from(["", "+cu121", "+cpu.abc", "+Local"]),
)
pin_lines = st.builds(
    lambda name, spaces, operator, version, tail: f"{name}{spaces}{operator}{spaces}{version}{tail}",
    names,
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["==", "==", "==", "===", ">=", "~="]),
    versions,
    st.sampled_from(["", "", "", " ; python_version >= '3'", ".*", " --hash=sha256:00"]),
)


def read_by_packaging(path: Path, lines: list[str], markers: dict[str, str]) -> Declared:
    """What the reader did with every line before the plain-pin path: packaging's parser."""
    declared = Declared()
    for number, line in enumerate(lines, start=1):
        origin = f"{path}:{number}"
        req = requirement(line.split(" --", 1)[0], origin)
        if applies(str(req.marker) if req.marker else None, markers, origin):
            declared.add(req.name, exact_version(req), origin)
    return declared


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(pin_lines, min_size=1, max_size=20))
def test_plain_pins_read_as_packaging_reads_them(lines: list[str]) -> None:
    path, markers = Path("requirements.txt"), {"python_version": "3.12"}
    try:
        expected = read_by_packaging(path, lines, markers).packages
    except Exception as packaging_refused:  # noqa: BLE001 - then the reader must refuse it too
        refused = type(packaging_refused).__name__
    else:
        refused = None
    try:
        declared = requirements.read(path, "\n".join(lines), markers)
    except Exception as reader_refused:  # noqa: BLE001
        assert refused is not None, f"the reader refused {lines}: {reader_refused}"
        return
    assert refused is None, f"the reader accepted what packaging refuses ({refused}): {lines}"
    assert declared.packages == expected


def test_a_file_of_many_pins_gives_the_findings_of_its_stack(tmp_path: Path) -> None:
    stack = ["torch==2.5.1", "transformers==4.44.0", "flash-attn==2.6.3"]
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("\n".join(stack) + "\n")
    big.write_text("\n".join([*stack, *(f"pkg{i}=={i % 100}.{i % 7}" for i in range(20_000))]) + "\n")
    reports = {}
    for path in (small, big):
        result = cli("check", "-r", path, "--gpu", "H100", "--no-scan", "--format", "json")
        assert result.exit_code in (0, 1), result.output
        reports[path] = json.loads(result.stdout)
    packages = reports[big]["environment"]["packages"]
    assert len(packages) == len(reports[small]["environment"]["packages"]) + 20_000
    assert packages["pkg12345"]["version"] == "45.4"
    assert packages["pkg12345"]["origin"] == f"{big}:{12345 + 4}"
    assert packages["triton"]["origin"].startswith("implied by torch 2.5.1")
    assert [(f["id"], f["verdict"]) for f in reports[big]["findings"]] == [
        (f["id"], f["verdict"]) for f in reports[small]["findings"]
    ]


def env_file(folder: Path, name: str, gpus: list[dict[str, str]]) -> Path:
    document = json.loads(FLASH_ATTN_H100.read_text())
    document["gpus"] = gpus
    path = folder / name
    path.write_text(json.dumps(document))
    return path


def test_many_copies_of_each_gpu_answer_as_one_of_each(tmp_path: Path) -> None:
    findings = []
    for gpus in ([H100, T4], [H100] * 1500 + [T4] * 500):  # one file name: reasons quote it
        path = env_file(tmp_path, "env.json", gpus)
        result = cli("check", "--env-file", path, "--feature", "flash_attention_2", "--format", "json")
        report = json.loads(result.stdout)
        findings.append([(f["id"], f["verdict"], f["reasons"]) for f in report["findings"]])
    assert findings[1] == findings[0]
    assert ("flash-attn-pre-ampere-gpu", "affected") in [(i, v) for i, v, _ in findings[1]]


def test_the_report_names_each_kind_of_gpu_once_with_its_count(tmp_path: Path) -> None:
    many = env_file(tmp_path, "many.json", [H100] * 1500 + [T4] * 500)
    text = cli("check", "--env-file", many, "-v").stdout
    assert "NVIDIA H100 80GB HBM3 (sm_90) x1500, Tesla T4 (sm_75) x500" in " ".join(text.split())
    facts = [
        line.split(None, 1)[1] for line in text.splitlines() if line.startswith("  gpu ") and " cc=" in line
    ]
    assert facts == [
        "NVIDIA H100 80GB HBM3 cc=9.0 driver=580.159.04 x1500",
        "Tesla T4 cc=7.5 driver=580.159.04 x500",
    ]
    kinds = [{**H100, "name": f"NVIDIA H100 80GB HBM3 #{i}"} for i in range(4)]
    area = " ".join(cli("check", "--env-file", env_file(tmp_path, "four.json", kinds)).stdout.split())
    assert "NVIDIA H100 80GB HBM3 #0 (sm_90), NVIDIA H100 80GB HBM3 #1 (sm_90) and 2 other kinds" in area
