"""The child process of a repro: run one case and print one result line.

    python -m attn_doctor.repro.child MODULE CASE DEVICE SEED

MODULE defines ``run_case(case, device, seed) -> dict`` (see attn_doctor/repro/cases/); SEED seeds
its random inputs, so the same command gives the same numbers.

The parent reads the last ``ATTN_DOCTOR_RESULT {json}`` line. Anything can go wrong in here
(a device-side assert, a fault, a hang): the parent copes; this process only reports.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

from attn_doctor.isolation import emit, installed_versions


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))})"
    return "cpu (Triton interpreter)"


def _no_gpu(device: str) -> str | None:
    """Why this torch cannot run the kernels on ``device``, where it cannot."""
    if device != "cuda":
        return None
    import torch

    if not torch.version.cuda and not getattr(torch.version, "hip", None):
        return f"torch {torch.__version__} is a CPU build, with no CUDA"
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = "" if visible is None else f" (CUDA_VISIBLE_DEVICES={visible!r})"
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else f"ROCm {torch.version.hip}"
        return f"torch {torch.__version__} ({build}) sees no GPU{hidden}"
    return None


def main(argv: list[str]) -> int:
    module_name, case, device, seed = argv
    # numpy only drives the CPU path (triton's interpreter), where its release matters
    names = (
        ("torch", "triton", "numpy", "transformers")
        if device == "cpu"
        else ("torch", "triton", "transformers")
    )
    versions = installed_versions(names)
    result: dict[str, Any] = {"device": device, "versions": versions}
    try:
        why = _no_gpu(device)
        if why is not None:
            result.update(outcome="no-gpu", detail=why)
        else:
            result.update(device=_device_name(device))
            module = importlib.import_module(module_name)
            result.update(module.run_case(case, device, int(seed)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which classifies it
        result.update(
            outcome="exception",
            detail=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(limit=8),
        )
        if isinstance(exc, ImportError) and exc.name:  # the parent says what to install
            result.update(missing=exc.name)
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
