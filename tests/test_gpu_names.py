"""GPU names as facts: gpu_names.json and the lookups in attn_doctor.facts.gpus."""

from __future__ import annotations

import json
import re
import time

import pytest

from attn_doctor.facts import gpus

DATA = json.loads(gpus._DATA_FILE.read_text(encoding="utf-8"))


def nvidia_rows() -> list[tuple[str, str]]:
    rows = [(name, cc) for group in DATA["nvidia"].values() for cc, names in group.items() for name in names]
    return rows + [(variant["name"], variant["capability"]) for variant in DATA["nvidia_variants"]]


def amd_rows() -> list[tuple[str, str]]:
    return [(name, gfx) for gfx, names in DATA["amd"].items() for name in names]


# ---------------------------------------------------------------- the data file


def test_every_capability_is_one_nvidia_shipped():
    assert {cc for _, cc in nvidia_rows()} <= set(gpus.CAPABILITIES)


def test_amd_targets_are_well_formed():
    assert all(re.fullmatch(r"gfx[0-9]{2,4}[0-9a-f]", gfx) for _, gfx in amd_rows())


def test_sources_are_named():
    sources = json.dumps(DATA["sources"])
    for url in (
        "https://developer.nvidia.com/cuda-gpus",
        "https://developer.nvidia.com/cuda-legacy-gpus",
        "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html",
    ):
        assert url in sources
    assert all(variant["evidence"].startswith("https://") for variant in DATA["nvidia_variants"])


def test_every_entry_looks_itself_up():
    assert all(gpus.capability_from_name(name) == cc for name, cc in nvidia_rows())
    assert all(gpus.gfx_from_name(name) == gfx for name, gfx in amd_rows())


def test_no_two_names_share_a_key_with_different_answers():
    seen: dict[tuple[str, ...], tuple[str, str]] = {}
    for vendor, name, value in gpus._rows():
        for key in gpus._keys(name, vendor):
            assert seen.setdefault(key, (vendor, value)) == (vendor, value), (name, key)


def test_unverified_names_are_not_looked_up():
    assert gpus.capability_from_name("NVIDIA A800-SXM4-80GB") is None
    assert gpus.capability_from_name("NVIDIA B100") is None


def test_known_gpus_is_built_on_demand():
    assert gpus.KNOWN_GPUS["NVIDIA H100"] == "9.0"
    assert "KNOWN_GPUS" not in vars(gpus)
    with pytest.raises(AttributeError):
        gpus.NO_SUCH_THING  # noqa: B018


# ---------------------------------------------------------------- names as people write them


