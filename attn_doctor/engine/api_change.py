"""The ``api_change`` condition: an API error the log shows is a change a release made.

``cannot import name 'LlamaFlashAttention2'`` on transformers 4.51 is code written for an older
transformers: 4.48.0 removed the class. The observation (facts/missing_names.py) meets the API
tables (releases/api_changes.py), and the target's release of the package decides:

* past the change (or before the name appeared): holds, with the fix for these versions, the
  last release before the change (or the first release that has the name);
* the release has the name: does not hold; the error has another cause (a name defined only when
  an optional import succeeds, another copy of the package shadowing it);
* the release is not known: unknown, naming the change;
* no table of this package knows the name: unknown for a name of this package's modules (the
  tables follow the modules attention code uses, not every module); for a class member or a
  keyword, whose message names no package, does not hold (``'NoneType' object has no attribute``
  is a bug in the calling code, not an API change).
"""

from __future__ import annotations

from packaging.version import Version

from attn_doctor.engine.matcher import MISSING_API_ERROR, MISSING_RELEASE_DATA, RELEASE, Reason
from attn_doctor.facts.missing_names import MEMBER, PARAMETER, REQUIRED, MissingName
from attn_doctor.facts.model import Environment
from attn_doctor.releases.api_changes import TOP_MODULES, Timeline
from attn_doctor.releases.facts import ReleaseFacts


def api_changed(
    package_name: str, observed: tuple[MissingName, ...], env: Environment, facts: ReleaseFacts
) -> Reason:
    if not observed:
        return Reason(RELEASE, None, "no API error read from a log", missing=MISSING_API_ERROR)
    package = env.packages.get(package_name)
    version = package.version if package else None
    verdicts = []
    for seen in observed:
        timelines = facts.api_changes.timelines(seen)
        mine = [timeline for timeline in timelines if timeline.package == package_name]
        if mine:
            verdicts.append(_verdict(seen, mine, package_name, version))
        elif _names_package(seen, package_name):
            verdicts.append(
                Reason(
                    RELEASE,
                    None,
                    f"{seen.describe()}: no change of it in {package_name}'s API tables",
                    missing=MISSING_RELEASE_DATA,
                )
            )
        elif timelines:
            verdicts.append(
                Reason(
                    RELEASE,
                    False,
                    f"{seen.describe()}: a change of {timelines[0].package}, not {package_name}",
                )
            )
        else:  # 'NoneType' object has no attribute 'to': no release of any package made that
            verdicts.append(Reason(RELEASE, False, f"{seen.describe()}: no package's API tables know it"))
    return min(verdicts, key=lambda reason: {True: 0, None: 1, False: 2}[reason.holds])


def _verdict(seen: MissingName, timelines: list[Timeline], package_name: str, version: str | None) -> Reason:
    """The first timeline whose state in ``version`` is what the log shows decides."""
    shown = seen.kind == REQUIRED  # the state the log shows: a parameter required, else a name missing
    where = seen.origin
    if version is None:
        timeline = timelines[0]
        cause = timeline.cause(None, shown) or timeline.cause(None, not shown)
        change = _change(timeline, cause) if cause else f"{seen.describe()}: no release change found"
        return Reason(
            RELEASE,
            None,
            f"{change} ({where}); the {package_name} release is not known",
            missing=MISSING_RELEASE_DATA,
        )
    judged = []
    for timeline in timelines:
        state = timeline.present_at(version)
        if state is None:
            judged.append(
                Reason(
                    RELEASE,
                    None,
                    f"{package_name} {version} is older than its API tables",
                    missing=MISSING_RELEASE_DATA,
                )
            )
        elif state != shown:
            how = (
                " only on some paths (an optional import, a feature check)"
                if timeline.conditional_at(version)
                else ""
            )
            judged.append(
                Reason(
                    RELEASE,
                    False,
                    f"{package_name} {version} has {timeline.subject}{how}: not a release change",
                )
            )
        elif cause := timeline.cause(version, shown):
            suggestion, pins = _fix(timeline, cause, package_name, version)
            order = "is past it" if Version(cause[1]) <= Version(version) else "predates it"
            return Reason(
                RELEASE,
                True,
                f"{_change(timeline, cause)}; {package_name} {version} {order} ({where})",
                suggestion=suggestion,
                suggested_pins=pins,
            )
        else:
            judged.append(
                Reason(
                    RELEASE,
                    None,
                    f"{timeline.subject}: no release change found",
                    missing=MISSING_RELEASE_DATA,
                )
            )
    return min(judged, key=lambda reason: reason.holds is False)  # unknown before not-affected


def _change(timeline: Timeline, cause: tuple[str, str]) -> str:
    event, release = cause
    renamed = f" (now {timeline.renamed_to})" if event == "removed" and timeline.renamed_to else ""
    return f"{timeline.subject} {event} in {timeline.package} {release}{renamed}"


def _fix(
    timeline: Timeline, cause: tuple[str, str], package_name: str, version: str
) -> tuple[str, tuple[str, ...]]:
    """The nearest release on the caller's side of the change: the last before it when the caller
    was written for older releases, the change's own release when for newer ones."""
    release = cause[1]
    if Version(release) > Version(version):
        return (
            f"the calling code needs {package_name}>={release}: install {package_name}=={release} or newer",
            (f"{package_name}=={release}",),
        )
    last = timeline.last_before(release)
    update = (
        f" or update it to {timeline.renamed_to}"
        if timeline.renamed_to
        else " or update it to this release's API"
    )
    if last is None:
        return f"the calling code was written for {package_name}<{release}:{update}", ()
    return (
        f"the calling code was written for {package_name}<{release}: pin {package_name}=={last}{update}",
        (f"{package_name}=={last}",),
    )


def _names_package(seen: MissingName, package_name: str) -> bool:
    """An import error names its module; a member or keyword error names no package."""
    if seen.kind in (MEMBER, PARAMETER, REQUIRED):
        return False
    return TOP_MODULES.get(seen.owner.split(".")[0]) == package_name
