"""The human report, in the spirit of ``flutter doctor``: a line per area, then the findings.

Lines are built once as (text, style) pairs; the CLI prints them through rich on a colour
terminal and as plain text otherwise (pipes, NO_COLOR), so rich is only imported when it paints.
"""

from __future__ import annotations

from collections.abc import Sequence

from attn_doctor.check import CheckResult
from attn_doctor.engine.matcher import RELEASE, Finding, Verdict, needs_model, pending_features
from attn_doctor.engine.schema import COMPONENTS
from attn_doctor.facts.model import REPLACED, Environment, describe_torch_build
from attn_doctor.probes.observation import ProbeVerdict
from attn_doctor.report import install, unknowns
from attn_doctor.report.width import fit
from attn_doctor.words import counted

Line = tuple[str, str] | tuple[str, str, int]  # (text, rich style[, hanging indent when wrapped])
AREA_HANG = 49  # where an area line's counts start
MAX_GPU_KINDS = 2  # the gpu area names this many kinds of GPU; -v lists every kind with its count

OK, WARN, FAIL, UNKNOWN = "✓", "!", "✗", "?"
_AREA_PACKAGES = {
    "torch": "torch",
    "triton": "triton",
    "transformers": "transformers",
    "flash-attn": "flash-attn",
    "flash-attn-3": "flash-attn-3",
    "flash-linear-attention": "flash-linear-attention",
    "xformers": "xformers",
    "flex-attention": "torch",
    "sdpa": "torch",
}


def render_lines(result: CheckResult, verbose: bool = False) -> list[Line]:
    env = result.environment
    lines: list[Line] = [(f"attn-doctor check (target: {env.target})", "bold")]
    for component in COMPONENTS:
        lines.append(
            _area_line(component, env, [f for f in result.findings if f.rule.component == component])
        )
    if verbose:  # the facts that decide first: the stack the rules read, the target, the features
        lines.append(("", ""))
        lines.extend(fact_lines(env, _read_by_rules(result.findings)))
    shown = [
        f
        for f in result.findings
        if (f.verdict is not Verdict.NOT_AFFECTED or _probed(f) or f.ignored is not None)
        and not _conditional(f)
        and (verbose or not unknowns.is_grouped(f))
    ]
    if shown:
        lines.append(("", ""))
    for finding in shown:
        lines.extend(_finding_lines(finding, verbose, env))
    lines.extend(_unknown_lines(result.findings, verbose))
    lines.extend(_conditional_lines(result.findings, verbose))
    if verbose:
        lines.extend(_ruled_out_lines([f for f in result.findings if f not in shown and not _conditional(f)]))
    if result.notes:
        lines.append(("", ""))
        lines.extend((f"note: {note}", "yellow") for note in result.notes)
    lines.append(("", ""))
    lines.append(_summary_line(result))
    return lines


def _ruled_out_lines(findings: list[Finding]) -> list[Line]:
    """The rules that do not apply, one line per fact that rules them out (a rule under the first
    of its conditions that does not hold): 70 rules in a dozen lines, not 230."""
    groups: dict[str, list[str]] = {}
    for finding in findings:
        decided = next(
            (reason.text for reason in finding.reasons if reason.holds is False), "no condition holds"
        )
        groups.setdefault(decided, []).append(finding.rule.id)
    if not groups:
        return []
    lines: list[Line] = [
        ("", ""),
        (f"Not affected: {counted(len(findings), 'rule')}, by the fact that rules each out:", "bold"),
    ]
    for decided, ids in sorted(groups.items(), key=lambda group: (-len(group[1]), group[0])):
        lines.append((f"  {OK} {decided}: {counted(len(ids), 'rule')}: {', '.join(ids)}", "green", 6))
    return lines


def _read_by_rules(findings: list[Finding]) -> set[str]:
    """The packages the rules' conditions name, and those the report's areas show."""
    return {name for f in findings for name in f.rule.affects.packages} | set(_AREA_PACKAGES.values())


def _probed(finding: Finding) -> bool:
    """A probe that ran says something worth a line even when all is well; a skipped one doesn't."""
    return finding.probe is not None and finding.probe.verdict is not ProbeVerdict.SKIPPED


def _conditional(finding: Finding) -> bool:
    """Unknown only because a feature's use is unknown (and not ignored): grouped, not listed."""
    return finding.ignored is None and bool(pending_features(finding))


def _conditional_lines(findings: list[Finding], verbose: bool) -> list[Line]:
    """One line per feature (or set of features) whose use is unknown; the rules with ``-v``."""
    groups: dict[str, list[str]] = {}
    for finding in findings:
        if _conditional(finding):
            groups.setdefault(" and ".join(pending_features(finding)), []).append(finding.rule.id)
    if not groups:
        return []
    header = "Rules that apply only if you use a feature (declare: --feature, [tool.attn-doctor] features)"
    if any(needs_model(finding) for finding in findings if _conditional(finding)):
        header += " or a model (declare: --model, [tool.attn-doctor] models)"
    lines: list[Line] = [("", ""), (header + ":", "")]
    for features, rule_ids in sorted(groups.items()):
        text = f"  {UNKNOWN} if you use {features}: {counted(len(rule_ids), 'rule')}"
        lines.append((text + (f": {', '.join(rule_ids)}" if verbose else ""), "dim"))
    return lines


