"""`attn-doctor db info`: what the release-facts snapshot holds and how it was made."""

from __future__ import annotations

import json
from typing import Any

from attn_doctor.releases.facts import ReleaseFacts
from attn_doctor.releases.messages import Catalogue
from attn_doctor.report.width import fit


def to_json(facts: ReleaseFacts, messages: Catalogue) -> str:
    meta = facts.meta
    document = {
        "schema": meta.get("schema"),
        "schema_version": meta.get("schema_version"),
        "generated": facts.generated,
        "generator": meta.get("generator"),
        "packages": meta.get("packages", {}),
        "flash_attention_tags": meta.get("flash_attention_tags"),
        "folder": str(facts.folder),
        "message_catalogue": _catalogue(messages),
    }
    return json.dumps(document, indent=2) + "\n"


def _catalogue(messages: Catalogue) -> dict[str, Any]:
    return {
        "generated": messages.generated,
        "packages": {
            name: {
                "releases": len(info.get("releases_read", [])),
                "first": (info.get("releases_read") or [None])[0],
                "newest": (info.get("releases_read") or [None])[-1],
                "messages": info.get("entries", 0),
                "unread": info.get("unread", []),
            }
            for name, info in sorted(messages.packages.items())
        },
    }


def to_text(facts: ReleaseFacts, messages: Catalogue, width: int | None = None) -> str:
    """The human report, each line fitted to ``width`` columns (None: lines left whole, for a pipe);
    the command that made the snapshot wraps with `` \\`` line ends, so it still pastes as one."""
    meta = facts.meta
    made_by = f"  made by: {meta.get('generator')}"
    lines = [
        f"release facts: snapshot of {facts.generated}",
        made_by,
        f"  folder:  {facts.folder}",
        "",
        f"  {'package':<26} {'releases':>8}  newest",
    ]
    for name, info in sorted(meta.get("packages", {}).items()):
        lines.append(f"  {name:<26} {info.get('releases', 0):>8}  {info.get('newest') or '-'}")
    lines.append(
        f"  {'flash-attn build matrices':<26} {meta.get('flash_attention_tags', 0):>8}  (publish.yml per tag)"
    )
    catalogue = _catalogue(messages)
    lines += ["", f"message catalogue: snapshot of {catalogue['generated'] or '(none shipped)'}"]
    names = max([len("package"), *map(len, catalogue["packages"])])
    lines.append(f"  {'package':<{names}} {'releases':>8}  {'from':<10} {'to':<11} {'messages':>8}  unread")
    for name, info in catalogue["packages"].items():
        lines.append(
            f"  {name:<{names}} {info['releases']:>8}  {info['first'] or '-':<10} "
            f"{info['newest'] or '-':<11} {info['messages']:>8}  {len(info['unread'])}"
        )
    return "".join(f"{part}\n" for line in lines for part in fit(line, width, shell=line == made_by))
