"""The child process of a probe: import one probe module, run it, print one result line.

python -m attn_doctor.probes.child MODULE
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

from attn_doctor.isolation import emit, installed_versions
from attn_doctor.probes.observation import ProbeSkipped

VERSIONS_REPORTED = ("torch", "triton", "transformers", "flash-attn", "flash-linear-attention", "fla-core")


def main(argv: list[str]) -> None:
    (module_name,) = argv
    result: dict[str, Any] = {"versions": installed_versions(VERSIONS_REPORTED)}
    try:
        observations = importlib.import_module(module_name).run()
        result["observations"] = [item.to_json() for item in observations]
    except ProbeSkipped as skipped:
        result["skipped"] = str(skipped)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        result["exception"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc(limit=8)
    emit(result)


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(0)  # the result is out; torch's and transformers' teardown would cost another half second
