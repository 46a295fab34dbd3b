"""What each thread is waiting for at the host door, said by the door itself.

When a probe is abandoned at its deadline, the finding should name the call it was stuck in
(``NVML call nvmlDeviceGetUUID(6)``, ``command `nvidia-smi topo -m```), not only "the nvml probe
timed out". The door's blocking operations (a command, a file or kernel-log read, an NVML call)
announce themselves here on entry and withdraw on exit; :func:`doing` answers for any thread. No
stack inspection, no dependence on how the door's code names its variables.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
#: thread ident -> the door operations it is inside, outermost first
_doing: dict[int, list[object]] = {}


def enter(what: object) -> None:
    """The calling thread starts waiting in ``what`` (pair with :func:`leave` in a ``finally``)."""
    ident = threading.get_ident()
    with _lock:
        _doing.setdefault(ident, []).append(what)


def leave() -> None:
    """The calling thread's innermost operation ended."""
    ident = threading.get_ident()
    with _lock:
        stack = _doing.get(ident)
        if stack:
            stack.pop()
            if not stack:
                del _doing[ident]


def doing(thread_ident: int | None) -> str | None:
    """The innermost door operation thread ``thread_ident`` is waiting in, or None."""
    if thread_ident is None:
        return None
    with _lock:
        stack = _doing.get(thread_ident)
        return str(stack[-1]) if stack else None  # an entry may be an object that words itself when read


__all__ = ["doing", "enter", "leave"]
