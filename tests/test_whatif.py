"""What-if inputs build the same facts as probing: requirements files, pip freeze, env files."""

from __future__ import annotations

import json
from pathlib import Path

from support import cli

from attn_doctor.facts.sources import read_declared


def test_requirements_forms(tmp_path: Path):
    (tmp_path / "base.txt").write_text("xformers==0.0.28.post1\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "--index-url https://example.invalid/simple\n"
        "-r base.txt\n"
        "# a comment\n"
        "transformers==4.44.0  # pinned for the Gemma run\n"
        "torch==2.5.1+cu121 \\\n"
        "    --hash=sha256:0000000000000000000000000000000000000000000000000000000000000000\n"
        "flash_attn @ file:///wheels/flash_attn-2.6.3-cp311-cp311-linux_x86_64.whl\n"
        "fla-core\n"
        "triton>=3.1\n"
        'accelerate==0.33.0 ; python_version < "3.0"\n'
        "-e git+https://github.com/Dao-AILab/flash-attention.git#egg=flash_attn_3\n"
    )
    declared = read_declared(requirements, {"python_version": "3.11", "sys_platform": "linux"})
    packages = declared.packages
    assert declared.problems == []  # --index-url says where to install from: nothing to report
    assert packages["xformers"].version == "0.0.28.post1"
    assert packages["transformers"].version == "4.44.0"
    assert packages["transformers"].origin.endswith("requirements.txt:4")
    assert packages["torch"].version == "2.5.1+cu121"
    assert packages["flash-attn"].version == "2.6.3"
    assert packages["flash-linear-attention"].version is None
    assert packages["triton"].version is None
    assert packages["flash-attn-3"].version is None
    assert "accelerate" not in packages  # its marker is false here


def test_pip_freeze_output_drives_the_check(tmp_path: Path, site):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("torch==2.6.0\ntransformers==4.44.0\nflash-attn==2.6.3\n")
    report = json.loads(
        cli("check", "--format", "json", "-r", freeze, "--feature", "flash_attention_2").stdout
    )
    assert report["environment"]["packages"]["transformers"]["origin"].endswith("freeze.txt:2")
    assert {f["id"]: f["verdict"] for f in report["findings"]}["gemma2-fa2-cu-seqlens"] == "affected"


def test_env_file_round_trip(tmp_path: Path, site, fake_nvidia_smi):
    site.install("transformers", "4.44.0")
    site.install("torch", "2.4.0+cu121", torch_cuda="12.1")
    fake_nvidia_smi("NVIDIA A100-SXM4-80GB, 8.0, 535.104.05")
    probed = cli("probe", "--json", "--path", site.path)
    assert probed.exit_code == 0, probed.stderr
    env_file = tmp_path / "node7.json"
    env_file.write_text(probed.stdout)

    local = json.loads(cli("check", "--format", "json", "--path", site.path).stdout)
    remote = json.loads(cli("check", "--format", "json", "--env-file", env_file).stdout)
    assert remote["environment"]["gpus"] == local["environment"]["gpus"]
    assert remote["environment"]["torch_build"] == {"cuda": "12.1", "hip": None}
    assert [(f["id"], f["verdict"]) for f in remote["findings"]] == [
        (f["id"], f["verdict"]) for f in local["findings"]
    ]


def test_pins_override_an_env_file(tmp_path: Path, site):
    site.install("transformers", "4.44.0")
    env_file = tmp_path / "env.json"
    env_file.write_text(cli("probe", "--json", "--path", site.path).stdout)
    report = json.loads(
        cli("check", "--format", "json", "--env-file", env_file, "--pin", "transformers==4.44.1").stdout
    )
    assert report["environment"]["packages"]["transformers"]["version"] == "4.44.1"
    assert {f["id"]: f["verdict"] for f in report["findings"]}["gemma2-fa2-cu-seqlens"] == "not-affected"
