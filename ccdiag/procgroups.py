"""Every process group ccdiag starts, so that a termination can take them all down.

Commands run in sessions of their own (``start_new_session``) so that a deadline can kill a whole
tree with one ``killpg``. The price: a signal sent to ccdiag, or to the process group a Slurm prolog
runs in, no longer reaches them, and a ``nvidia-smi`` hung on a wedged GPU outlives the ccdiag that
started it. Each runner therefore registers the group it started here and forgets it once reaped;
:func:`kill_all` (called from the termination handler of the command line and by the daemon as it
stops) kills whatever is still registered, and once :func:`closing` was called a group registered
late (a probe thread that started a command while ccdiag was going down) is killed at once.

Listeners see each group as it is registered: a collection child of the daemon forwards them to its
parent, which can kill them even when the child itself is stuck in a C call and cannot.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

_lock = threading.Lock()
_groups: set[int] = set()
_closing = False
#: called as ``fn(pgid)`` when a group starts and ``fn(pgid, gone=True)`` when it was reaped
_listeners: list[Callable[..., None]] = []


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


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


def reset_after_fork() -> None:
    """In a forked child: the parent's groups are not the child's to kill."""
    global _lock, _closing
    _lock = threading.Lock()
    _groups.clear()
    _listeners.clear()
    _closing = False
