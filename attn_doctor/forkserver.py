"""Children forked from one process that imported the heavy libraries once.

Importing torch, triton and transformers takes seconds, and a fresh Python per case pays it again
every time. The fork server imports them once, before anything initialises CUDA, then forks one
child per case. Each child is still what ``isolation.run_child`` gives: its own process and
process group, its own output files, a timeout that kills the group, its exit status or signal.
Where fork is not safe (not Linux, CUDA initialised by an import, a server that dies) the
launcher runs fresh processes instead, and its ``note`` says why.

Protocol, JSON lines over the server's stdin and stdout: the server says
``{"ready": {...}}`` once; for each ``{"id", "entry", "args", "stdout", "stderr"}`` it answers
``{"id", "pid"}`` and, when that child has exited, ``{"id", "status"}`` (a return code as
subprocess gives it: negative for a signal). The entry module's ``main(args)`` is the child.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from attn_doctor.isolation import ChildOutput, kill_group, last_line, run_child, tail

FORK_SETTING = "ATTN_DOCTOR_FORK"  # "0": always fresh processes
_KILL_GRACE_S = 10.0  # after SIGKILL, how long the server may take to report the exit


class ServerGone(RuntimeError):
    """The fork server exited; what it was running has no exit status."""


# ---- the server side: python -m attn_doctor.forkserver MODULE... ------------------------------


def serve(preload: list[str]) -> None:
    """Import ``preload``, say ready, then fork a child per request until stdin closes."""
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # whatever an import prints goes to the server's stderr, not into the protocol
    os.close(devnull)
    ready = _preload(preload)
    wakeup_read, wakeup_write = os.pipe()
    for fd in (wakeup_read, wakeup_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(replies, {"ready": ready})
    running: dict[int, int] = {}  # pid -> request id
    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    selector.register(wakeup_read, selectors.EVENT_READ)
    pending = b""
    protocol_fds = (requests, replies, wakeup_read, wakeup_write)
    while True:
        for key, _ in selector.select():
            if key.fd == wakeup_read:
                while _drained(wakeup_read):
                    pass
                _reap(running, replies)
                continue
            data = os.read(requests, 65536)
            if not data:  # the doctor is gone: so are its children
                for pid in running:
                    kill_group(pid)
                os._exit(0)
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    _child(request, protocol_fds)
                running[pid] = request["id"]
                _send(replies, {"id": request["id"], "pid": pid})
        _reap(running, replies)


def _preload(modules: list[str]) -> dict[str, Any]:
    """Import what every child would import; a failure is the child's to report, not ours."""
    imported, failed = [], {}
    started = time.perf_counter()
    for name in modules:
        try:
            importlib.import_module(name)
            imported.append(name)
        except Exception as exc:  # noqa: BLE001 - the child imports it again and reports it properly
            failed[name] = f"{type(exc).__name__}: {exc}"[:300]
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    initialised = bool(
        cuda is not None and callable(getattr(cuda, "is_initialized", None)) and cuda.is_initialized()
    )
    return {
        "imported": imported,
        "failed": failed,
        "seconds": round(time.perf_counter() - started, 3),
        "cuda_initialised": initialised,
    }


