"""Run a command as if the wrapper were not there, while keeping the tail of what it prints.

stdin is the wrapper's own; each of stdout and stderr goes through a pseudo-terminal where the
wrapper's is a terminal (colours and progress bars stay on, ``isatty()`` stays true) and through
a pipe otherwise; every byte is written on as soon as it is read. Where the wrapper's stream is a
regular file (a SLURM ``--output``), the command writes to that file itself and its tail is read
back once it has exited: no copying at all. The command runs in its own process group, which
gets every signal the wrapper gets (Ctrl-C, SLURM's SIGTERM), also one that comes as it starts
(held until it can be forwarded); on a terminal that group is made the foreground, so the
terminal's own Ctrl-C reaches the command once and reading stdin does not stop it. Only the
standard library: this runs before anything heavy.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pty
import selectors
import signal
import stat
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from attn_doctor.wrap.tail import OutputTail

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
FILE_TAIL_BYTES = 8 * 1024 * 1024  # read back from an output file: enough for each rank's last words
DRAIN_AFTER_EXIT_S = 1.0  # a grandchild may hold the streams open: read what is there, then stop
PIPE_BYTES = CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Finished:
    returncode: int  # negative: killed by that signal, as subprocess reports it
    tail: OutputTail


class CommandNotFound(Exception):
    pass


def run(command: list[str], env: dict[str, str] | None = None) -> Finished:
    """Run ``command`` to the end with its output passed through; its exit status and tail."""
    tail = OutputTail()
    with contextlib.ExitStack() as stack:
        streams = [stack.enter_context(_stream(fd)) for fd in (1, 2)]
        mask = stack.enter_context(_held(FORWARDED))
        try:
            child = subprocess.Popen(
                command,
                stdout=streams[0].child_end,
                stderr=streams[1].child_end,
                env=env,
                preexec_fn=lambda: _own_group(mask),  # noqa: PLW1509 - single-threaded here
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
            raise CommandNotFound(f"{command[0]}: {error.strerror or error}") from None
        for stream in streams:
            stream.close_child_end()
        with _foreground(child.pid), _forwarding(child.pid):
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # what came meanwhile goes on now
            _pump([stream for stream in streams if stream.read_end >= 0], child, tail)
        read_back = set()
        for stream in streams:
            if stream.file_start is not None and _identity(stream.target) not in read_back:
                read_back.add(_identity(stream.target))
                _read_back(stream.target, stream.file_start, tail)
    return Finished(child.returncode, tail)


@dataclass
class _Stream:
    target: int  # our fd the bytes go to
    read_end: int  # -1: the command writes to our file itself
    child_end: int
    file_start: int | None = None  # that file's size when the command started

    def close_child_end(self) -> None:
        if self.child_end >= 0 and self.read_end >= 0:
            os.close(self.child_end)
            self.child_end = -1


@contextlib.contextmanager
def _stream(target: int) -> Iterator[_Stream]:
    if _regular_file(target):
        yield _Stream(target, -1, target, os.fstat(target).st_size)
        return
    if os.isatty(target):
        read_end, child_end = pty.openpty()
        _copy_window_size(target, child_end)
        attributes = termios.tcgetattr(child_end)
        attributes[1] &= ~termios.OPOST  # bytes as written: our own terminal does the \n -> \r\n
        termios.tcsetattr(child_end, termios.TCSANOW, attributes)
    else:
        read_end, child_end = os.pipe()
        with contextlib.suppress(OSError, AttributeError):  # fewer, larger reads of a flood (Linux)
            fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    stream = _Stream(target, read_end, child_end)
    try:
        yield stream
    finally:
        stream.close_child_end()
        os.close(read_end)


def _pump(streams: list[_Stream], child: subprocess.Popen[bytes], tail: OutputTail) -> None:
    wake_read, wake_write = os.pipe()
    waiter = threading.Thread(target=_wait, args=(child, wake_write), daemon=True)
    waiter.start()
    selector = selectors.DefaultSelector()
    for stream in streams:
        selector.register(stream.read_end, selectors.EVENT_READ, stream)
    selector.register(wake_read, selectors.EVENT_READ, None)
    open_streams, deadline = len(streams), None
    try:
        while open_streams:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = selector.select(timeout)
            if not events and deadline is not None:
                break  # the command is gone; whoever still holds its streams is not waited for
            for key, _ in events:
                if key.data is None:
                    selector.unregister(wake_read)
                    deadline = time.monotonic() + DRAIN_AFTER_EXIT_S
                    continue
                data = _read(key.fd)
                if not data:
                    selector.unregister(key.fd)
                    open_streams -= 1
                    continue
                tail.feed(data)
                _write_all(key.data.target, data)
        waiter.join()
    finally:
        selector.close()
        os.close(wake_read)
        os.close(wake_write)


def _regular_file(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _read_back(fd: int, start: int, tail: OutputTail) -> None:
    """The end of what the command wrote to our output file (readable again through /proc)."""
    try:
        reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    except OSError:  # not readable to us: no tail (the command's own output is untouched anyway)
        with contextlib.suppress(OSError):
            tail.total += max(0, os.fstat(fd).st_size - start)  # it did print: not "nothing"
        return
    try:
        end = os.fstat(reader).st_size
        begin = max(start, end - FILE_TAIL_BYTES)
        tail.total += begin - start
        while begin < end:
            data = os.pread(reader, min(CHUNK, end - begin), begin)
            if not data:
                break
            tail.feed(data)
            begin += len(data)
    finally:
        os.close(reader)


def _wait(child: subprocess.Popen[bytes], wake: int) -> None:
    child.wait()
    os.write(wake, b"x")


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, CHUNK)
    except OSError as error:
        if error.errno == errno.EIO:  # a pseudo-terminal whose other side is all closed
            return b""
        raise


def _write_all(fd: int, data: bytes) -> None:
    """On to our own stream; if that is gone (a closed pipe), keep reading the command anyway."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            return
        except BlockingIOError:
            time.sleep(0.001)
            continue
        view = view[written:]