def _unknown_lines(findings: list[Finding], verbose: bool) -> list[Line]:
    """One line per missing fact, with how to give it; the rules' full text only with ``-v``."""
    groups = unknowns.groups(findings)
    if not groups:
        return []
    hint = "" if verbose else " (each in full: -v)"
    lines: list[Line] = [("", ""), (f"Rules left unknown for a missing fact{hint}:", "")]
    for group in groups:
        lines.append((f"  {UNKNOWN} {group.headline()}", "yellow"))
        lines.append((f"      {', '.join(group.rule_ids)}", "dim", 6))
    return lines


def fitted(lines: Sequence[Line], width: int | None) -> list[tuple[str, str]]:
    """Each line as the lines that show it within ``width`` columns, with its style."""
    out = []
    for line in lines:
        hang = line[2] if len(line) == 3 else None
        out += [(part, line[1]) for part in fit(line[0], width, hang)]
    return out


def plain(lines: Sequence[Line], width: int | None = None) -> str:
    return "\n".join(text for text, _ in fitted(lines, width)) + "\n"


def _area_line(component: str, env: Environment, findings: list[Finding]) -> Line:
    active = [f for f in findings if f.ignored is None and not _conditional(f)]
    if any(f.verdict is Verdict.AFFECTED and f.rule.severity == "error" for f in active):
        mark, style = FAIL, "red"
    elif any(f.verdict is not Verdict.NOT_AFFECTED for f in active):
        mark, style = WARN, "yellow"
    else:
        mark, style = OK, "green"
    affected = sum(f.verdict is Verdict.AFFECTED for f in active)
    unknown = sum(f.verdict is Verdict.UNKNOWN for f in active)
    conditional = sum(_conditional(f) for f in findings)
    notes = [f"{affected} affected" if affected else "", f"{unknown} unknown" if unknown else ""]
    notes.append(f"{conditional} if used" if conditional else "")
    counts = counted(len(findings), "rule") + (f": {', '.join(n for n in notes if n)}" if any(notes) else "")
    # 22 + 21 columns leave 31 for the counts within 80; a longer line wraps under the counts
    text = f"[{mark}] {component:<22} {_area_fact(component, env):<21} {counts}"
    return (text, style, AREA_HANG)


def _times(count: int) -> str:
    return f" x{count}" if count > 1 else ""


def _area_fact(component: str, env: Environment) -> str:
    if component == "gpu":
        if not env.gpus:
            return "no GPU" if env.gpu_source == "none" else "unknown"
        kinds = [f"{gpu.name_and_sm()}{_times(count)}" for gpu, count in env.gpu_counts.items()]
        others = len(kinds) - MAX_GPU_KINDS
        return ", ".join(kinds[:MAX_GPU_KINDS]) + (
            f" and {counted(others, 'other kind')}" if others > 0 else ""
        )
    if component == "cuda":
        build = env.torch_build
        torch_cuda = (
            "?"
            if build is None
            else (
                "cu" + build.cuda.replace(".", "")
                if build.cuda
                else ("ROCm " + build.hip if build.hip else "CPU")
            )
        )
        nvcc = env.nvcc or ("none" if "nvcc" in env.origins else "?")
        if "torch" not in env.packages:
            return f"no torch, nvcc {nvcc}" if env.absent("torch") else f"torch ?, nvcc {nvcc}"
        return f"torch {torch_cuda}, nvcc {nvcc}"
    name = _AREA_PACKAGES[component]
    package = env.packages.get(name)
    if package is None:
        return "not installed" if env.absent(name) else "not named"
    version = package.version or "version unknown"
    return version if name == component else f"{package.name} {version}"


