"""The child process of a repro: run one case and print one result line.

    python -m attn_doctor.repro.child MODULE CASE DEVICE

MODULE defines ``run_case(case, device) -> dict`` (see attn_doctor/repro/cases/).

The parent reads the last ``ATTN_DOCTOR_RESULT {json}`` line. Anything can go wrong in here
(a device-side assert, a fault, a hang): the parent copes; this process only reports.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

from attn_doctor.isolation import emit, installed_versions


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))})"
    return "cpu (Triton interpreter)"


def main(argv: list[str]) -> int:
    module_name, case, device = argv
    versions = installed_versions(("torch", "triton", "transformers"))
    result: dict[str, Any] = {"device": device, "versions": versions}
    try:
        result.update(device=_device_name(device))
        module = importlib.import_module(module_name)
        result.update(module.run_case(case, device))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which classifies it
        result.update(
            outcome="exception",
            detail=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(limit=8),
        )
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
