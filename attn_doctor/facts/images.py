"""Container images as targets: what ``nvcr.io/nvidia/pytorch:YY.MM-py3`` and the official
``pytorch/pytorch:X.Y.Z-cudaA.B-cudnnN-runtime`` (or ``-devel``) images ship.

NGC images are read from the release-facts snapshot's ``ngc-pytorch-images.json``: per tag, each
fact with the page that states it (NVIDIA's PyTorch release notes where their words could be
read, else a public file built on the tag; tools/refresh_release_facts.py writes it). An official
pytorch/pytorch tag states its torch release, CUDA and cuDNN itself; the tag is checked against
the torch releases and CUDA variants the snapshot knows. Any other tag of these two repositories
is an input error naming the tags known.

An image's record names only some of what the image holds: a fact it does not state (Python,
triton, transformer-engine) is unknown, never the runner's, and its package list is open.

Images that ship no Python packages of the stack are known too: ``nvidia/cuda:X.Y.Z-...-devel-...``
states its CUDA toolkit (nvcc) in the tag (NVIDIA's ``devel`` images hold the toolkit; ``base`` and
``runtime`` do not, and state nothing about it), ``python:X.Y`` its Python, ``ubuntu``/``debian``
nothing; their package lists are closed (what the Dockerfile installs is all there is). Any other
image (``FROM ghcr.io/org/img:tag``) is one whose contents are not known: ``base_image_facts``
answers None, and the Dockerfile reader leaves what it may ship unknown.
"""

from __future__ import annotations

import re

from packaging.version import Version

from attn_doctor.errors import InputError
from attn_doctor.facts.model import OPEN_IMAGE_PACKAGE_LIST
from attn_doctor.facts.sources.common import Declared
from attn_doctor.releases.facts import ReleaseFacts

NGC_REPOSITORY = "nvcr.io/nvidia/pytorch"
OFFICIAL_REPOSITORIES = ("pytorch/pytorch", "docker.io/pytorch/pytorch", "index.docker.io/pytorch/pytorch")
PYTHON_REPOSITORIES = ("python", "library/python", "docker.io/library/python", "docker.io/python")
CUDA_REPOSITORIES = ("nvidia/cuda", "docker.io/nvidia/cuda", "nvcr.io/nvidia/cuda")
# operating-system images: no Python package of the stack in them
OS_REPOSITORIES = tuple(
    f"{prefix}{name}" for name in ("ubuntu", "debian") for prefix in ("", "library/", "docker.io/library/")
)
# 12.8.1-cudnn-devel-ubuntu22.04, 12.4.1-cudnn9-runtime-ubuntu22.04, 12.9.1-devel-ubuntu22.04
_CUDA_TAG = re.compile(
    r"^(?P<cuda>[0-9]{1,2}\.[0-9]{1,2})(?:\.[0-9]{1,3})?-(?:cudnn[0-9]*-)?(?P<flavour>base|runtime|devel)-"
)
_OFFICIAL_TAG = re.compile(
    r"^(?P<torch>[0-9]+\.[0-9]+\.[0-9]+)-cuda(?P<cuda>[0-9]+\.[0-9]+)-cudnn(?P<cudnn>[0-9]+)-(?:runtime|devel)$"
)
_PYTHON_TAG = re.compile(r"^(?P<python>3\.[0-9]{1,2}(?:\.[0-9]{1,2})?)(?:-.*)?$")  # 3.11-slim, 3.12.4
# NGC record facts -> the names rules use
_NGC_PACKAGES = {
    "torch": "torch",
    "triton": "triton",
    "transformer_engine": "transformer-engine",
    "flash_attn": "flash-attn",
}


def is_known_repository(reference: str) -> bool:
    repository, _ = _repository_and_tag(reference)
    return repository == NGC_REPOSITORY or repository in OFFICIAL_REPOSITORIES


def _repository_and_tag(reference: str) -> tuple[str, str]:
    """``nvcr.io/nvidia/pytorch:25.01-py3@sha256:...`` -> its repository and tag (Docker's
    ``latest`` where none is given; ``localhost:5000/x`` is a registry's port, not a tag)."""
    name = reference.partition("@")[0]
    repository, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:
        return name, "latest"
    return repository, tag


