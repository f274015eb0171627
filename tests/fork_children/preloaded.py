"""Imported by the fork server before it forks; what it does on import, the test picks through
ATTN_DOCTOR_TEST_PRELOAD: count its imports in a file, crash, exit, hang, print on stdout, or
leave a torch whose CUDA is initialised."""

from __future__ import annotations

import ctypes
import os
import sys
import time
import types

_behaviour = os.environ.get("ATTN_DOCTOR_TEST_PRELOAD", "count")
if _behaviour == "segfault":
    ctypes.string_at(0)
if _behaviour == "hang":
    time.sleep(600)
if _behaviour == "silent":  # exits without a word
    os._exit(4)
if _behaviour == "chatty":  # a library that prints a banner on import: the server's stdout is its protocol
    print("preloaded: a banner on stdout", flush=True)
if _behaviour == "exit":  # one line on stderr, then exit 3: what an import that fails says
    os.write(2, b"preloaded: cannot start here\n")
    os._exit(3)
if _behaviour == "cuda-initialised":  # torch on a GPU machine whose import initialised CUDA (none in CI)
    sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
with open(os.environ["ATTN_DOCTOR_TEST_IMPORTS"], "a") as imports:
    imports.write(f"{os.getpid()}\n")
