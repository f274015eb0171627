"""Unknown verdicts grouped by the fact they lack: one line per missing fact, saying how to give it.

A CI runner without ``--gpu`` leaves every GPU rule unknown; ten fix blocks (or ten annotations)
for one missing option hide the findings that matter. Reports say "7 rules need the GPU: pass
--gpu" once, and list the rules in full only when asked (``-v``).
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_doctor.engine import matcher
from attn_doctor.engine.matcher import Finding, Verdict, pending_features
from attn_doctor.words import counted

# what each missing fact is, and how the user supplies it
_NEEDS: dict[str, tuple[str, str]] = {
    matcher.MISSING_GPU: ("the GPU", "pass --gpu (H100, A100, L4, sm_90, ...)"),
    matcher.MISSING_DRIVER: (
        "the NVIDIA driver version",
        "pass --driver (or driver in [tool.attn-doctor]), or `attn-doctor probe --json` on the target",
    ),
    matcher.MISSING_NVCC: (
        "the CUDA toolkit (nvcc) version",
        "pass --nvcc (12.8, or none), or `attn-doctor probe --json` on the target",
    ),
    matcher.MISSING_TORCH_BUILD: ("torch's CUDA build", "pin torch with its build, e.g. torch==2.5.1+cu121"),
    matcher.MISSING_PYTHON: ("the Python version", "pass --python X.Y"),
    matcher.MISSING_PLATFORM: ("the platform", "pass --platform"),
    matcher.MISSING_VERSION: ("a package version", "pin it (NAME==VERSION in the file, or --pin)"),
    matcher.MISSING_RELEASE_DATA: (
        "a release the database does not hold",
        "see `attn-doctor db info`; a newer attn-doctor may know it",
    ),
    matcher.MISSING_FROM_LOG: (
        "a package the log does not name",
        "give the stack with -r, --pin or --env-file",
    ),
    matcher.MISSING_FROM_IMAGE: (  # or a Dockerfile's lines, over an image whose contents are not known
        "a package the image's record or the Dockerfile does not name",
        "state it with --pin NAME==VERSION or -r FILE",
    ),
    matcher.MISSING_API_ERROR: ("an API error read from a log", "run `attn-doctor explain LOG`"),
}
_OTHER = ("a fact", "see -v for which")


@dataclass(frozen=True)
class UnknownGroup:
    need: str  # "the GPU", "the GPU and the NVIDIA driver version"
    how: str  # how to supply it
    rule_ids: tuple[str, ...]

    def headline(self) -> str:
        count = len(self.rule_ids)
        verb = "needs" if count == 1 else "need"
        return f"{counted(count, 'rule')} {verb} {self.need}: {self.how}"


def is_grouped(finding: Finding) -> bool:
    """Unknown for a missing fact (not only a feature's unknown use, reported apart) and not ignored."""
    return finding.verdict is Verdict.UNKNOWN and finding.ignored is None and not pending_features(finding)


def groups(findings: list[Finding]) -> list[UnknownGroup]:
    """The unknown findings grouped by the facts they lack, largest group first."""
    grouped: dict[tuple[str, ...], list[str]] = {}
    for finding in findings:
        if is_grouped(finding):
            grouped.setdefault(missing_facts(finding), []).append(finding.rule.id)
    result = []
    for keys, rule_ids in grouped.items():
        needs = [_NEEDS.get(key, _OTHER) for key in keys] or [_OTHER]
        how = "; ".join(dict.fromkeys(how for _, how in needs))
        result.append(UnknownGroup(" and ".join(need for need, _ in needs), how, tuple(sorted(rule_ids))))
    return sorted(result, key=lambda group: (-len(group.rule_ids), group.need))


def missing_facts(finding: Finding) -> tuple[str, ...]:
    """The facts whose absence leaves ``finding`` unknown (features aside), in a stable order."""
    keys = {
        reason.missing or reason.condition
        for reason in finding.reasons
        if reason.holds is None and reason.condition != "features"
    }
    return tuple(sorted(keys))
