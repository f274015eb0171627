"""A command for `attn-doctor run` tests: the first argument picks how it behaves."""

import os
import signal
import subprocess
import sys
import time

how = sys.argv[1]
if how == "succeed":
    print("step 1/1 done; loss 0.1")
elif how == "lines-then-fail":  # N ordinary lines, then exit 2: output, but nothing known in it
    for step in range(1, int(sys.argv[2]) + 1):
        print(f"step {step} done; loss 0.1")
    sys.exit(2)
elif how == "segfault":
    print("about to fault", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
elif how == "isatty":
    print(f"stdout {sys.stdout.isatty()} stderr {sys.stderr.isatty()} stdin {sys.stdin.isatty()}", flush=True)
    sys.exit(3)
elif how == "flood":
    block = b"x" * 1023 + b"\n"
    for _ in range(int(sys.argv[2])):
        sys.stdout.buffer.write(block)
elif how == "close-streams-then-work":
    os.close(1)
    os.close(2)
    time.sleep(1)
    sys.exit(4)
elif how == "grandchild":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print("left a grandchild holding stdout", flush=True)
    sys.exit(5)
elif how == "wait-for-signal":
    signal.signal(signal.SIGTERM, lambda *_: (print("got SIGTERM", flush=True), sys.exit(143)))
    print("ready", flush=True)
    time.sleep(60)
    sys.exit(0)
elif how == "device-assert":
    sys.stderr.write(
        "RuntimeError: CUDA error: device-side assert triggered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    )
    sys.exit(0 if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1" else 1)
