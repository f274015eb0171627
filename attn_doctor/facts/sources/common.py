"""What every pin-file reader shares: the Declared facts it returns, and the small steps of turning
a name, a version and a marker into a Package with its FILE:LINE origin."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import Requirement
from packaging.version import Version

from attn_doctor.errors import InputError
from attn_doctor.facts.model import MAX_VERSION_CHARS, Package, marker_states
from attn_doctor.facts.names import installed_name

# a final, pre-, post- or dev-release, with a local label, in lower case: valid PEP 440 by its shape
# alone, so that the pins of a 500,000-line lock need no packaging Version each; numbers of at most
# 18 digits, so that one packaging refuses (past Python's int-string limit) goes through packaging
# and gets its one-line error
PLAIN_VERSION = (
    r"[0-9]{1,18}(?:\.[0-9]{1,18})*(?:(?:a|b|rc)[0-9]{1,18})?(?:\.post[0-9]{1,18})?(?:\.dev[0-9]{1,18})?"
    r"(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?"
)
_PLAIN_VERSION = re.compile(PLAIN_VERSION)


@dataclass
class Declared:
    """What one pin file (or image) states about the target. Each fact keeps where it came from."""

    packages: dict[str, Package] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # lines it does not understand: reported
    torch_cuda: tuple[str, str] | None = None  # (CUDA version, origin): conda's pytorch-cuda, builds
    python: tuple[str, str] | None = None  # (version, origin): conda's python=3.11
    # origins["packages"] where the list is open (model.OPEN_PACKAGE_LISTS): an image's record, or a
    # Dockerfile's lines, name only some of the packages; one they do not name may be there
    open_package_list: str = ""
    nvcc: tuple[str, str] | None = None  # (CUDA toolkit version, origin): a CUDA devel image's tag
    absent: dict[str, str] = field(default_factory=dict)  # name -> where it was uninstalled
    extras: set[str] = field(default_factory=set)  # the optional extras the file defines (--extra)
    # a package only an extra not asked for installs: whether it is there is not known
    optional: dict[str, str] = field(default_factory=dict)  # name -> "the extra X (FILE:LINE)"
    # per fact ("torch", "torch build", "python"): what lower layers stated and this one replaced
    replaced: dict[str, list[str]] = field(default_factory=dict)

    def add(
        self,
        name: str,
        version: str | None,
        origin: str,
        distribution: str | None = None,
        *,
        plain: bool = False,
        specifier: str | None = None,
        wheel: str | None = None,
        releases: tuple[str, ...] = (),
    ) -> None:
        """A package; the first statement of a name wins (a lock lists each once per resolution).
        ``distribution``: the name it is published under where that is not ``name`` (conda's
        ``pytorch`` is torch, but not the registry's wheel: its metadata implies nothing).
        ``plain``: the version was read as a PLAIN_VERSION, valid by its shape: not checked again.
        ``specifier``: a package without a version was declared with this range ("" unpinned);
        ``wheel``: the file name of the prebuilt wheel it is installed from;
        ``releases``: the version is unknown but one of these (the branches of a shell ``if``)."""
        if version is not None and not plain:
            check_version(version, origin)
        package = Package(
            installed_name(name, version),
            version,
            distribution or name,
            origin,
            releases,
            specifier=specifier if version is None else None,
            wheel=wheel,
        )
        self.packages.setdefault(package.name, package)

    def merge(self, other: Declared) -> None:
        """Lay this layer over ``other``: what this one states wins, and what it replaces is kept in
        ``replaced``; the rest of ``other`` stays. ``other``'s torch CUDA goes with its torch: a torch
        this layer states brings its own (its label, or what its release implies)."""
        states_torch = "torch" in self.packages or "torch" in self.absent
        if (
            not self.packages and not self.absent
        ):  # nothing laid over it yet: a copy in C (a lock may hold 500,000 pins)
            self.packages = dict(other.packages)
        else:
            for name, package in other.packages.items():
                if name in self.packages:
                    self.replaces(name, package.version or "no version", package.origin)
                elif name not in self.absent:  # not uninstalled by this layer
                    self.packages[name] = package
        for name, origin in other.absent.items():
            if name not in self.packages:
                self.absent.setdefault(name, origin)
        self.problems += other.problems
        self.extras |= other.extras
        for name, origin in other.optional.items():
            self.optional.setdefault(name, origin)
        if other.torch_cuda and (self.torch_cuda or states_torch):
            self.replaces("torch build", f"CUDA {other.torch_cuda[0]}", other.torch_cuda[1])
        else:
            self.torch_cuda = self.torch_cuda or other.torch_cuda
        if other.python and self.python:
            self.replaces("python", *other.python)
        self.python = self.python or other.python
        if other.nvcc and self.nvcc:
            self.replaces("nvcc", *other.nvcc)
        self.nvcc = self.nvcc or other.nvcc
        self.open_package_list = self.open_package_list or other.open_package_list
        for fact, statements in other.replaced.items():
            self.replaced.setdefault(fact, []).extend(statements)

    def replaces(self, fact: str, value: str, origin: str) -> None:
        """Record that this layer's ``fact`` won over ``value``, stated by ``origin`` below it."""
        self.replaced.setdefault(fact, []).append(f"{value} from {origin}")


def applies(marker: str | None, markers: dict[str, str], origin: str) -> bool:
    """Whether a PEP 508 marker holds for the target (``markers``: its platform and Python). A marker
    on a fact the target does not state (an ``extra``) does not apply."""
    if not marker:
        return True
    if not marker_states(marker, markers):
        return False
    try:
        return Marker(marker).evaluate({"extra": "", **markers})
    except UndefinedEnvironmentName:
        return False
    except (InvalidMarker, UndefinedComparison, ValueError) as exc:
        raise InputError(origin, f"a marker that cannot be evaluated: {shown(str(exc))}") from None


def requirement(text: str, origin: str) -> Requirement:
    try:
        return Requirement(text)
    except ValueError as exc:  # InvalidRequirement, or a number past the int-string limit
        raise InputError(origin, f"not a requirement: {shown(str(exc).splitlines()[0])}") from None


def exact_version(req: Requirement) -> str | None:
    """The version a requirement pins exactly (``==2.5.1``); None for a range or a wildcard."""
    specifiers = list(req.specifier)
    if len(specifiers) == 1 and specifiers[0].operator in ("==", "===") and "*" not in specifiers[0].version:
        return specifiers[0].version
    return None


def wheel_file(url: str) -> str | None:
    """The file name of a wheel URL or path (``.../flash_attn-2.8.3+cu128torch2.10-cp312-...whl``),
    percent-escapes undone (``%2B`` is ``+``); None when it names no wheel."""
    from urllib.parse import unquote

    name = unquote(url.split("#", 1)[0].split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    return name if name.endswith(".whl") and name.count("-") >= 4 else None


def check_version(version: str, source: str) -> None:
    if len(version) <= MAX_VERSION_CHARS and _PLAIN_VERSION.fullmatch(version):
        return
    try:
        if len(version) > MAX_VERSION_CHARS:
            raise ValueError(version)
        Version(version)
    except ValueError:  # InvalidVersion, or a number past the int-string limit
        raise InputError(source, f"{shown(repr(version))} is not a valid PEP 440 version") from None


def shown(text: str, limit: int = 120) -> str:
    """A line of the user's, short enough for one error line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def url_shown(url: str) -> str:
    """A URL in a fact's origin (where a wheel came from): whole, unless it is absurdly long."""
    return shown(url, 400)
