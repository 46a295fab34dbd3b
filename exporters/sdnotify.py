"""systemd's notify protocol, written directly (one datagram on ``$NOTIFY_SOCKET``).

``READY=1`` once the endpoint serves its first cycle (``Type=notify`` units wait for it),
``WATCHDOG=1`` while the collection loop makes progress (``WatchdogSec=`` restarts a daemon whose
loop wedged), ``RELOADING=1``/``READY=1`` around a SIGHUP reload and ``STOPPING=1`` on the way out.
Without ``$NOTIFY_SOCKET`` every call is a no-op, so the daemon runs the same outside systemd.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping


def notify(state: str, env: dict[str, str] | None = None) -> bool:
    """Send ``state`` (``"READY=1\\nSTATUS=..."``); False when there is no socket or it failed."""
    addr = (env if env is not None else os.environ).get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):  # abstract namespace
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(addr)
            sock.sendall(state.encode())
        return True
    except OSError:
        return False


def monotonic_usec() -> int:
    """``MONOTONIC_USEC=`` value systemd wants with ``RELOADING=1`` (CLOCK_MONOTONIC)."""
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1_000_000)


def watchdog_interval(env: dict[str, str] | None = None) -> float | None:
    """Seconds between watchdog pings (half of ``WatchdogSec``), or None without a watchdog."""
    environ: Mapping[str, str] = env if env is not None else os.environ
    usec = environ.get("WATCHDOG_USEC")
    if not usec or not usec.isdigit():
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2e6