def image_facts(reference: str, facts: ReleaseFacts, source: str) -> Declared:
    """What the image ``reference`` ships; ``source`` names where the user gave it (``--image X``)."""
    repository, tag = _repository_and_tag(reference)
    if repository == NGC_REPOSITORY:
        return _ngc(tag, reference, facts, source)
    if repository in OFFICIAL_REPOSITORIES:
        return _official(tag, reference, facts, source)
    if repository in CUDA_REPOSITORIES:
        cuda = cuda_image_facts(reference)
        if cuda is None:
            raise InputError(source, f"unknown tag {tag!r} (tags are X.Y.Z[-cudnnN]-base|runtime|devel-OS)")
        return cuda
    raise InputError(
        source,
        f"not an image whose contents are known ({NGC_REPOSITORY}:YY.MM-py3, pytorch/pytorch:TAG,"
        " nvidia/cuda:TAG)",
    )


def _ngc(tag: str, reference: str, facts: ReleaseFacts, source: str) -> Declared:
    images = facts.ngc_pytorch_images()
    entry = images.get(tag.removesuffix("-py3"))
    if entry is None or not tag.endswith("-py3"):
        known = ", ".join(f"{name}-py3" for name in sorted(images, key=_month))
        raise InputError(source, f"unknown tag {tag!r} (the release facts know: {known or 'none'})")
    declared = Declared(open_package_list=OPEN_IMAGE_PACKAGE_LIST)
    for key, name in _NGC_PACKAGES.items():
        if key in entry:
            declared.add(name, entry[key]["value"], _origin(reference, entry[key]))
    if "cuda" in entry:
        cuda = ".".join(str(entry["cuda"]["value"]).split(".")[:2])
        declared.torch_cuda = (cuda, _origin(reference, entry["cuda"]))
    if "python" in entry:
        declared.python = (str(entry["python"]["value"]), _origin(reference, entry["python"]))
    return declared


def _origin(reference: str, fact: dict[str, str]) -> str:
    """Where one fact of an image's record comes from: its page, and the copy read where it was."""
    quoted = f", as quoted in {fact['via']}" if "via" in fact else ""
    return f"image {reference} ({fact['source']}{quoted})"


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
    declared = Declared(open_package_list=OPEN_IMAGE_PACKAGE_LIST)
    declared.add("torch", match["torch"], origin)
    declared.torch_cuda = (match["cuda"], origin)
    return declared


def base_image_facts(reference: str, facts: ReleaseFacts, source: str) -> Declared | None:
    """What a Dockerfile's ``FROM`` image ships: an NGC or official PyTorch image's record (an unknown
    tag of theirs is an InputError, as for ``--image``), a CUDA, Python or OS image's tag; None for
    an image whose contents are not known."""
    repository, tag = _repository_and_tag(reference)
    if repository == NGC_REPOSITORY or repository in OFFICIAL_REPOSITORIES:
        return image_facts(reference, facts, source)
    if repository in CUDA_REPOSITORIES:
        return cuda_image_facts(reference)
    if repository in PYTHON_REPOSITORIES:
        return python_image_facts(reference)
    if repository in OS_REPOSITORIES:
        return Declared()
    return None


def cuda_image_facts(reference: str) -> Declared | None:
    """``nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04``: no Python packages; a ``devel`` image's CUDA
    toolkit (nvcc) is the tag's CUDA release. None for a tag of another shape."""
    match = _CUDA_TAG.match(_repository_and_tag(reference)[1])
    if match is None:
        return None
    declared = Declared()
    if match["flavour"] == "devel":
        declared.nvcc = (match["cuda"], f"image {reference} (its tag: a devel image holds the CUDA toolkit)")
    return declared


def python_image_facts(reference: str) -> Declared | None:
    """A ``python:3.11-slim`` image: the Python its tag states (None for another image or tag)."""
    repository, tag = _repository_and_tag(reference)
    match = _PYTHON_TAG.match(tag) if repository in PYTHON_REPOSITORIES else None
    if match is None:
        return None
    declared = Declared()
    declared.python = (match["python"], f"image {reference} (its tag)")
    return declared


def _month(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.split(".") if part.isdigit())