def _finding_lines(finding: Finding, verbose: bool, env: Environment) -> list[Line]:
    rule = finding.rule
    if finding.ignored is not None:
        return [(f"  - {rule.id}: ignored ({finding.ignored})", "dim")]
    if finding.verdict is Verdict.AFFECTED:
        mark, style = (FAIL, "red") if rule.severity == "error" else (WARN, "yellow")
    elif finding.verdict is Verdict.UNKNOWN:
        mark, style = UNKNOWN, "yellow"
    else:
        mark, style = OK, "green"
    lines: list[Line] = [
        (f"{mark} {rule.id} [{rule.severity}, {finding.verdict.value}]: {rule.title}", f"bold {style}")
    ]
    if finding.probe is not None:
        lines.append((f"    probe: {finding.probe.verdict.value}: {finding.probe.evidence}", "bold"))
        lines.append((f"    versions alone: {finding.version_verdict.value}", "dim"))
    if finding.verdict is Verdict.UNKNOWN:
        missing = [r.text for r in finding.reasons if r.holds is None]
        lines.append((f"    unknown: {'; '.join(missing)}", "yellow"))
    if finding.verdict is not Verdict.NOT_AFFECTED:
        for reason in finding.reasons:
            if reason.condition == RELEASE and reason.holds:
                lines.append((f"    found: {reason.text}", ""))
        for suggestion in [r.suggestion for r in finding.reasons if r.holds and r.suggestion]:
            lines.append((f"    for these versions: {suggestion}", "bold"))
        lines.append((f"    fix: {rule.fix_summary}", ""))
        lines += [(f"    {line}", "bold") for line in install.lines(finding, env)]
        if rule.fix_pins:
            from attn_doctor.engine.fix_pins import reconcile  # packaging's requirement parser: only for pins

            pins = reconcile(rule.fix_pins, env)
            lines.append((f"    pins: {' '.join(pins.pins)}", ""))
            if pins.conflicts:
                because = "; ".join(pins.conflicts)
                added = len(pins.pins) > len(rule.fix_pins)
                why = f"      (as {because})" if added else f"      (pip refuses these: {because})"
                lines.append((why, "dim"))
        lines.append((f"    see: {rule.references[0]}", "cyan"))
        if rule.repro:
            lines.append((f"    repro: attn-doctor repro {rule.id}", "dim"))
    if verbose:
        for reason in finding.reasons:
            symbol = {True: "yes", False: "no", None: "??"}[reason.holds]
            lines.append((f"    {symbol:>3}  {reason.text}", "dim"))
    return lines


def fact_lines(env: Environment, read: set[str] | None = None) -> list[Line]:
    """Every fact with its origin; with ``read`` (the packages the rules read), those packages
    only, and the others of a lock file named on one line."""
    lines: list[Line] = [(f"Facts (target: {env.target}):", "bold")]
    others = [] if read is None else sorted(name for name in env.packages if name not in read)
    for name, package in sorted(env.packages.items()):
        if name in others:
            continue
        lines.append((f"  {name:<24} {package.version or '?':<28} {package.origin}", ""))
        lines += _replaced(env, name)
    if others:
        described = ", ".join(f"{name} {env.packages[name].version or '?'}" for name in others)
        lines.append(
            (f"  {counted(len(others), 'other package')}, which no rule reads: {described}", "dim", 4)
        )
    lines.append(_fact("torch build", describe_torch_build(env.torch_build), env.origins.get("torch_build")))
    lines += _replaced(env, "torch build")
    for gpu, count in env.gpu_counts.items():
        described = f"{gpu.name} cc={gpu.compute_capability} driver={gpu.driver}{_times(count)}"
        lines.append((f"  {'gpu':<24} {described}", ""))
    lines.append((f"  {'gpu source':<24} {env.gpu_source}", ""))
    for label in ("nvcc", "python", "platform", "os", "libc"):
        value = getattr(env, label) or ("none" if label in env.origins else "unknown")
        lines.append(_fact(label, value, env.origins.get(label)))
        lines += _replaced(env, label)
    lines.append(_fact("features declared", env.features.declared or "no", None))
    used = [("feature", env.features.facts), ("model", env.features.models())]  # models: found in use
    for kind, facts in used:
        for fact in sorted(facts.values(), key=lambda f: f.name):
            state = "in use" if fact.in_use else "not in use"
            origin = f"{fact.source} {' '.join(fact.evidence)}".strip()
            lines.append(_fact(f"{kind} {fact.name}", state, origin))
    return lines


def _replaced(env: Environment, fact: str) -> list[Line]:
    """What a layer of the target below the one that won stated for ``fact`` (a -r file won over
    the Dockerfile's line, which won over the image's record)."""
    statements = env.origins.get(REPLACED + fact, "")
    return [(f"      won over {statement}", "dim") for statement in statements.splitlines()]


def _fact(label: str, value: str, origin: str | None) -> Line:
    return (f"  {label:<24} {value:<28} {origin or ''}".rstrip(), "")


def _summary_line(result: CheckResult) -> Line:
    from attn_doctor.report.tally import tally

    counts = tally(result.findings)
    failing = len(result.failing())
    only_if_used = f" ({counts.only_if_used} only if you use a feature)" if counts.only_if_used else ""
    text = (
        f"{counted(len(result.findings), 'rule')}: {counts.affected} affected, "
        f"{counts.unknown} unknown{only_if_used}, {counts.not_affected} not affected"
        + (f", {counts.ignored} ignored" if counts.ignored else "")
        + f"; {failing} at or above --fail-on {result.fail_on}"
    )
    return (text, "bold red" if failing else "bold green")
