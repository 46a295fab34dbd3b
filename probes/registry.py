"""The probe registry, and running probes side by side, each under its own deadline, so one slow
or broken probe never hides the others.

A probe module (``ccdiag.probes.<name>``) exposes ``NAME``, ``TIMEOUT_S`` and
``collect(host) -> <frozen dataclass>``, and registers itself by decorating ``collect`` with
:func:`probe` (its place in reports, what it reads in words, whether its counters are judged over
a window). Every probe list (:data:`ALL_PROBES`, the counter probes, the daemon's and the
snapshot's choices, the checks' ``needs=``) derives from that registry, so adding a probe is one
new file in ``probes/``. ``collect`` raises :class:`ProbeUnavailable` when its subsystem is simply
not there (no driver, no InfiniBand); any other exception is a bug, isolated here and shown as that
probe's failure. A probe still running at its deadline is abandoned on its daemon thread (Python
cannot kill a thread blocked in a read of a wedged device) and reported as ``timeout``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ccdiag.host.door import Host
from ccdiag.core.probenames import (PROBE_INFINIBAND, PROBE_KMSG, PROBE_NETDEV, PROBE_NVML, PROBE_PCIE,
                               PROBE_SMI_TOPO, PROBE_SYSTEM)

OK = "ok"  # read completely
PARTIAL = "partial"  # data, with per-device/per-file errors beside it
UNAVAILABLE = "unavailable"  # the subsystem is absent (no driver, no IB): a fact, not a failure
FAILED = "failed"  # the probe itself raised (a ccdiag bug or a host far outside expectations)
TIMEOUT = "timeout"  # still running at its deadline; abandoned
#: how a failed run's error starts when the door's record holds nothing the probe reads
NOT_RECORDED_PREFIX = "not recorded: "


class ProbeUnavailable(Exception):
    """Raised by a probe whose subsystem is absent; the message says what was looked at."""


# -- the registry --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeSpec:
    """One registered probe. ``order``: its place in reports; ``what``: what it reads, in words for
    findings; ``counters``: its error counters are judged by their change over the sampling window,
    so it is read again in the second epoch; ``log``: an event log a snapshot records again in its
    second epoch (events of the window), though no check needs the second reading."""

    name: str
    module: str
    order: int
    what: str
    counters: bool = False
    log: bool = False

    @property
    def timeout_s(self) -> float:
        """The module's ``TIMEOUT_S``, read when asked (tests and operators may change it)."""
        return float(importlib.import_module(self.module).TIMEOUT_S)


_REGISTRY: dict[str, ProbeSpec] = {}
_discovered = False
_discover_lock = threading.RLock()


def probe(*, order: int, what: str, counters: bool = False, log: bool = False) -> Callable:
    """Decorator for a probe module's ``collect``: registers the module under its ``NAME``."""

    def register(collect: Callable) -> Callable:
        name = collect.__globals__["NAME"]
        _REGISTRY[name] = ProbeSpec(name, collect.__module__, order, what, counters, log)
        return collect

    return register


def _discover() -> None:
    """Import every module of ``ccdiag.probes`` once, so each registers itself."""
    global _discovered
    with _discover_lock:
        if _discovered:
            return
        package = importlib.import_module("ccdiag.probes")
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"ccdiag.probes.{info.name}")
        _discovered = True


def registry() -> tuple[ProbeSpec, ...]:
    """Every registered probe, in report order."""
    _discover()
    return tuple(sorted(_REGISTRY.values(), key=lambda s: (s.order, s.name)))


def spec(name: str) -> ProbeSpec | None:
    _discover()
    return _REGISTRY.get(name)


def all_probes() -> tuple[str, ...]:
    """Every probe's name, in the order reports list them."""
    return tuple(s.name for s in registry())


def counter_probes() -> tuple[str, ...]:
    """Probes whose counters are judged by their change over a window (read again after it)."""
    return tuple(s.name for s in registry() if s.counters)


def resampled_probes() -> tuple[str, ...]:
    """Probes a snapshot records again in its second epoch: the counter probes and the event logs."""
    return tuple(s.name for s in registry() if s.counters or s.log)


def probe_what(name: str) -> str:
    """What probe ``name`` reads, in words ("InfiniBand ports"); the name itself when unregistered."""
    found = spec(name)
    return found.what if found is not None else name