def _copy_window_size(source: int, target: int) -> None:
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(source, termios.TIOCGWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
        fcntl.ioctl(target, termios.TIOCSWINSZ, size)


@contextlib.contextmanager
def _held(numbers: tuple[signal.Signals, ...]) -> Iterator[set[int | signal.Signals]]:
    """``numbers`` blocked until the command's group is the foreground and gets them: a Ctrl-C typed
    as the command starts would otherwise reach the wrapper alone (the command's group is not yet
    the terminal's), stop it with a KeyboardInterrupt and leave the command running unseen.
    Yields the mask before; once forwarding is in place, setting it back delivers what was held."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, numbers)
    try:
        yield before
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _own_group(mask: set[int | signal.Signals]) -> None:
    """In the command, before exec: its own process group, and the signal mask the wrapper had."""
    os.setpgrp()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextlib.contextmanager
def _forwarding(pgid: int) -> Iterator[None]:
    def forward(number: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, number)

    previous = {number: signal.signal(number, forward) for number in FORWARDED}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextlib.contextmanager
def _foreground(pgid: int) -> Iterator[None]:
    """On a terminal where we are the foreground job, the command's group takes our place."""
    terminal = 0 if os.isatty(0) else -1
    ours = os.getpgrp()
    if terminal < 0 or _foreground_group(terminal) != ours:
        yield
        return
    with _ignoring(signal.SIGTTOU):  # a background group may not set the foreground otherwise
        _set_foreground(terminal, pgid)
    try:
        yield
    finally:
        with _ignoring(signal.SIGTTOU):
            _set_foreground(terminal, ours)


def _foreground_group(fd: int) -> int:
    try:
        return os.tcgetpgrp(fd)
    except OSError:
        return -1


def _set_foreground(fd: int, pgid: int) -> None:
    with contextlib.suppress(OSError):
        os.tcsetpgrp(fd, pgid)


@contextlib.contextmanager
def _ignoring(number: int) -> Iterator[None]:
    previous = signal.signal(number, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(number, previous)
