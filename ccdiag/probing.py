"""Runs probes side by side, each under its own deadline, so one slow or broken probe never
hides the others.

A probe module (``ccdiag.probes.<name>``) exposes ``NAME``, ``TIMEOUT_S`` and
``collect(host) -> <frozen dataclass>``. It raises :class:`ProbeUnavailable` when its subsystem is
simply not there (no driver, no InfiniBand); any other exception is a bug, isolated here and shown
as that probe's failure. A probe still running at its deadline is abandoned on its daemon thread
(Python cannot kill a thread blocked in a read of a wedged device) and reported as ``timeout``.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from ccdiag.host import Host

#: every probe, in the order reports list them
ALL_PROBES = ("system", "pcie", "nvml", "infiniband", "netdev", "kmsg", "smi_topo", "platform")

OK = "ok"  # read completely
PARTIAL = "partial"  # data, with per-device/per-file errors beside it
UNAVAILABLE = "unavailable"  # the subsystem is absent (no driver, no IB): a fact, not a failure
FAILED = "failed"  # the probe itself raised (a ccdiag bug or a host far outside expectations)
TIMEOUT = "timeout"  # still running at its deadline; abandoned


class ProbeUnavailable(Exception):
    """Raised by a probe whose subsystem is absent; the message says what was looked at."""


@dataclass(frozen=True)
class ProbeRun:
    """The outcome of one probe: its status, how long it took, its data (or None), and why not."""

    name: str
    status: str
    duration_s: float
    data: Any = None
    error: str | None = None

    @property
    def usable(self) -> bool:
        return self.data is not None and self.status in (OK, PARTIAL)


def _has_errors(obj: Any, depth: int = 0) -> bool:
    """True when ``obj`` or any dataclass nested in it (a GPU, a port, a link) carries read errors."""
    if depth > 6 or not dataclasses.is_dataclass(obj):
        return False
    if getattr(obj, "errors", ()):
        return True
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        items = value if isinstance(value, (tuple, list)) else (value,)
        if any(_has_errors(v, depth + 1) for v in items):
            return True
    return False


def _status_of(data: Any) -> str:
    return PARTIAL if _has_errors(data) else OK


def run_one(host: Host, name: str) -> ProbeRun:
    """Run one probe in the calling thread (no deadline). Used by :func:`run_probes`' workers."""
    start = time.monotonic()
    try:
        module = importlib.import_module(f"ccdiag.probes.{name}")
        data = module.collect(host)
    except ProbeUnavailable as exc:
        return ProbeRun(name, UNAVAILABLE, time.monotonic() - start, None, str(exc))
    except Exception as exc:  # noqa: BLE001 - isolation is the point
        return ProbeRun(name, FAILED, time.monotonic() - start, None, f"{type(exc).__name__}: {exc}")
    return ProbeRun(name, _status_of(data), time.monotonic() - start, data, None)


def probe_timeout(name: str) -> float:
    try:
        return float(importlib.import_module(f"ccdiag.probes.{name}").TIMEOUT_S)
    except Exception:  # noqa: BLE001
        return 10.0


def run_probes(host: Host, names: Iterable[str] | None = None, deadline: float | None = None,
               timeouts: dict[str, float] | None = None) -> dict[str, ProbeRun]:
    """Run probes concurrently. ``deadline`` is an absolute ``time.monotonic()`` bound for all of
    them; each probe also has its own ``TIMEOUT_S`` (overridable through ``timeouts``)."""
    names = list(names or ALL_PROBES)
    results: dict[str, ProbeRun] = {}
    threads: dict[str, tuple[threading.Thread, float, float]] = {}
    for name in names:
        limit = (timeouts or {}).get(name, probe_timeout(name))

        def work(n: str = name) -> None:
            results[n] = run_one(host, n)

        t = threading.Thread(target=work, name=f"probe-{name}", daemon=True)
        started = time.monotonic()
        t.start()
        threads[name] = (t, started, limit)
    for name, (t, started, limit) in threads.items():
        end = started + limit
        if deadline is not None:
            end = min(end, deadline)
        t.join(max(0.0, end - time.monotonic()))
        if t.is_alive() or name not in results:
            results[name] = ProbeRun(name, TIMEOUT, time.monotonic() - started, None,
                                     f"probe {name} did not finish within {end - started:.1f}s; abandoned")
    return {n: results[n] for n in names}
