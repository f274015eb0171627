"""A child for the launcher tests: ``main([what])`` says where it runs or what its environment
holds, or spawns a grandchild and hangs, or kills the fork server it was forked from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main(args: list[str]) -> int:
    (what,) = args
    if what == "where":
        import tests.fork_children.preloaded  # noqa: F401 - in the server's sys.modules already when forked

        print(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "ppid": os.getppid()}))
        print("to stderr", file=sys.stderr)
        return 5
    if what == "raise":  # an entry that fails with an exception of its own
        raise RuntimeError("the entry failed")
    if what == "argv":  # what a child's own argument parsing sees
        print(json.dumps(sys.argv[1:]))
        return 0
    if what == "environment":  # the variable only the launcher's environment sets
        print(os.environ.get("ATTN_DOCTOR_TEST_LAUNCHER_ONLY", "(not set)"))
        return 0
    if what == "grandchild-then-hang":
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(json.dumps({"grandchild": grandchild.pid}), flush=True)
        time.sleep(600)
    if what == "kill-the-server":  # as the OOM killer would: the server dies under a running child
        if "attn_doctor.forkserver" in sys.orig_argv:  # forked: the parent is the server, not a test
            os.kill(os.getppid(), 9)
            time.sleep(600)
        print("fresh")
        return 0
    raise SystemExit(f"unknown {what}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
