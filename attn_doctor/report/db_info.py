"""`attn-doctor db info`: what the release-facts snapshot holds and how it was made."""

from __future__ import annotations

import json

from attn_doctor.releases.facts import ReleaseFacts


def to_json(facts: ReleaseFacts) -> str:
    meta = facts.meta
    document = {
        "schema": meta.get("schema"),
        "schema_version": meta.get("schema_version"),
        "generated": facts.generated,
        "generator": meta.get("generator"),
        "packages": meta.get("packages", {}),
        "flash_attention_tags": meta.get("flash_attention_tags"),
        "folder": str(facts.folder),
    }
    return json.dumps(document, indent=2) + "\n"


def to_text(facts: ReleaseFacts) -> str:
    meta = facts.meta
    lines = [
        f"release facts: snapshot of {facts.generated}",
        f"  made by: {meta.get('generator')}",
        f"  folder:  {facts.folder}",
        "",
        f"  {'package':<26} {'releases':>8}  newest",
    ]
    for name, info in sorted(meta.get("packages", {}).items()):
        lines.append(f"  {name:<26} {info.get('releases', 0):>8}  {info.get('newest') or '-'}")
    lines.append(
        f"  {'flash-attn build matrices':<26} {meta.get('flash_attention_tags', 0):>8}  (publish.yml per tag)"
    )
    return "\n".join(lines) + "\n"
