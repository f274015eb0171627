"""flash-attn's prebuilt wheel names, computed from each tag's setup.py scheme, against names of
real release assets (issue 27, item 3). The recorded names are asset URLs quoted verbatim in public
install scripts and READMEs (GitHub code search), each downloaded from
github.com/Dao-AILab/flash-attention/releases/download/v{version}/."""

from __future__ import annotations

import pytest

from attn_doctor.releases.wheel_names import flash_attn_wheel
from tools.flash_attn_wheel_names import scheme

RELEASES = "https://github.com/Dao-AILab/flash-attention/releases/download"


@pytest.mark.parametrize(
    ("version", "torch", "cuda", "recorded"),
    [
        ("2.5.8", "2.3", "11.8", "flash_attn-2.5.8+cu118torch2.3cxx11abiFALSE"),
        ("2.6.3", "2.4", "12.4", "flash_attn-2.6.3+cu123torch2.4cxx11abiFALSE"),
        ("2.7.0.post2", "2.5", "12.4", "flash_attn-2.7.0.post2+cu12torch2.5cxx11abiFALSE"),
        ("2.7.1.post1", "2.6", "12.4", "flash_attn-2.7.1.post1+cu12torch2.6cxx11abiFALSE"),
        ("2.7.2.post1", "2.5", "12.1", "flash_attn-2.7.2.post1+cu12torch2.5cxx11abiFALSE"),
        ("2.7.4.post1", "2.4", "12.4", "flash_attn-2.7.4.post1+cu12torch2.4cxx11abiFALSE"),
        ("2.7.4.post1", "2.5", "12.4", "flash_attn-2.7.4.post1+cu12torch2.5cxx11abiFALSE"),
        ("2.7.4.post1", "2.6", "12.6", "flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE"),
        ("2.8.3", "2.5", "12.4", "flash_attn-2.8.3+cu12torch2.5cxx11abiFALSE"),
    ],
)  # fmt: skip
def test_computed_names_are_the_recorded_release_assets(version: str, torch: str, cuda: str, recorded: str):
    recorded += "-cp311-cp311-linux_x86_64.whl"  # every recorded name is for Python 3.11, Linux x86_64
    wheel = flash_attn_wheel(version, torch, cuda, "3.11", cxx11_abi=False)
    assert wheel is not None
    assert wheel.name == recorded
    assert wheel.url == f"{RELEASES}/v{version}/{recorded}"


def test_the_cuda_part_follows_each_tags_scheme():
    """v2.2: torch's own CUDA; v2.3: 12.x forced to 12.2; v2.6.3: 12.3; v2.7 on: the major only."""
    assert "+cu121torch2.1" in flash_attn_wheel("2.2.0", "2.1", "12.1", "3.10", False).name  # type: ignore[union-attr]
    assert "+cu122torch2.1" in flash_attn_wheel("2.3.0", "2.1", "12.1", "3.10", False).name  # type: ignore[union-attr]
    assert "+cu123torch2.4" in flash_attn_wheel("2.6.3", "2.4", "12.1", "3.10", False).name  # type: ignore[union-attr]
    assert "+cu13torch2.9" in flash_attn_wheel("2.8.3.post1", "2.9", "13.0", "3.12", True).name  # type: ignore[union-attr]
    assert "cxx11abiTRUE-cp312-cp312" in flash_attn_wheel("2.8.3.post1", "2.9", "13.0", "3.12", True).name  # type: ignore[union-attr]
    assert flash_attn_wheel("9.9.9", "2.6", "12.4", "3.11", False) is None


V2_6_3 = """
BASE_WHEEL_URL = (
    "https://github.com/Dao-AILab/flash-attention/releases/download/{tag_name}/{wheel_name}"
)
        torch_cuda_version = parse(torch.version.cuda)
        torch_cuda_version = parse("11.8") if torch_cuda_version.major == 11 else parse("12.3")
        # cuda_version = f"{cuda_version_raw.major}{cuda_version_raw.minor}"
        cuda_version = f"{torch_cuda_version.major}{torch_cuda_version.minor}"
"""


def test_the_generator_reads_a_tags_setup_py():
    """setup.py of v2.6.3 as the tag holds it (the commented line is not the scheme)."""
    found = scheme(V2_6_3)
    assert found == {
        "cuda": "major_minor",
        "cuda_forced": {"11": "11.8", "12": "12.3"},
        "url": "https://github.com/Dao-AILab/flash-attention/releases/download/{tag_name}/{wheel_name}",
    }
    assert (
        scheme(
            V2_6_3.replace(
                'f"{torch_cuda_version.major}{torch_cuda_version.minor}"', 'f"{torch_cuda_version.major}"'
            )
        )["cuda"]
        == "major"
    )  # type: ignore[index]
    assert scheme("setup(name='flash_attn')") is None
