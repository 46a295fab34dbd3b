"""The one way any command reads a node: :func:`observe` runs the probes wanted through the host
door, under one deadline, takes the second sample of a window, and hands back the runs with the
topology built from them.

``check`` (through :func:`ccdiag.run.checkrun.evaluate`), ``topo``, ``bench``, ``nccl``, ``policy``,
``snapshot``, the daemon's cycles and ``cluster check`` all call it, so a node is read the same way
whichever command asks, and the probe lists all derive from the probe registry
(:mod:`ccdiag.probes.registry`). :func:`close_host` is the one way a command lets go of the host.

A probe abandoned at the deadline gets, in its error, the door operation it was blocked in, as the
door announced it (:mod:`ccdiag.host.inflight`): ``blocked in NVML call nvmlDeviceGetUUID(6)``.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterable

from ccdiag.host import inflight
from ccdiag.host.door import Host
from ccdiag.probes.registry import TIMEOUT, ProbeRun, all_probes, resampled_probes, run_probes

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology


@dataclass(frozen=True)
class Observation:
    """What one observation of a node read.

    ``runs``/``later``: the probe runs of the first and second sample (``later`` is None without a
    window). ``window_s``: the window between them. ``timed_out``: a probe was abandoned at the
    deadline. ``meta``: the host's metadata (host name, kernel, source). ``load``: the state of the
    link load kept up during the first sample, when one was asked for. ``topology`` is built from
    ``runs`` when first asked for, so a caller can build it inside its own bounded stage."""

    runs: dict[str, ProbeRun]
    later: dict[str, ProbeRun] | None = None
    window_s: float = 0.0
    timed_out: bool = False
    meta: dict = field(default_factory=dict)
    load: Any = None

    @cached_property
    def topology(self) -> "Topology":
        from ccdiag.topology import build_topology

        return build_topology(self.runs)

    @property
    def built_topology(self) -> "Topology | None":
        """The topology if it was built (a judging stage that ran out of time may not have)."""
        return self.__dict__.get("topology")

    @property
    def usable(self) -> bool:
        """Whether any probe delivered data."""
        return any(r.usable for r in self.runs.values())


# -- probes, with the operation a hung one was blocked in -------------------------------------------
def _probe_threads() -> set[threading.Thread]:
    # Thread objects, not idents: an abandoned thread that exits frees its ident for a new one
    return {t for t in threading.enumerate() if t.name.startswith("probe-") and t.ident}


def run_traced(host: Host, names: list[str], deadline: float | None) -> dict[str, ProbeRun]:
    """:func:`run_probes`, then for each probe abandoned at the deadline add to its error the door
    operation it was blocked in (threads started by this call only, told apart from earlier
    abandoned ones)."""
    before = _probe_threads()
    runs = run_probes(host, names, deadline=deadline)
    if any(r.status == TIMEOUT for r in runs.values()):
        by_probe = {t.name[len("probe-"):]: t.ident for t in _probe_threads() - before}
        for name, run in runs.items():
            where = inflight.doing(by_probe.get(name)) if run.status == TIMEOUT else None
            if where:
                runs[name] = dataclasses.replace(run, error=f"{run.error}; blocked in {where}")
    return runs


# -- the window ------------------------------------------------------------------------------------
def _replay_window(host: Host) -> tuple[bool, float]:
    """(has a second epoch, its window) for a replayed snapshot."""
    meta = host.meta()
    try:
        epochs = int(meta.get("epochs") or 1)
    except (TypeError, ValueError):
        epochs = 1
    try:
        window = float(meta.get("window_s") or 0.0)
    except (TypeError, ValueError):
        window = 0.0
    return epochs >= 2, window


def _second_sample(host: Host, names: list[str], window_s: float, deadline: float | None,
                   fit_window: bool) -> tuple[dict[str, ProbeRun] | None, float]:
    """Live: wait the window (shortened so it and the second pass share what is left before the
    deadline, when ``fit_window``) and read ``names`` again. Replay: the recorded second epoch."""
    import time

    if not names:
        return None, 0.0
    if not host.live:
        has_later, recorded_window = _replay_window(host)
        if not has_later:
            return None, 0.0
        host.next_epoch(0.0)
        return run_traced(host, names, deadline), recorded_window
    if window_s <= 0:
        return None, 0.0
    window = float(window_s)
    if fit_window and deadline is not None:
        room = deadline - time.monotonic()
        if room <= 0.2:
            return None, 0.0
        window = min(window, room / 2)
    host.next_epoch(window)
    return run_traced(host, names, deadline), window


# -- the one way to observe ------------------------------------------------------------------------
def observe(host: Host, probes: Iterable[str] | None = None, deadline: float | None = None, *,
            window_s: float = 0.0, resample: Iterable[str] | None = None, fit_window: bool = True,
            load_links: bool = False, close: bool = False) -> Observation:
    """Read ``host`` with ``probes`` (default: every registered probe) until ``deadline`` (an
    absolute ``time.monotonic()``; commands the probes start never outlive it).

    ``window_s``: on a live host, wait that long and read ``resample`` again (default: the counter and log
    probes that delivered data); with ``fit_window`` the window shrinks so it and the second pass
    fit before the deadline. A replayed snapshot with a second epoch gives its recorded window and
    nothing sleeps. ``load_links``: keep every GPU's PCIe link busy while the first sample is read
    (:mod:`ccdiag.host.busy_pcie_links`). ``close``: let go of the host afterwards (:func:`close_host`)."""
    names = list(probes or all_probes())
    if deadline is not None:
        host.deadline = deadline
    load = _start_load(host, deadline) if load_links else None
    try:
        runs = run_traced(host, names, deadline)
    finally:
        load_state = load.stop() if load is not None else None
    if resample is None:
        again = [n for n in resampled_probes() if n in runs and runs[n].usable]  # counters and logs
    else:
        again = [n for n in resample if n in runs]
    later, window = _second_sample(host, again, window_s, deadline, fit_window)
    timed_out = any(r.status == TIMEOUT for r in runs.values()) or \
        any(r.status == TIMEOUT for r in (later or {}).values())
    meta = host.meta()
    if load_state is not None:
        meta = {**meta, "link_load": load_state.to_json()}
    obs = Observation(runs=runs, later=later, window_s=window, timed_out=timed_out, meta=meta, load=load_state)
    if close:
        close_host(host, timed_out=timed_out)
    return obs


def _start_load(host: Host, deadline: float | None) -> Any:
    import time

    from ccdiag.host.busy_pcie_links import LinkLoad

    room = (deadline - time.monotonic()) if deadline is not None else 10.0
    load = LinkLoad(max_s=max(0.5, min(5.0, room / 2)))
    load.start(bool(host.live))
    return load


def close_host(host: Host, timeout: float = 0.5, timed_out: bool = False) -> None:
    """``host.close()`` bounded in time: NVML shutdown waits on a lock a hung call may still hold.
    After a run that timed out nothing is called at all: a driver that hung once is not poked again."""
    if timed_out:
        return
    t = threading.Thread(target=host.close, name="ccdiag-close", daemon=True)
    t.start()
    t.join(timeout)


__all__ = ["Observation", "close_host", "observe", "run_traced"]


@dataclass(frozen=True)
class NcclSettingsSeen:
    """The NCCL settings a job on the door's node would see (:func:`ccdiag.nccl.present.settings_present`),
    where they were read, the judged prefixes the door's environment did not cover (an older
    snapshot's libfabric variables, everything under --root: their absence proves nothing), and the
    ``/etc/nccl.conf`` text (None: no file, or unreadable), kept for its notes."""

    env: dict[str, str]
    source: str
    unread: tuple[str, ...]
    conf: str | None


def nccl_settings_seen(host: Host) -> NcclSettingsSeen:
    """Read once through the door: the environment and ``/etc/nccl.conf``. ``ccdiag nccl`` and
    ``cluster check`` both judge a node from this, so they judge the same settings."""
    from ccdiag.host.door import HostReadError, environ_recorded
    from ccdiag.nccl.present import NCCL_CONF, settings_present, unread_prefixes

    try:
        conf = host.read_text(NCCL_CONF) if host.exists(NCCL_CONF) else None
    except (HostReadError, OSError):
        conf = None
    env, source = settings_present(host.environ(), conf)
    return NcclSettingsSeen(env, source, unread_prefixes(environ_recorded(host.meta())), conf)
