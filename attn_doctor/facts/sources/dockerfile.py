"""A Dockerfile: the image its stage is built ``FROM`` (facts/images.py), with the versions its
``pip install``, ``uv pip install``, ``python -m pip install`` and ``conda install`` lines pin laid
over the image's. The last stage by default (``--stage`` chooses); a ``FROM`` another stage of the
file follows that stage. ``FROM`` an image whose contents are not known gives only the installed
lines' packages (and, for ``python:3.11-slim``, the Python its tag states).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from attn_doctor.errors import InputError
from attn_doctor.facts import images
from attn_doctor.facts.sources.common import Declared, exact_version, requirement, shown
from attn_doctor.facts.sources.conda_names import add_spec
from attn_doctor.releases.facts import snapshot

_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)(?:\s+AS\s+(?P<stage>\S+))?\s*$", re.I)
_RUN = re.compile(r"^RUN\s+(?P<command>.*)$", re.I)
_INSTALLERS = (
    ("uv", "pip", "install"),
    ("python", "-m", "pip", "install"),
    ("python3", "-m", "pip", "install"),
    ("pip", "install"),
    ("pip3", "install"),
    ("conda", "install"),
    ("mamba", "install"),
)


def recognises(path: Path, text: str) -> bool:
    return path.name in ("Dockerfile", "Containerfile") or path.name.endswith((".Dockerfile", ".dockerfile"))


def read(path: Path, text: str, markers: dict[str, str], stage: str | None = None) -> Declared:
    stages = _stages(path, text)
    if not stages:
        raise InputError(str(path), "no FROM line")
    name = stage if stage is not None else stages[-1][0]
    chosen = next((s for s in stages if s[0] == name), None)
    if chosen is None:
        raise InputError(
            f"--stage {stage}", f"no such stage in {path} (stages: {', '.join(s[0] for s in stages)})"
        )
    return _stage_facts(path, chosen, {s[0]: s for s in stages}, depth=0)


Stage = tuple[str, str, int, list[tuple[int, str]]]  # name, image, FROM line, RUN lines


def _stage_facts(path: Path, stage: Stage, stages: dict[str, Stage], depth: int) -> Declared:
    _, image, line, runs = stage
    declared = Declared()
    for number, command in reversed(runs):  # the last install of a name wins; then the base's
        _installs(path, number, command, declared)
    base = Declared()
    if image in stages and depth < len(stages):
        base = _stage_facts(path, stages[image], stages, depth + 1)
    elif images.is_known_repository(image):
        base = images.image_facts(image, snapshot(), f"{path}:{line} FROM {image}")
    else:
        base = images.python_image_facts(image) or base
    declared.merge(base)  # torch installed over the image's: the image's CUDA goes with its torch
    return declared


def _stages(path: Path, text: str) -> list[Stage]:
    stages: list[Stage] = []
    for number, line in _instructions(text):
        if match := _FROM.match(line):
            stages.append((match["stage"] or str(len(stages)), match["image"], number, []))
        elif (match := _RUN.match(line)) and stages:
            stages[-1][3].append((number, match["command"]))
    return stages


def _instructions(text: str) -> list[tuple[int, str]]:
    """Instructions with their continuation lines joined, each numbered by its first line."""
    joined: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append((start, pending + line))
        pending = ""
    if pending:
        joined.append((start, pending))
    return joined


def _installs(path: Path, number: int, command: str, declared: Declared) -> None:
    origin = f"{path}:{number}"
    for part in reversed(re.split(r"&&|;|\|\|", command[:20_000])):
        try:
            words = shlex.split(part)
        except ValueError:
            declared.problems.append(
                f"{origin}: {shown(part.strip())}: not a shell command this reader reads"
            )
            continue
        for installer in _INSTALLERS:
            if tuple(words[: len(installer)]) == installer:
                arguments = [w for w in words[len(installer) :] if not w.startswith("-")]
                for argument in arguments:
                    if installer[0] in ("conda", "mamba"):
                        add_spec(argument, origin, declared)
                    elif not argument.startswith((".", "/")) and "://" not in argument:
                        req = requirement(argument, origin)
                        declared.add(req.name, exact_version(req), origin)
                break
