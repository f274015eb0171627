"""Triton's CPU interpreter (TRITON_INTERPRET=1), made to work the same across triton releases.

Triton 3.6's interpreter gives ``tl.program_id`` and everything computed from it the shape (1,), and
turns a loop bound into an int with ``int(array)``, which numpy 2 refuses for a 1-element array
("only 0-dimensional arrays can be converted to Python scalars"): every kernel whose loop bound is
loaded (``for j in range(0, n)``) fails on the CPU. Later releases squeeze the array first
(``int(self.handle.data.squeeze())`` in triton/runtime/interpreter.py); ``adopt_squeeze`` gives the
older interpreters the same conversion. GPU runs never use the interpreter and are untouched.
"""

from __future__ import annotations

import os
from typing import Any


def adopt_squeeze() -> None:
    """When the interpreter is on, convert loop bounds as triton's newer interpreters do."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "adopted_squeeze", False):
        return

    def patched(tensor: Any, *scope: Any) -> None:  # 3.6 passes a scope that restores; older ones none
        original(tensor, *scope)
        squeezed = lambda self: int(self.handle.data.squeeze())  # noqa: E731
        if scope:
            scope[0].set_attr(tensor, "__index__", squeezed)
        else:
            tensor.__index__ = squeezed

    patched.adopted_squeeze = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def launch_options(debug: bool) -> dict[str, bool]:
    """``debug=`` for a kernel launch: the interpreter ignores device asserts anyway, and triton
    3.2's passes launch options on to the kernel function, which rejects them."""
    return {} if os.environ.get("TRITON_INTERPRET") == "1" else {"debug": debug}
