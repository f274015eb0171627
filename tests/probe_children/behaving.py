"""A probe module whose behaviour the test picks through ATTN_DOCTOR_TEST_PROBE."""

from __future__ import annotations

import os
import signal
import sys
import time

from attn_doctor.probes.observation import Observation, ProbeSkipped, ProbeVerdict

RULE = "test-rule"


def run() -> list[Observation]:
    behaviour = os.environ["ATTN_DOCTOR_TEST_PROBE"]
    if behaviour == "affected":
        return [Observation(RULE, ProbeVerdict.AFFECTED, "cu_seqlens_q=[16] does not start at 0")]
    if behaviour == "not-affected":
        return [Observation(RULE, ProbeVerdict.NOT_AFFECTED, "exact")]
    if behaviour == "silent-about-rule":
        return [Observation("another-rule", ProbeVerdict.AFFECTED, "wrong rule")]
    if behaviour == "skip":
        raise ProbeSkipped("needs a GPU")
    if behaviour == "raise":
        raise RuntimeError("the code path moved")
    if behaviour == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if behaviour == "hang":
        time.sleep(600)
    if behaviour == "flood":  # 32 MiB of noise, then a valid result
        chunk = "x" * 1023 + "\n"
        for _ in range(32 * 1024):
            sys.stdout.write(chunk)
        return [Observation(RULE, ProbeVerdict.NOT_AFFECTED, "after the flood")]
    if behaviour == "garbage":
        print("ATTN_DOCTOR_RESULT {not json")
        sys.stdout.flush()
        os._exit(0)
    raise AssertionError(behaviour)
