"""Every process group ccdiag starts, so that a termination can take them all down.

Commands run in sessions of their own (``start_new_session``) so that a deadline can kill a whole
tree with one ``killpg``. The price: a signal sent to ccdiag, or to the process group a Slurm prolog
runs in, no longer reaches them, and a ``nvidia-smi`` hung on a wedged GPU outlives the ccdiag that
started it. Each runner therefore registers the group it started here and forgets it once reaped;
:func:`kill_all` (called from the termination handler of the command line and by the daemon as it
stops) kills whatever is still registered, and once :func:`closing` was called a group registered
late (a probe thread that started a command while ccdiag was going down) is killed at once.

That covers every way ccdiag ends but one: SIGKILL (the OOM killer, ``kill -9``, a Slurm job's
hard limit) runs no handler. For that, every child is started with :func:`die_with_parent`: the
kernel sends it SIGKILL when the thread that started it ends (``PR_SET_PDEATHSIG``, Linux), so a
hung ``nvidia-smi`` dies with the ``check`` that started it. The thread that starts a command waits
for it, so the signal never comes early.

Listeners see each group as it is registered: a collection child of the daemon forwards them to its
parent, which can kill them even when the child itself is stuck in a C call and cannot.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Callable, Iterator

_lock = threading.Lock()
_groups: set[int] = set()
_closing = False
_starting = 0  # runners between "about to start" and "registered"
#: called as ``fn(pgid)`` when a group starts and ``fn(pgid, gone=True)`` when it was reaped
_listeners: list[Callable[..., None]] = []


#: prctl(2) option: the signal a process gets when its parent (the thread that forked it) ends
PR_SET_PDEATHSIG = 1
_prctl = None


def _load_prctl():
    global _prctl
    if _prctl is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _prctl = libc.prctl
        except (OSError, AttributeError):  # not Linux, or no prctl: the termination handler still kills
            _prctl = False
    return _prctl or None


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` (or a call right after ``fork``) that has the kernel SIGKILL the child when
    this process ends, however it ends; None where the system has no ``PR_SET_PDEATHSIG``."""
    prctl = _load_prctl()  # loaded here, in the parent: the child only calls it
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above: nobody would signal us
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


class Terminating(OSError):
    """ccdiag is going down: no command is started any more."""


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Around starting a command and registering its group, so that :func:`shutdown` can wait for
    a start under way instead of exiting while the new process is not yet registered."""
    global _starting
    with _lock:
        if _closing:
            raise Terminating("ccdiag is terminating; command not started")
        _starting += 1
    try:
        yield
    finally:
        with _lock:
            _starting -= 1


def register(pgid: int) -> None:
    """``pgid`` (the pid of a child started with ``start_new_session``) is now running."""
    with _lock:
        closing = _closing
        if not closing:
            _groups.add(pgid)
        listeners = list(_listeners)
    if closing:
        _kill(pgid)
        return
    for fn in listeners:
        try:
            fn(pgid)
        except Exception:  # noqa: BLE001 - a listener that fails must not fail the command
            pass


def forget(pgid: int) -> None:
    """The group's leader was reaped: nothing of it is ours to kill any more."""
    with _lock:
        _groups.discard(pgid)
        listeners = list(_listeners)
    for fn in listeners:
        try:
            fn(pgid, gone=True)
        except Exception:  # noqa: BLE001
            pass


def live() -> list[int]:
    with _lock:
        return sorted(_groups)


def add_listener(fn: Callable[..., None]) -> None:
    with _lock:
        _listeners.append(fn)


def _snapshot() -> list[int]:
    for _ in range(100):
        try:
            return list(_groups)
        except RuntimeError:  # changed size while copied (another thread registered a group)
            continue
    return []


def kill_all(closing: bool = False) -> int:
    """SIGKILL every registered group; with ``closing``, every group registered from now on too.
    Safe in a signal handler (no lock it could wait on: the set is copied without one). Returns how
    many groups were signalled."""
    global _closing
    if closing:
        _closing = True
    groups = _snapshot()
    for pgid in groups:
        _kill(pgid)
    return len(groups)


def shutdown(wait_s: float = 2.0) -> int:
    """From ordinary code (not a signal handler), as ccdiag exits: refuse new commands, wait up to
    ``wait_s`` for starts under way to register, and kill every group. Returns how many."""
    global _closing
    _closing = True
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        with _lock:
            if _starting == 0:
                break
        time.sleep(0.01)
    return kill_all(closing=True)


def reset_after_fork() -> None:
    """In a forked child: the parent's groups are not the child's to kill."""
    global _lock, _closing, _starting
    _lock = threading.Lock()
    _starting = 0
    _groups.clear()
    _listeners.clear()
    _closing = False
