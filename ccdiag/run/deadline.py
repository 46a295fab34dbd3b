"""A command's deadline counted from the process's start, and the guard that keeps its output
whole when the deadline comes first.

Why: ``--timeout`` is a promise to a Slurm prolog or a health check: a verdict (UNKNOWN if need
be) and its exit code within that many seconds. The stages (:mod:`ccdiag.run.stages`) bound the
probes and the judging, but not what comes before and after them: the interpreter starting,
opening a snapshot, building and writing the report. On a node with thousands of devices each
of those can take seconds under contention. So:

* the deadline counts from the moment the process started (:func:`process_started_at`): start-up
  and imports are part of the run;
* the guard holds a prepared fallback (one valid JSON document, or the quiet verdict lines) and,
  if the deadline comes before the command began writing its own output, writes the fallback and
  ends with the fallback's exit code (3, no verdict; 1 when a failure was already found, which a
  deadline never hides). Output is claimed once: the command's own or the fallback, never both,
  never half of either.

How: a thread in the same process cannot act on time. While the command parses or serialises a
large JSON member in C it holds the interpreter lock, and on a machine loaded five times over
one such call lasts seconds. So the guard is a process: :func:`arm` forks, the child carries on
with the command, and the parent (the process the caller started and waits for) only watches.
The child leaves each fallback in a shared anonymous file and says so in a short message; before
writing its own output it asks the parent, which agrees unless the deadline has come. At the
deadline the parent kills the child (SIGKILL: nothing of it can write afterwards; the commands
it started die with it, ``PR_SET_PDEATHSIG``), copies the last fallback to stdout and exits with
its code. Otherwise it exits with the child's exit status. Signals sent to the parent (SIGTERM
from Slurm or systemd) are passed on to the child, and the child dies with the parent. A child
that dies without claiming its output (killed by the OOM killer, say) also leaves the fallback.

The guard arms only where stdout is this process's file descriptor 1: a caller that captured
stdout (a library user, a test runner) keeps the command's ordinary behaviour (:class:`NoGuard`).
"""

from __future__ import annotations

import os
import select
import signal
import struct
import sys
import time
from types import FrameType
from typing import Callable

#: the guard acts this long before the deadline: ending the child, copying the fallback and the
#: caller reading the exit status take a little time too
GUARD_LEAD_S = 0.2
#: signals the watching parent passes on to the child
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

# messages from the child: kind, exit code, slot, length of the fallback in its slot, length of `why`
_FRAME = struct.Struct("!cBBQI")
_FALLBACK, _CLAIM = b"F", b"C"
_YES = b"Y"


def process_started_at() -> float:
    """The ``time.monotonic()`` value at which this process started (``/proc/self/stat``'s start
    time against the boot clock); now when that cannot be read."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
        # the fields after the command name (which may hold spaces and parentheses): state is
        # field 3, starttime field 22, in clock ticks since boot
        start_ticks = int(stat.rsplit(b")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    if not 0.0 <= age < 3600.0:  # a clock that disagrees: count from now
        return now
    return now - age


def stdout_is_fd1() -> bool:
    """Whether ``sys.stdout`` writes to this process's file descriptor 1 (not captured)."""
    try:
        return sys.stdout.fileno() == 1
    except (AttributeError, ValueError, OSError):
        return False


class NoGuard:
    """The guard's interface where none is armed (stdout captured): the command writes as ever,
    and its deadline counts from when it began (a library caller's or a test runner's process
    started long before)."""

    def __init__(self, started: float | None = None):
        self.started = time.monotonic() if started is None else started

    def set_fallback(self, text: str, code: int, why: str) -> None:
        pass

    def claim(self) -> bool:
        return True

    def finish(self, code: int) -> None:
        pass