def _child(request: dict[str, Any], protocol_fds: tuple[int, ...]) -> NoReturn:
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in protocol_fds:
            os.close(fd)
        for target, path in ((1, request["stdout"]), (2, request["stderr"])):
            opened = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.dup2(opened, target)
            os.close(opened)
        sys.argv = [request["entry"], *request["args"]]
        returned = importlib.import_module(request["entry"]).main(request["args"])
        code = returned if isinstance(returned, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # noqa: BLE001 - the child's own traceback is its evidence
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _reap(running: dict[int, int], replies: int) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        request_id = running.pop(pid, None)
        if request_id is not None:
            _send(replies, {"id": request_id, "status": os.waitstatus_to_exitcode(status)})


def _drained(fd: int) -> bool:
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _send(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


# ---- the doctor's side -------------------------------------------------------------------------


@dataclass
class _Request:
    pid: int | None = None
    status: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


class ForkServer:
    """One running server; ``run`` is safe to call from many threads at once."""

    def __init__(self, preload: list[str], env: dict[str, str]) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="attn-doctor-")
        self._stderr = open(Path(self._folder.name) / "server.err", "w+b")  # noqa: SIM115 - closed in close()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "attn_doctor.forkserver", *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,
        )
        self._lock = threading.Lock()
        self._requests: dict[int, _Request] = {}
        self._next_id = 0
        self._ready: dict[str, Any] | None = None
        self._got_ready = threading.Event()
        self._gone = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """What the server imported; ServerGone when it died or hung on the way."""
        if not self._got_ready.wait(timeout_s):
            self.close()
            raise ServerGone(f"it had not finished importing after {timeout_s:g} s")
        if self._ready is None:
            self._stderr.seek(0)
            said = last_line(self._stderr.read().decode("utf-8", errors="replace"))
            raise ServerGone(
                f"it exited while importing (code {self._process.wait()}): {said or 'no output'}"
            )
        return self._ready

    def run(self, entry: str, args: list[str], timeout_s: float) -> ChildOutput:
        """``entry.main(args)`` in a forked child, like ``isolation.run_child`` in a fresh one."""
        out_fd, out_path = tempfile.mkstemp(dir=self._folder.name, suffix=".out")
        err_fd, err_path = tempfile.mkstemp(dir=self._folder.name, suffix=".err")
        os.close(out_fd)
        os.close(err_fd)
        try:
            request = self._submit(entry, args, out_path, err_path)
            timed_out = not request.done.wait(timeout_s)
            if timed_out and request.pid is not None:
                kill_group(request.pid)
                request.done.wait(_KILL_GRACE_S)
            if request.status is None:
                if request.pid is not None:
                    kill_group(request.pid)
                raise ServerGone("it exited while a child was running")
            return ChildOutput(request.status, _tail(out_path), _tail(err_path), timed_out)
        finally:
            for path in (out_path, err_path):
                Path(path).unlink(missing_ok=True)

    def close(self) -> None:
        """Closing its stdin ends the server, which kills any child still running."""
        with self._lock:
            self._gone = True
            if self._process.stdin and not self._process.stdin.closed:
                with contextlib.suppress(OSError):
                    self._process.stdin.close()
        try:
            self._process.wait(timeout=_KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            kill_group(self._process.pid)
            self._process.wait()
        self._stderr.close()
        self._folder.cleanup()

    def _submit(self, entry: str, args: list[str], out_path: str, err_path: str) -> _Request:
        request = _Request()
        with self._lock:
            if self._gone or self._process.stdin is None:
                raise ServerGone("it had already exited")
            self._next_id += 1
            self._requests[self._next_id] = request
            message = {
                "id": self._next_id,
                "entry": entry,
                "args": args,
                "stdout": out_path,
                "stderr": err_path,
            }
            try:
                self._process.stdin.write((json.dumps(message) + "\n").encode())
                self._process.stdin.flush()
            except OSError as exc:
                raise ServerGone("it stopped reading requests") from exc
        return request

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "ready" in message:
                self._ready = message["ready"]
                self._got_ready.set()
                continue
            request = self._requests.get(message.get("id"))
            if request is None:
                continue
            if "pid" in message:
                request.pid = message["pid"]
            if "status" in message:
                request.status = message["status"]
                request.done.set()
        with self._lock:
            self._gone = True
        self._got_ready.set()
        for request in self._requests.values():
            request.done.set()


def _tail(path: str) -> str:
    with open(path, "rb") as handle:
        return tail(handle)


class Launcher:
    """Children for one run of repros or probes: forked from a server that imported ``preload``,
    or fresh processes where that is not possible. ``note`` says which, and why."""

    def __init__(self, env: dict[str, str], preload: list[str], fork: bool = True, timeout_s: float = 300.0):
        self._env = env
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._server: ForkServer | None = None
        self._checked = False
        self._closed = False
        self.note = "each child in a fresh process"
        reason = _why_not_fork(fork)
        if reason:
            self.note += f" ({reason})"
            self._checked = True
        else:
            self._server = ForkServer(preload, env)

    def run(self, entry: str, args: list[str], timeout_s: float) -> ChildOutput:
        server = self._ready_server()
        if server is not None:
            try:
                return server.run(entry, args, timeout_s)
            except ServerGone as gone:
                if self._closed:  # closed under it (Ctrl-C): its child is killed, nothing runs again
                    raise
                self._give_up(f"the fork server failed: {gone}; the rest ran in fresh processes")
        return run_child(fresh_command(entry, args), self._env, timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            server, self._server = self._server, None
        if server is not None:
            server.close()

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _ready_server(self) -> ForkServer | None:
        with self._lock:
            if self._checked or self._server is None:
                return self._server
            self._checked = True
            try:
                ready = self._server.wait_ready(self._timeout_s)
            except ServerGone as gone:
                self._server = None
                self.note += f" (the fork server failed: {gone})"
                return None
            if ready["cuda_initialised"]:
                self._server.close()
                self._server = None
                self.note += " (importing the stack initialised CUDA, after which fork is unsafe)"
                return None
            libraries = [name for name in ready["imported"] if not name.startswith("attn_doctor")]
            self.note = (
                f"children forked from one process that imported {', '.join(libraries) or 'nothing'}"
                f" in {ready['seconds']:.2f} s"
            )
            return self._server

    def _give_up(self, why: str) -> None:
        with self._lock:
            server, self._server = self._server, None
            self.note = f"each child in a fresh process ({why})"
        if server is not None:
            server.close()


def fresh_command(entry: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", entry, *args]


def _why_not_fork(fork: bool) -> str | None:
    if not fork:
        return "asked for"
    if os.environ.get(FORK_SETTING) == "0":
        return f"{FORK_SETTING}=0"
    if not sys.platform.startswith("linux"):
        return f"fork is only used on Linux, not {sys.platform}"
    return None


if __name__ == "__main__":
    serve(sys.argv[1:])
