"""The traceback frames a log shows: who called whom, and which package raised.

A frame is ``File "PATH", line N, in FUNCTION``. Its package is read from the path: the folder after
``site-packages/`` (or ``dist-packages/``), else the last folder of the path that is a known
package's import name, so a checkout (``~/flash-linear-attention/fla/modules/rotary.py``) or a copy
vendored under another package counts as that package. The innermost frame in a package is the best
evidence of who raised the error; the catalogue's entry of the same file and function is preferred.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from attn_doctor.facts.names import rule_name

MAX_FRAMES = 64  # the last ones: the innermost frames are at the end of a traceback
_FRAME = re.compile(r'File "([^"]{1,1000})", line ([0-9]{1,9})(?:, in ([A-Za-z_<>][A-Za-z0-9_.<>]{0,200}))?')
# top-level import names -> distribution: the stack's packages and the others the catalogue reads
MODULES = {
    "torch": "torch",
    "triton": "triton",
    "transformers": "transformers",
    "flash_attn": "flash-attn",
    "flash_attn_2_cuda": "flash-attn",
    "flash_attn_3": "flash-attn-3",
    "flash_attn_interface": "flash-attn-3",
    "xformers": "xformers",
    "fla": "flash-linear-attention",
    "accelerate": "accelerate",
    "peft": "peft",
    "deepspeed": "deepspeed",
    "vllm": "vllm",
    "sglang": "sglang",
    "diffusers": "diffusers",
    "kernels": "kernels",
    "liger_kernel": "liger-kernel",
    "trl": "trl",
}
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]")


@dataclass(frozen=True)
class Frame:
    line: int  # the log line that shows it
    path: str  # as the log prints it
    function: str
    module_path: str  # from the package's import name: "fla/modules/rotary.py"; "" outside packages
    # the distribution, rule-named (an installed package this tool does not know: its import name);
    # None for the user's own code and Python's library
    package: str | None

    def is_file(self, catalogue_file: str) -> bool:
        """The catalogue's ``file`` of an entry (``transformers/modeling_utils.py``, or with a
        leading ``src/``) is this frame's file."""
        if not self.module_path:
            return False
        return catalogue_file == self.module_path or catalogue_file.endswith("/" + self.module_path)


def frame_of(line: str, number: int) -> Frame | None:
    found = _FRAME.search(line)
    if found is None:
        return None
    path, function = found[1], found[3] or ""  # a paste cut before ", in FUNCTION"
    module_path, package = _package_of(path)
    return Frame(number, path, function, module_path, package)


def _package_of(path: str) -> tuple[str, str | None]:
    installed = _INSTALLED.split(path)
    parts = re.split(r"[/\\]", installed[-1] if len(installed) > 1 else path)
    if len(installed) > 1 and parts[0] in MODULES:
        return "/".join(parts), rule_name(MODULES[parts[0]])
    if len(installed) > 1 and len(parts) > 1 and parts[0].isidentifier():  # another installed package
        return "/".join(parts), rule_name(parts[0])
    for index in range(len(parts) - 2, -1, -1):  # a checkout or a vendored copy: the innermost name
        if parts[index] in MODULES:
            return "/".join(parts[index:]), rule_name(MODULES[parts[index]])
    return "", None


def innermost_in_a_package(frames: list[Frame]) -> Frame | None:
    """The last frame inside a package (not the user's script, not Python's own library)."""
    return next((frame for frame in reversed(frames) if frame.package), None)