class GuardClient:
    """The command's side (the child): leaves fallbacks for the watcher and claims the output."""

    def __init__(self, messages_fd: int, answers_fd: int, slots: tuple[int, int], started: float = 0.0):
        self._out, self._in, self._slots = messages_fd, answers_fd, slots
        self.started = started
        self._next = 0
        self._claimed = False

    def set_fallback(self, text: str, code: int, why: str) -> None:
        """What the watcher writes if the deadline comes now: ``text`` (ending in a newline), the
        exit code, and the line said on stderr (what the deadline interrupted)."""
        if self._claimed:
            return
        data = text.encode("utf-8", "replace")
        note = why.encode("utf-8", "replace")[:4096]
        slot = self._next  # never the slot the watcher may be reading: the other one was told last
        fd = self._slots[slot]
        os.ftruncate(fd, 0)
        _write_all(fd, data, pwrite=True)
        _write_all(self._out, _FRAME.pack(_FALLBACK, int(code) & 0xFF, slot, len(data), len(note)) + note)
        self._next = 1 - slot

    def claim(self) -> bool:
        """Ask to write the command's own output; the answer comes unless the deadline has come, in
        which case the watcher ends this process instead."""
        _write_all(self._out, _FRAME.pack(_CLAIM, 0, 0, 0, 0))
        answer = os.read(self._in, 1)
        self._claimed = answer == _YES
        return self._claimed

    def finish(self, code: int) -> None:
        """The output is written: end now with ``code`` (the watcher passes it on), without
        taking apart a heap of hundreds of MB object by object first."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _write_all(fd: int, data: bytes, pwrite: bool = False) -> None:
    view, offset = memoryview(data), 0
    while offset < len(data):
        n = os.pwrite(fd, view[offset:], offset) if pwrite else os.write(fd, view[offset:])
        offset += n


def watch(child: int, messages_fd: int, answers_fd: int, slots: tuple[int, int], deadline: float, *,
          lead_s: float = GUARD_LEAD_S, out_fd: int = 1, err_fd: int = 2,
          exit: Callable[[int], None] = os._exit) -> None:
    """The watcher's loop (the parent): until the child claims its output, exits, or the deadline
    (less ``lead_s``) comes; then ``exit`` with the child's status or the fallback's code."""
    told = _Told(answers_fd)
    while True:
        timeout = None if told.claimed else max(0.0, deadline - lead_s - time.monotonic())
        ready, _, _ = select.select([messages_fd], [], [], timeout)
        if not ready:  # the deadline
            # killed, not waited for: a child that did not claim its output never writes to stdout,
            # and the kernel tearing down hundreds of MB of its memory must not delay the answer
            _kill(child)
            told.refusing = True  # a claim read from here on is never answered
            _drain(messages_fd, told)  # a fallback told just now is the latest
            _write_fallback(told.fallback, slots, out_fd, err_fd)
            exit(told.fallback[0] if told.fallback else 3)
            return
        chunk = os.read(messages_fd, 65536)
        if chunk:
            told.feed(chunk)
            continue
        # the child is gone (or closed its end: it is ending)
        status = _reap(child)
        if told.claimed or told.fallback is None or os.WIFEXITED(status):
            exit(_exit_code(status))  # its output, or it ended on its own (bad input, an error): its word
            return
        _write_fallback(told.fallback, slots, out_fd, err_fd)  # killed before it wrote: the fallback
        exit(told.fallback[0])
        return


class _Told:
    """What the child said so far: its latest fallback (code, slot, length, why), and whether it
    claimed its output (answered at once)."""

    def __init__(self, answers_fd: int):
        self.answers_fd = answers_fd
        self.fallback: tuple[int, int, int, bytes] | None = None
        self.claimed = False
        self.refusing = False
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        self._pending += chunk
        while len(self._pending) >= _FRAME.size:
            kind, code, slot, length, note_len = _FRAME.unpack_from(self._pending)
            if len(self._pending) < _FRAME.size + note_len:
                break
            note = self._pending[_FRAME.size:_FRAME.size + note_len]
            self._pending = self._pending[_FRAME.size + note_len:]
            if kind == _FALLBACK:
                self.fallback = (code, slot, length, note)
            elif kind == _CLAIM and not self.claimed and not self.refusing:
                self.claimed = True
                try:
                    os.write(self.answers_fd, _YES)
                except OSError:
                    pass


def _drain(messages_fd: int, told: _Told) -> None:
    """Whatever the (dead) child had sent and was not read yet."""
    os.set_blocking(messages_fd, False)
    while True:
        try:
            chunk = os.read(messages_fd, 65536)
        except (BlockingIOError, OSError):
            return
        if not chunk:
            return
        told.feed(chunk)


def _kill(child: int) -> None:
    try:
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(child: int) -> int:
    while True:
        try:
            return os.waitpid(child, 0)[1]
        except ChildProcessError:
            return 0
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue


def _exit_code(status: int) -> int:
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return 3


def _write_fallback(fallback: tuple[int, int, int, bytes] | None, slots: tuple[int, int], out_fd: int,
                    err_fd: int) -> None:
    try:
        if fallback is None:
            os.write(err_fd, b"ccdiag: the deadline came before anything could be said\n")
            return
        _code, slot, length, why = fallback
        data = os.pread(slots[slot], length, 0)
        _write_all(out_fd, data)
        if why:
            os.write(err_fd, b"ccdiag: " + why + b"\n")
    except OSError:
        pass  # the reader went away: the exit code still says it


def arm(timeout_s: float) -> GuardClient | NoGuard:
    """Fork the watcher for a deadline ``timeout_s`` after this process started, where stdout is
    file descriptor 1, and return the command's side of it (``started``: when the deadline began
    to count); :class:`NoGuard`, counting from now, elsewhere or where the process cannot fork.
    In the parent this never returns: it watches, then exits."""
    if not stdout_is_fd1() or not hasattr(os, "fork"):
        return NoGuard()
    started = process_started_at()
    try:
        slots = (_anonymous_file(), _anonymous_file())
        up_r, up_w = os.pipe()
        down_r, down_w = os.pipe()
    except OSError:
        return NoGuard()
    sys.stdout.flush()
    sys.stderr.flush()
    from ccdiag.host import procgroups

    die_with_parent = procgroups.die_with_parent()
    try:
        child = os.fork()
    except OSError:
        return NoGuard()
    if child == 0:
        os.close(up_r)
        os.close(down_w)
        if die_with_parent is not None:
            die_with_parent()
        return GuardClient(up_w, down_r, slots, started)
    os.close(up_w)
    os.close(down_r)
    for sig in FORWARDED:
        try:
            signal.signal(sig, _forwarder(child))
        except (OSError, ValueError):
            pass
    try:
        watch(child, up_r, down_w, slots, started + timeout_s)
    finally:
        os._exit(3)  # never back into the command: its work is the child's


def _forwarder(child: int) -> Callable[[int, FrameType | None], None]:
    """The signal handler that passes each signal it gets on to ``child``."""
    return lambda signum, _frame: _forward(child, signum)


def _forward(child: int, signum: int) -> None:
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass


def _anonymous_file() -> int:
    """A file without a name both processes share (a fallback can be tens of MB)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("ccdiag-fallback", os.MFD_CLOEXEC)
    import tempfile

    fh = tempfile.TemporaryFile()
    return os.dup(fh.fileno())


__all__ = ["FORWARDED", "GUARD_LEAD_S", "GuardClient", "NoGuard", "arm", "process_started_at",
           "stdout_is_fd1", "watch"]
