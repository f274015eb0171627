"""flash-attn: the sdist of each release (the registry has no wheel of it), plus FA3's C++ from
the release's git tag where the sdist lacks it.

Kept from the sdist: flash_attn/** (FA2's interface, the Triton/AMD paths, and flash_attn/cute,
FA4, where present), hopper/*.py (FA3's flash_attn_interface.py and setup.py), setup.py, and the
C++/CUDA sources of csrc/ whose TORCH_CHECKs users meet (flash_api.cpp, the CK and layer-norm
APIs), without the vendored cutlass/composable_kernel trees and the per-head-dim kernel
instantiations. The sdists never carry hopper/'s C++ (hopper/flash_api.cpp, FA3's checks):
``supplement`` reads it, and any hopper/ file the sdist lacks, from the tag ``v<version>`` of a
git mirror of Dao-AILab/flash-attention (CACHE/git/flash-attention.git, cloned by ``fetch`` when
missing; ``FLASH_ATTENTION_GIT`` names another). A release whose tag is missing says so.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.messages.cpp_source import SUFFIXES
from tools.messages.sources.archives import ArchiveTrees, glob

REPOSITORY = "https://github.com/Dao-AILab/flash-attention"
GIT_INCLUDE = ("hopper/*.py", "hopper/*.cpp", "hopper/*.h", "hopper/*.hpp", "hopper/*.cu", "hopper/*.cuh")
TESTS = ("**/test_*.py", "**/test.py", "**/bench*.py", "**/benchmark_*.py", "**/generate_kernels.py")


@dataclass(frozen=True)
class FlashAttnTrees(ArchiveTrees):
    git_include: tuple[str, ...] = GIT_INCLUDE

    def mirror(self, cache: Path) -> Path:
        return Path(os.environ.get("FLASH_ATTENTION_GIT") or cache / "git" / "flash-attention.git")

    def fetch(
        self, cache: Path, versions: list[str] | None = None, log: Callable[[str], None] = print
    ) -> None:
        mirror = self.mirror(cache)
        if not mirror.exists():
            mirror.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "clone", "--mirror", "-q", REPOSITORY, str(mirror)], capture_output=True)
        super().fetch(cache, versions, log)

    def supplement(self, version: str, dest: Path, notes: list[str]) -> list[str]:
        mirror = self.mirror(dest.parent.parent)  # dest: CACHE/flash-attn/<version>
        tag = f"v{version}"
        if not mirror.exists():
            notes.append(f"flash-attn {version}: no git mirror, hopper/ C++ (FA3) not read")
            return []
        listed = git(mirror, "ls-tree", "-r", "--name-only", tag)
        if listed is None:
            notes.append(f"flash-attn {version}: no tag {tag} in the git mirror, hopper/ C++ (FA3) not read")
            return []
        taken = []
        for path in listed.decode().splitlines():
            wanted = any(glob(p).match(path) for p in self.git_include)
            if wanted and not any(glob(p).match(path) for p in self.exclude) and not (dest / path).exists():
                data = git(mirror, "show", f"{tag}:{path}")
                if data is not None:
                    (dest / path).parent.mkdir(parents=True, exist_ok=True)
                    (dest / path).write_bytes(data)
                    taken.append(path)
        return [f"git {tag}: {path}" for path in taken]


def git(mirror: Path, *args: str) -> bytes | None:
    done = subprocess.run(["git", "--git-dir", str(mirror), *args], capture_output=True)
    return done.stdout if done.returncode == 0 else None


FLASH_ATTN = FlashAttnTrees(
    "flash-attn",
    "flash_attn",
    (
        "flash_attn/**.py",
        "hopper/*.py",
        "setup.py",
        "csrc/**.cpp",
        "csrc/**.h",
        "csrc/**.hpp",
        "csrc/**.cuh",
        "csrc/**.cu",
    ),
    floor="2.2.0",  # September 2023
    suffixes=SUFFIXES + (".py",),
    exclude=(
        "csrc/cutlass/**",
        "csrc/composable_kernel/**",
        "csrc/flash_attn/src/flash_*_hdim*.cu",  # one kernel instantiation each, no message
        "csrc/flash_attn/src/flash_*_split_hdim*.cu",
        "csrc/flash_attn_ck/instances/**",
        "hopper/flash_*_hdim*.cu",  # FA3's instantiations, in hopper/ itself up to 2.7.2
        *TESTS,
    ),
    wheels=False,
    sdist_env=(("FLASH_ATTENTION_SKIP_CUDA_BUILD", "TRUE"),),  # its setup.py imports torch, builds nothing
)
