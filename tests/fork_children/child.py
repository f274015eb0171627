"""A child for the launcher tests: ``main([what])`` says where it runs, or spawns a grandchild
and hangs, or reports a preloaded module it did not import itself."""

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
    if what == "grandchild-then-hang":
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(json.dumps({"grandchild": grandchild.pid}), flush=True)
        time.sleep(600)
    raise SystemExit(f"unknown {what}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