@pytest.mark.parametrize(
    ("name", "capability"),
    [
        # https://github.com/pytorch/pytorch/issues/45028 (nvidia-smi and torch, driver 450)
        ("A100-SXM4-40GB", "8.0"),
        # https://github.com/sp-uhh/sgmse/issues/17
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        # https://github.com/PrateekMunjal/TorchAL/issues/4
        ("NVIDIA A100-PCIE-40GB", "8.0"),
        # https://github.com/pytorch/pytorch/issues/90761
        ("NVIDIA H100 PCIe", "9.0"),
        # https://github.com/huggingface/text-generation-inference/issues/533 (nvidia-smi truncation)
        ("Tesla V100-SXM2...", "7.0"),
        # https://github.com/bigcode-project/starcoder/issues/79
        ("Tesla V100-PCIE...", "7.0"),
        # https://github.com/ollama/ollama/issues/12770
        ("Tesla T4", "7.5"),
        # https://github.com/georgia-tech-db/evadb/issues/471
        ("NVIDIA A40", "8.6"),
        # https://github.com/nerfstudio-project/nerfacc/issues/80
        ("RTX A6000", "8.6"),
        # https://github.com/voice-cloning-app/Voice-Cloning-App/issues/60
        ("NVIDIA RTX A6000", "8.6"),
        # https://github.com/deepseek-ai/FlashMLA/issues/34
        ("A6000", "8.6"),
        # https://github.com/BindsNET/bindsnet/issues/468
        ("GeForce RTX 3080", "8.6"),
        # https://github.com/moyix/fauxpilot/wiki/GPU-Support-Matrix
        ("NVIDIA RTX 3080Ti", "8.6"),
        ("NVIDIA RTX 3070Ti", "8.6"),
        # https://qiita.com/araroux/items/e07e817cdf020bbd84a1
        ("NVIDIA Tesla A100", "8.0"),
        ("NVIDIA Tesla V100", "7.0"),
        # https://github.com/lmoe/wyoming-xtts/issues/1
        ("NVIDIA GeForce RTX 5060 Ti", "12.0"),
        # https://github.com/pytorch/pytorch/issues/150733
        ("NVIDIA GeForce RTX 5090 D", "12.0"),
        # https://github.com/MRzzm/DINet/issues/128
        ("NVIDIA GeForce RTX 4090 D", "8.9"),
        # https://github.com/drinkingcoder/FlowFormer-Official/issues/49
        ("NVIDIA L20", "8.9"),
        # https://github.com/thu-ml/SageAttention/issues/260
        ("NVIDIA H20", "9.0"),
        # https://github.com/liguodongiot/llm-action/blob/main/docs/llm-base/h800-env-install.md
        ("NVIDIA H800", "9.0"),
        # https://github.com/modal-labs/modal-client/pull/141, https://github.com/pytorch/test-infra/pull/769
        ("A10G", "8.6"),
        ("NVIDIA A10G", "8.6"),
        # https://github.com/AlexeyAB/darknet/issues/3334 (deviceQuery: 5.2)
        ("GeForce GTX 970", "5.2"),
        # https://github.com/peterjc123/pytorch-scripts/issues/13 (torch: 5.0)
        ("GeForce GTX 960M", "5.0"),
        # https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/3003 (torch: 3.5)
        ("NVIDIA GTX TITAN Black", "3.5"),
        # https://github.com/geerlingguy/raspberry-pi-pcie-devices/issues/504, krrishnarraj/clpeak#106
        ("NVIDIA GeForce RTX 4090", "8.9"),
        # https://github.com/easydiffusion/torchruntime/issues/24 (lspci)
        ("H200 SXM 141GB", "9.0"),
        # spellings from NVIDIA's own tables and nvidia-smi (https://developer.nvidia.com/cuda-gpus)
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("H100 NVL", "9.0"),
        ("NVIDIA H100 NVL", "9.0"),
        ("GH200 480GB", "9.0"),
        ("NVIDIA A100 80GB PCIe", "8.0"),
        ("L40S", "8.9"),
        ("RTX 4090 Laptop GPU", "8.9"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "8.9"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("NVIDIA RTX 4000 SFF Ada Generation", "8.9"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"),
        ("RTX PRO 6000", "12.0"),
        ("NVIDIA GB10", "12.1"),
        ("DGX Spark", "12.1"),
        ("NVIDIA B200", "10.0"),
        ("NVIDIA GB300", "10.3"),
        ("Jetson AGX Orin", "8.7"),
        ("Jetson Orin Nano", "8.7"),
        ("Jetson Nano", "5.3"),
        ("Jetson Xavier NX", "7.2"),
        ("Jetson TX2", "6.2"),
        ("Jetson T5000", "11.0"),
        ("rtx4090", "8.9"),
        ("nvidia geforce rtx 5070ti", "12.0"),
    ],
)
def test_real_spellings(name, capability):
    assert gpus.capability_from_name(name) == capability


@pytest.mark.parametrize(
    ("name", "gfx"),
    [
        # https://github.com/ROCm/legacy-rocm-build/issues/4414 (rocminfo)
        ("AMD Instinct MI300X", "gfx942"),
        # https://github.com/ROCm/rocm_smi_lib/issues/160 (rocminfo)
        ("AMD Instinct MI250X/MI250", "gfx90a"),
        # https://github.com/easybuilders/easybuild-framework/pull/3978 (rocm-smi --showproductname)
        ("Arcturus GL-XL [AMD Instinct MI100]", "gfx908"),
        # https://github.com/ROCm/rocm-systems/pull/2987 (amd-smi static)
        ("AMD Instinct MI350X", "gfx950"),
        # names from https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html
        ("MI300A", "gfx942"),
        ("Instinct MI325X", "gfx942"),
        ("MI355X", "gfx950"),
        ("MI210", "gfx90a"),
        ("MI50", "gfx906"),
        ("MI60", "gfx906"),
        ("AMD Radeon RX 7900 XTX", "gfx1100"),
        ("Radeon RX 7900 XT", "gfx1100"),
        ("RX 7900 GRE", "gfx1100"),
        ("7900 XTX", "gfx1100"),
        ("Radeon RX 7800 XT", "gfx1101"),
        ("RX 7700 XT", "gfx1101"),
        ("RX 7600", "gfx1102"),
        ("AMD Radeon RX 9070 XT", "gfx1201"),
        ("RX 9060 XT", "gfx1200"),
        ("AMD Radeon PRO W7900", "gfx1100"),
        ("Radeon Pro W7800 48GB", "gfx1100"),
        ("W7700", "gfx1101"),
        ("Radeon AI PRO R9700", "gfx1201"),
        ("Radeon RX 6900 XT", "gfx1030"),
        ("Radeon RX 6700 XT", "gfx1031"),
        ("Radeon RX 6600", "gfx1032"),
        ("Radeon VII", "gfx906"),
        ("gfx90a", "gfx90a"),
        ("GFX1100", "gfx1100"),
    ],
)
def test_amd_spellings(name, gfx):
    assert gpus.gfx_from_name(name) == gfx


def test_amd_and_nvidia_do_not_answer_for_each_other():
    assert gpus.capability_from_name("AMD Instinct MI300X") is None
    assert gpus.gfx_from_name("NVIDIA H100") is None


# ---------------------------------------------------------------- neighbours


@pytest.mark.parametrize(
    ("name", "capability"),
    [
        ("H100", "9.0"),
        ("H10", None),
        ("H200", "9.0"),
        ("H20", "9.0"),
        ("A100", "8.0"),
        ("A10", "8.6"),
        ("A10G", "8.6"),
        ("A1000", None),
        ("A2", "8.6"),
        ("A2000", "8.6"),  # RTX A2000, written without "RTX" as with A6000
        ("RTX A2000", "8.6"),
        ("RTX 6000", "7.5"),  # Quadro RTX 6000, Turing
        ("Quadro RTX 6000", "7.5"),
        ("RTX 6000 Ada", "8.9"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
        ("RTX 5000", "7.5"),
        ("RTX 5000 Ada", "8.9"),
        ("RTX PRO 5000 Blackwell", "12.0"),
        ("T4", "7.5"),
        ("T400", "7.5"),
        ("T4000", "11.0"),  # Jetson T4000 (Thor); no other T4000 is in the table
        ("Jetson T4000", "11.0"),
        ("L4", "8.9"),
        ("L40", "8.9"),
        ("L40S", "8.9"),
        ("L20", "8.9"),
        ("B200", "10.0"),
        ("GB200", "10.0"),
        ("B300", "10.3"),
        ("GB300", "10.3"),
        ("NVIDIA TITAN X", "6.1"),  # Pascal
        ("GeForce GTX TITAN X", "5.2"),  # Maxwell
        ("GTX 1080", "6.1"),
        ("GTX 1080 Ti", "6.1"),
        ("GTX 1650", None),  # only the 1650 Ti is in the table
        ("GTX 1650 Ti", "7.5"),
        ("P4", "6.1"),
        ("P40", "6.1"),
        ("P400", "6.1"),
        ("Orin Nano", "8.7"),
        ("Jetson Nano", "5.3"),
        ("warp-drive", None),
        ("", None),
    ],
)
def test_neighbours_are_not_confused(name, capability):
    assert gpus.capability_from_name(name) == capability


@pytest.mark.parametrize(
    ("name", "gfx"),
    [
        ("MI300X", "gfx942"),
        ("MI300", None),
        ("MI250", "gfx90a"),
        ("MI25", "gfx900"),
        ("RX 7900 XTX", "gfx1100"),
        ("RX 7700", "gfx1101"),
        ("RX 6700", "gfx1031"),
        ("RX 6800", "gfx1030"),
    ],
)
def test_amd_neighbours(name, gfx):
    assert gpus.gfx_from_name(name) == gfx


def test_target_gpu_still_takes_names_and_numbers():
    assert gpus.target_gpu("H100").compute_capability == "9.0"
    assert gpus.target_gpu("NVIDIA GeForce RTX 4090 Laptop GPU").compute_capability == "8.9"
    assert gpus.target_gpu("sm_90a").compute_capability == "9.0"
    with pytest.raises(Exception, match="not a compute capability"):
        gpus.target_gpu("warp-drive")


# ---------------------------------------------------------------- names in log lines


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # https://github.com/dexmal/dexbotic/issues/41 (A800: unverified, so nothing is claimed)
        ("|   0  NVIDIA A800-SXM4-80GB          On  | 00000000:27:00.0 Off |                    0 |", []),
        # https://github.com/pytorch/pytorch/issues/45028
        (
            "|   0  A100-SXM4-40GB      On   | 00000000:04:00.0 Off |                    0 |",
            [("A100-SXM4-40GB", "8.0")],
        ),
        # https://github.com/huggingface/text-generation-inference/issues/533
        (
            "|   0  Tesla V100-SXM2...  Off  | 00000000:00:04.0 Off |                    0 |",
            [("Tesla V100-SXM2", "7.0")],
        ),
        # https://github.com/ollama/ollama/issues/12770
        (
            "|   0  Tesla T4            Off  | 00000000:00:1E.0 Off |",
            [("Tesla T4", "7.5")],
        ),
        # https://github.com/IAHispano/Applio/issues/1006
        (
            "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
            "PyTorch installation.",
            [("NVIDIA GeForce RTX 5090", "12.0")],
        ),
        # https://github.com/pytorch/pytorch/issues/150733
        (
            "If you want to use the NVIDIA GeForce RTX 5090 D GPU with PyTorch, please check the "
            "instructions at https://pytorch.org/get-started/locally/",
            [("NVIDIA GeForce RTX 5090 D", "12.0")],
        ),
        # https://github.com/pytorch/pytorch/issues/110153
        ("GPU models and configuration: GPU 0: NVIDIA H100 PCIe", [("NVIDIA H100 PCIe", "9.0")]),
        # https://github.com/thu-ml/SageAttention/issues/260
        ("Device name: NVIDIA H20", [("NVIDIA H20", "9.0")]),
        # https://github.com/drinkingcoder/FlowFormer-Official/issues/49
        (
            "NVIDIA L20 with CUDA capability sm_89 is not compatible with the current PyTorch installation.",
            [("NVIDIA L20", "8.9")],
        ),
        # https://github.com/tensorflow/tensorflow/issues/62170
        (
            "physical GPU (device: 0, name: Tesla T4, pci bus id: 0000:00:07.0, compute capability: 7.5)",
            [("Tesla T4", "7.5")],
        ),
        # https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/3003
        (
            "Found GPU0 NVIDIA GTX TITAN Black which is of cuda capability 3.5.",
            [("NVIDIA GTX TITAN Black", "3.5")],
        ),
        # https://github.com/peterjc123/pytorch-scripts/issues/13
        ("    Found GPU0 GeForce GTX 960M which is of cuda capability 5.0.", [("GeForce GTX 960M", "5.0")]),
        # https://github.com/alievk/avatarify-python/issues/58 (GTX 660 Ti is not in the stored table)
        ("    Found GPU0 GeForce GTX 660 Ti which is of cuda capability 3.0.", []),
        # https://github.com/ROCm/pytorch/issues/627 (Polaris: not in AMD's table)
        (
            "    Found GPU0 Ellesmere [Radeon RX 470/480/570/570X/580/580X] which is of cuda capability 3.0.",
            [],
        ),
        # https://github.com/ROCm/legacy-rocm-build/issues/4414 (rocminfo)
        ("  Name:                    gfx942                             ", [("gfx942", "gfx942")]),
        (
            "  Marketing Name:          AMD Instinct MI300X                ",
            [("AMD Instinct MI300X", "gfx942")],
        ),
        # https://github.com/ROCm/rocm_smi_lib/issues/160 (rocminfo)
        (
            "  Marketing Name:          AMD Instinct MI250X/MI250",
            [("AMD Instinct MI250X", "gfx90a"), ("MI250", "gfx90a")],
        ),
        # https://github.com/easybuilders/easybuild-framework/pull/3978 (rocm-smi --showproductname --csv)
        (
            "card0,Arcturus GL-XL [AMD Instinct MI100],0x0c34,Advanced Micro Devices Inc. [AMD/ATI],D34316",
            [("AMD Instinct MI100", "gfx908")],
        ),
        # https://github.com/ROCm/rocm-systems/pull/2987 (amd-smi static)
        ("        TARGET_GRAPHICS_VERSION: gfx950", [("gfx950", "gfx950")]),
        ("        MARKET_NAME: AMD Instinct MI350X", [("AMD Instinct MI350X", "gfx950")]),
        # https://github.com/ROCm/legacy-rocm-build/issues/4825
        (
            "This is verified when I run `rocminfo` on MI300A (this returns `Name: gfx942`).",
            [
                ("MI300A", "gfx942"),
                ("gfx942", "gfx942"),
            ],
        ),
        # https://github.com/Open-UAV/openuav-turbovnc/issues/26: a bare "T4" in prose is not claimed
        ("T4 and K80 have very low frames per second.", []),
    ],
)
def test_gpus_in_real_log_lines(line, expected):
    assert gpus.gpus_in_text(line) == expected


def test_several_gpus_on_one_line():
    line = "GPU 0: NVIDIA A10G, GPU 1: Tesla T4, GPU 2: NVIDIA H100 80GB HBM3"
    assert gpus.gpus_in_text(line) == [
        ("NVIDIA A10G", "8.6"),
        ("Tesla T4", "7.5"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
    ]


def test_long_lines_are_cut_and_fast():
    tail = " NVIDIA H100"
    assert gpus.gpus_in_text("x" * (gpus.MAX_LINE - len(tail)) + tail) == [("NVIDIA H100", "9.0")]
    assert gpus.gpus_in_text("x" * gpus.MAX_LINE + tail) == []
    hostile = "NVIDIA " * 200_000 + "RTX-" * 200_000
    started = time.perf_counter()
    gpus.gpus_in_text(hostile)
    gpus.capability_from_name(hostile)
    assert time.perf_counter() - started < 1.0


# ---------------------------------------------------------------- AMD GPUs as facts rules target


@pytest.mark.parametrize(
    "spec, gfx",
    [
        ("MI300X", "gfx942"),
        ("AMD Instinct MI250X", "gfx90a"),
        ("RX 7900 XTX", "gfx1100"),
        ("gfx1030", "gfx1030"),
    ],
)
def test_amd_targets_carry_their_gfx_and_no_compute_capability(spec: str, gfx: str) -> None:
    gpu = gpus.target_gpu(spec)
    assert (gpu.gfx, gpu.compute_capability) == (gfx, None)


def test_a_gfx_rule_decides_on_amd_targets_and_not_on_nvidia_ones(tmp_path) -> None:
    from tests.support import cli, write_rule

    rule = write_rule(
        tmp_path / "rules", "rdna-only", 'packages = { torch = "" }\ngfx = ["gfx1100", "gfx1101"]'
    )
    verdicts = {}
    for target in ("RX 7900 XTX", "MI300X", "H100"):
        result = cli("check", "--rules", rule, "--gpu", target, "--pin", "torch==2.5.1", "--format", "json")
        finding = next(f for f in json.loads(result.stdout)["findings"] if f["id"] == "rdna-only")
        verdicts[target] = finding["verdict"]
    assert verdicts == {"RX 7900 XTX": "affected", "MI300X": "not-affected", "H100": "not-affected"}
    bad = write_rule(tmp_path / "bad", "bad-gfx", 'gfx = ["rdna3"]')
    assert "affects.gfx" in cli("rules", "validate", bad).output


def test_a_log_names_an_amd_gpu_by_product_or_target(tmp_path) -> None:
    """ROCm/flash-attention#93: the CK build refuses an RX 7900 XTX (gfx1100)."""
    from tests.support import cli

    log = tmp_path / "build.log"
    log.write_text(
        "torch 2.5.1+rocm6.2\nflash-attn 2.7.4.post1\n"
        "AssertionError: One of GPU archs of ['gfx1100'] is invalid or not supported by Flash-Attention\n"
    )
    report = json.loads(cli("explain", log, "--format", "json").stdout)
    assert report["environment"]["gpus"][0]["gfx"] == "gfx1100"
    first = report["causes"][0]
    assert (first["id"], first["verdict"]) == ("flash-attn-rocm-ck-gpu-unsupported", "affected")
    mi300 = json.loads(cli("explain", log, "--gpu", "MI300X", "--format", "json").stdout)
    assert cause_verdict(mi300, "flash-attn-rocm-ck-gpu-unsupported") == "not-affected"


def cause_verdict(report: dict, rule_id: str) -> str:
    return next(c["verdict"] for c in report["causes"] if c["id"] == rule_id)
