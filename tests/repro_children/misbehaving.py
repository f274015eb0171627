"""Repro cases that misbehave on purpose, run by the real runner in real child processes."""

from __future__ import annotations

import ctypes
import os
import sys
import time


def run_case(case: str, device: str, seed: int) -> dict:
    if case == "match":
        return {"outcome": "match", "detail": "max abs error 1e-05"}
    if case == "mismatch":
        return {
            "outcome": "mismatch",
            "detail": "max abs error 3.2",
            "max_abs_error": 3.2,
            "max_rel_error": 1.5,
        }
    if case == "device-assert":
        sys.stderr.write("kernel.py:12: Assertion `index out of bounds` failed.\n" * 2000)
        raise RuntimeError("Triton Error [CUDA]: device-side assert triggered")
    if case == "library-error":
        raise ValueError("some unrelated failure")
    if case == "symptom":
        raise RuntimeError("pad(): argument 'pad' failed to unpack the object at pos 2")
    if case == "segfault":
        ctypes.string_at(0)
    if case == "abort-after-assert-text":
        sys.stderr.write("CUDA error: an illegal memory access was encountered\n")
        sys.stderr.flush()
        os.abort()
    if case == "hang":
        time.sleep(3600)
    if case == "garbage":
        sys.stdout.write("\x00\xff not a result line\n" * 200000)
        sys.stdout.write("ATTN_DOCTOR_RESULT {not json\n")
        sys.stdout.flush()
        os._exit(0)
    if case == "silent-exit":
        os._exit(3)
    raise SystemExit(f"unknown case {case}")
