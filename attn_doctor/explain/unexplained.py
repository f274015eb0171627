"""Say what is not known (issue 38, item 4): for each of the log's last error lines that no cause
explains, why no origin was found, so a user knows what was checked: a package the catalogue does
not read, the user's own code, Python's or CUDA's own words, or words no release read prints."""

from __future__ import annotations

from dataclasses import dataclass

from attn_doctor.explain.rank import is_generic
from attn_doctor.facts.log_frames import Frame
from attn_doctor.facts.names import rule_name
from attn_doctor.releases.messages import PYTHON_WORDINGS, Catalogue

SHOWN = 3  # the last error lines: what the run died of is at the end
NEAR = 60  # lines: a traceback's frames sit just above its error line


@dataclass(frozen=True)
class Unexplained:
    line: int
    text: str
    why: str


def unexplained(
    errors: list[tuple[int, str]], explained: set[int], frames: list[Frame], catalogue: Catalogue
) -> list[Unexplained]:
    """The last SHOWN error lines outside ``explained`` (lines a cause matched or reasoned about)."""
    left = [(line, text) for line, text in errors if line not in explained][-SHOWN:]
    return [Unexplained(line, text, _why(line, text, frames, catalogue)) for line, text in left]


def _why(line: int, text: str, frames: list[Frame], catalogue: Catalogue) -> str:
    read = sorted(catalogue.packages)
    raised_in = next((frame for frame in reversed(frames) if line - NEAR <= frame.line < line), None)
    if any(wording in text for wording in PYTHON_WORDINGS):
        return (
            "Python's own words (a missing attribute, name or argument): no library wrote them, so no "
            "release's code is their origin; the frames and the versions are the evidence"
        )
    if is_generic(_message_part(text)):
        return "a CUDA or runtime error any kernel can raise: its words name no package"
    if raised_in is not None and raised_in.package is None:
        return f"raised in code outside the packages (line {raised_in.line}: {raised_in.path})"
    if raised_in is not None and raised_in.package not in {rule_name(name) for name in read}:
        return (
            f"raised in {raised_in.package} ({raised_in.module_path}), a package the message catalogue "
            f"does not read (it reads {', '.join(read)})"
        )
    if not read:
        return "no message catalogue is installed (ATTN_DOCTOR_MESSAGE_CATALOGUE)"
    return (
        "no release the catalogue read prints these words: a message built at run time, or one of a "
        f"package or release it does not read (it reads {', '.join(read)})"
    )


def _message_part(text: str) -> str:
    return text.split("Error: ", 1)[-1]
