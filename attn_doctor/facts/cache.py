"""Where attn-doctor keeps what it can reuse between runs (project-scan results, nvcc's version).

``$ATTN_DOCTOR_CACHE``, else ``$XDG_CACHE_HOME/attn-doctor``, else ``~/.cache/attn-doctor``. Every
cache is best effort: an unreadable or unwritable folder only costs time.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_folder() -> Path | None:
    if os.environ.get("ATTN_DOCTOR_CACHE"):
        return Path(os.environ["ATTN_DOCTOR_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "attn-doctor"
    home = os.environ.get("HOME") or os.environ.get("USERPROFILE")
    return None if not home else Path(home) / ".cache" / "attn-doctor"
