"""A command's deadline counted from the process's start, and the guard that keeps its output
whole when the deadline comes first.

Why: ``--timeout`` is a promise to a Slurm prolog or a health check: a verdict (UNKNOWN if need
be) and its exit code within that many seconds. The stages (:mod:`ccdiag.run.stages`) bound the
probes and the judging, but not what comes before and after them: the interpreter starting,
opening a snapshot, building and writing the report. On a node with thousands of devices each
of those can take seconds under contention. So:

* the deadline counts from the moment the process started (:func:`process_started_at`), not
  from the moment the command's code began: start-up and imports are part of the run;
* an :class:`OutputGuard` holds a prepared fallback (one valid JSON document, or one line of
  text) and, if the deadline comes before the command began writing its own output, writes the
  fallback and ends the process with the fallback's exit code (3, no verdict; 1 when a failure
  was already found, which a deadline never hides). Output is claimed once: the command's own
  or the fallback, never both, never half of either.

The guard watches from a thread of its own and needs the interpreter lock to act, so it can be
late by the longest stretch of C code that holds the lock (parsing or serialising one large JSON
member); :data:`GUARD_LEAD_S` is how much before the deadline it acts. It arms only where stdout
is this process's file descriptor 1: a caller that captured stdout (a library user, a test
runner) keeps the command's ordinary behaviour.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

#: the guard acts this long before the deadline (see the module docstring): ending the process
#: and its parent reading the exit status take some time too
GUARD_LEAD_S = 0.3


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


class OutputGuard:
    """Writes a prepared fallback and ends the process at ``deadline`` (a ``time.monotonic()``
    value) unless the command claimed its output first (:meth:`claim`).

    ``exit`` ends the process (``os._exit``: nothing left to run can delay it); a test passes its
    own and then sees :meth:`claim` return False."""

    def __init__(self, deadline: float, *, fd: int = 1, exit: Callable[[int], None] = os._exit,
                 lead_s: float = GUARD_LEAD_S, on_fire: Callable[[], None] | None = None):
        self.deadline = deadline
        self._fd = fd
        self._exit = exit
        self._lead_s = lead_s
        self._on_fire = on_fire
        self._fallback = b""
        self._code = 3
        self._why = ""
        self._lock = threading.Lock()
        self._claimed = False
        self._fired = False
        self._stop = threading.Event()
        self._gone = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def fired(self) -> bool:
        return self._fired

    def set_fallback(self, text: str, code: int, why: str) -> None:
        """What to write at the deadline (``text``, ending in a newline), the exit code, and the
        one line said on stderr (``why``: what the deadline interrupted)."""
        data = text.encode("utf-8", "replace")
        with self._lock:
            self._fallback, self._code, self._why = data, int(code), why

    def start(self) -> "OutputGuard":
        self._thread = threading.Thread(target=self._watch, name="ccdiag-deadline", daemon=True)
        self._thread.start()
        return self

    def claim(self) -> bool:
        """The command is about to write its output: True when it may (the guard stands down);
        when the guard has already written the fallback, waits for the process to end (False
        only where ``exit`` returned, in a test)."""
        with self._lock:
            if not self._fired:
                self._claimed = True
                self._stop.set()
                return True
        self._gone.wait()
        return False

    def stop(self) -> None:
        """Stand down without writing (the command wrote nothing to stdout, or failed)."""
        with self._lock:
            self._claimed = True
        self._stop.set()

    def _watch(self) -> None:
        fire_at = self.deadline - self._lead_s
        while not self._stop.is_set():
            left = fire_at - time.monotonic()
            if left <= 0:
                break
            self._stop.wait(left)
        with self._lock:
            if self._claimed or self._stop.is_set():
                return
            self._fired = True
            data, code, why = self._fallback, self._code, self._why
        try:
            if self._on_fire is not None:
                self._on_fire()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            if why:
                os.write(2, f"ccdiag: {why}\n".encode("utf-8", "replace"))
        except OSError:
            pass  # the reader went away: the exit code still says it
        try:
            self._exit(code)
        finally:
            self._gone.set()


class NoGuard:
    """The guard's interface where none is armed (stdout captured): the command writes as ever."""

    fired = False

    def set_fallback(self, text: str, code: int, why: str) -> None:
        pass

    def claim(self) -> bool:
        return True

    def stop(self) -> None:
        pass


def arm(deadline: float, on_fire: Callable[[], None] | None = None) -> OutputGuard | NoGuard:
    """A started :class:`OutputGuard` for ``deadline`` when stdout is file descriptor 1, else
    :class:`NoGuard`."""
    if not stdout_is_fd1():
        return NoGuard()
    return OutputGuard(deadline, on_fire=on_fire).start()


__all__ = ["GUARD_LEAD_S", "NoGuard", "OutputGuard", "arm", "process_started_at", "stdout_is_fd1"]
