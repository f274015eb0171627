"""`attn-doctor run -- CMD` that gets signal N (argv[1]) the instant CMD has started, before CMD's
group is the terminal's foreground: a Ctrl-C typed right then reaches the wrapper's group alone.
Only the moment is arranged here (a real kill once the real Popen of CMD returns); the wrapper is
the real one."""

import os
import signal
import subprocess
import sys

from attn_doctor import wrap

started = subprocess.Popen


class SignalledOnceStarted(started):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        subprocess.Popen = started  # the command's start only, not the diagnosis' own children
        os.kill(os.getpid(), signal.Signals(int(sys.argv[1])))


subprocess.Popen = SignalledOnceStarted
sys.exit(wrap.main(sys.argv[2:]))