def __getattr__(attr: str) -> Any:
    # ``ALL_PROBES`` stays importable as a constant; it is computed from the registry when first asked
    if attr == "ALL_PROBES":
        return all_probes()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


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


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """The field names of dataclass ``cls`` (empty for any other type), looked up once per class:
    a 3,000-device probe result has hundreds of thousands of nested records."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        fields = getattr(cls, "__dataclass_fields__", None)
        names = tuple(f.name for f in dataclasses.fields(cls)) if isinstance(fields, dict) else ()
        _FIELD_NAMES[cls] = names
    return names


def _has_errors(obj: Any, depth: int = 0) -> bool:
    """True when ``obj`` or any dataclass nested in it (a GPU, a port, a link) carries read errors."""
    names = _field_names(type(obj)) if depth <= 6 else ()
    if not names:
        return False
    if getattr(obj, "errors", ()):
        return True
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, (tuple, list)):
            if any(_has_errors(v, depth + 1) for v in value):
                return True
        elif _has_errors(value, depth + 1):
            return True
    return False


def _status_of(data: Any) -> str:
    return PARTIAL if _has_errors(data) else OK


def _module_of(name: str) -> Any:
    found = spec(name)
    # an unregistered ``ccdiag.probes.<name>`` module (a test's fake probe) still runs
    return importlib.import_module(found.module if found is not None else f"ccdiag.probes.{name}")


def run_one(host: Host, name: str) -> ProbeRun:
    """Run one probe in the calling thread (no deadline). Used by :func:`run_probes`' workers."""
    start = time.monotonic()
    try:
        data = _module_of(name).collect(host)
    except ProbeUnavailable as exc:
        # a replayed partial record (a bug report) that holds nothing this probe reads: not an
        # absent subsystem but an unknown one
        why = host.unrecorded(name) if hasattr(host, "unrecorded") else None
        if why:
            return ProbeRun(name, FAILED, time.monotonic() - start, None, f"{NOT_RECORDED_PREFIX}{why}")
        return ProbeRun(name, UNAVAILABLE, time.monotonic() - start, None, str(exc))
    except Exception as exc:  # noqa: BLE001 - isolation is the point
        return ProbeRun(name, FAILED, time.monotonic() - start, None, f"{type(exc).__name__}: {exc}")
    return ProbeRun(name, _status_of(data), time.monotonic() - start, data, None)


def probe_timeout(name: str) -> float:
    try:
        return float(_module_of(name).TIMEOUT_S)
    except Exception:  # noqa: BLE001
        return 10.0


def run_probes(host: Host, names: Iterable[str] | None = None, deadline: float | None = None,
               timeouts: dict[str, float] | None = None) -> dict[str, ProbeRun]:
    """Run probes concurrently. ``deadline`` is an absolute ``time.monotonic()`` bound for all of
    them; each probe also has its own ``TIMEOUT_S`` (overridable through ``timeouts``). A probe
    that ends after its bound counts as timed out whether or not this thread woke in time to see
    it still running (a command killed at the deadline lets its probe return just after it), so
    the verdict does not depend on how busy the machine was."""
    names = list(names or all_probes())
    _discover()  # before the workers start: they only read the registry
    results: dict[str, ProbeRun] = {}
    finished: dict[str, float] = {}
    threads: dict[str, tuple[threading.Thread, float, float]] = {}
    for name in names:
        limit = (timeouts or {}).get(name, probe_timeout(name))

        def work(n: str = name) -> None:
            results[n] = run_one(host, n)
            finished[n] = time.monotonic()

        t = threading.Thread(target=work, name=f"probe-{name}", daemon=True)
        started = time.monotonic()
        t.start()
        threads[name] = (t, started, limit)
    for name, (t, started, limit) in threads.items():
        end = started + limit
        if deadline is not None:
            end = min(end, deadline)
        t.join(max(0.0, end - time.monotonic()))
        if t.is_alive() or name not in results or finished.get(name, end) > end:
            results[name] = ProbeRun(name, TIMEOUT, time.monotonic() - started, None,
                                     f"probe {name} did not finish within {end - started:.1f}s; abandoned")
    return {n: results[n] for n in names}


__all__ = ["FAILED", "NOT_RECORDED_PREFIX", "OK", "PARTIAL", "PROBE_INFINIBAND", "PROBE_KMSG", "PROBE_NETDEV", "PROBE_NVML", "PROBE_PCIE",
           "PROBE_SMI_TOPO", "PROBE_SYSTEM", "ProbeRun", "ProbeSpec", "ProbeUnavailable", "TIMEOUT", "UNAVAILABLE",
           "all_probes", "counter_probes", "probe", "probe_timeout", "probe_what", "registry", "resampled_probes",
           "run_one", "run_probes", "spec"]
