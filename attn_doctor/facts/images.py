"""Container images as targets: what ``nvcr.io/nvidia/pytorch:YY.MM-py3`` and the official
``pytorch/pytorch:X.Y.Z-cudaA.B-cudnnN-runtime`` (or ``-devel``) images ship.

NGC images are read from the release-facts snapshot's ``ngc-pytorch-images.json`` (NVIDIA's PyTorch
container release notes, one reference per tag; tools/refresh_release_facts.py writes it). An
official pytorch/pytorch tag states its torch release, CUDA and cuDNN itself; the tag is checked
against the torch releases and CUDA variants the snapshot knows. Any other tag of these two
repositories is an input error naming the tags known.
"""

from __future__ import annotations

import re

from packaging.version import Version

from attn_doctor.errors import InputError
from attn_doctor.facts.sources.common import Declared
from attn_doctor.releases.facts import ReleaseFacts

NGC_REPOSITORY = "nvcr.io/nvidia/pytorch"
OFFICIAL_REPOSITORIES = ("pytorch/pytorch", "docker.io/pytorch/pytorch", "index.docker.io/pytorch/pytorch")
_OFFICIAL_TAG = re.compile(
    r"^(?P<torch>[0-9]+\.[0-9]+\.[0-9]+)-cuda(?P<cuda>[0-9]+\.[0-9]+)-cudnn(?P<cudnn>[0-9]+)-(?:runtime|devel)$"
)
# NGC packages -> the names rules use
_NGC_PACKAGES = {
    "torch": "torch",
    "triton": "triton",
    "transformer_engine": "transformer-engine",
    "flash_attn": "flash-attn",
}


def is_known_repository(reference: str) -> bool:
    repository = reference.rsplit("@", 1)[0].rsplit(":", 1)[0]
    return repository == NGC_REPOSITORY or repository in OFFICIAL_REPOSITORIES


def image_facts(reference: str, facts: ReleaseFacts, source: str) -> Declared:
    """What the image ``reference`` ships; ``source`` names where the user gave it (``--image X``)."""
    repository, _, tag = reference.partition("@")[0].rpartition(":")
    if repository == NGC_REPOSITORY:
        return _ngc(tag, reference, facts, source)
    if repository in OFFICIAL_REPOSITORIES:
        return _official(tag, reference, facts, source)
    raise InputError(
        source, f"not an image whose contents are known ({NGC_REPOSITORY}:YY.MM-py3, pytorch/pytorch:TAG)"
    )


def _ngc(tag: str, reference: str, facts: ReleaseFacts, source: str) -> Declared:
    images = facts.ngc_pytorch_images()
    entry = images.get(tag.removesuffix("-py3"))
    if entry is None or not tag.endswith("-py3"):
        known = ", ".join(f"{name}-py3" for name in sorted(images, key=_month))
        raise InputError(source, f"unknown tag {tag!r} (the release facts know: {known or 'none'})")
    origin = f"image {reference} ({entry['reference']})"
    declared = Declared()
    for key, name in _NGC_PACKAGES.items():
        if entry.get(key):
            declared.add(name, entry[key], origin)
    if entry.get("cuda"):
        declared.torch_cuda = (".".join(str(entry["cuda"]).split(".")[:2]), origin)
    if entry.get("python"):
        declared.python = (str(entry["python"]), origin)
    return declared


def _official(tag: str, reference: str, facts: ReleaseFacts, source: str) -> Declared:
    match = _OFFICIAL_TAG.match(tag)
    variant = f"cu{match['cuda'].replace('.', '')}" if match else ""
    if match is None or variant not in facts.torch_cuda_variant_names(match["torch"]):
        known = facts.torch_releases_with_variants()
        newest = max(known, key=Version, default=None)
        hint = (
            f" (tags are TORCH-cudaX.Y-cudnnN-runtime|devel; newest torch known: {newest})" if newest else ""
        )
        raise InputError(source, f"unknown tag {tag!r}{hint}")
    origin = f"image {reference} (its tag)"
    declared = Declared()
    declared.add("torch", match["torch"], origin)
    declared.torch_cuda = (match["cuda"], origin)
    return declared


def _month(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.split(".") if part.isdigit())
