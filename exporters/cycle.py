"""One collection cycle as the exporters see it, and the state kept from one cycle to the next.

A :class:`Cycle` is what a scrape serves: the probe outcomes, the observation exported for each probe,
the findings, the topology and when it all completed. It is built from one
:func:`ccdiag.run.checkrun.evaluate` result, so the daemon, the textfile and ``ccdiag check`` give the
same verdict for the same node.

:class:`CycleState` carries what must survive between cycles in the daemon:

* the last good observation of every probe. When a probe fails or hangs, its metrics keep being
  served from its last good cycle (marked ``ccdiag_probe_data_stale 1``, ``ccdiag_probe_success 0``,
  with ``ccdiag_probe_last_success_timestamp_seconds`` telling how old) for at most ``max_stale_s``;
  after that they are dropped, because old values presented as current are the failure mode this
  tool exists to catch. Findings are never carried over: they always judge the current cycle, so a
  probe that failed shows up as an ``unknown`` finding right away;
* a tally of XID records, so ``ccdiag_gpu_xid_errors_total`` keeps counting records that scroll out
  of the kernel's log buffer instead of going down (which Prometheus would read as a reset).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ccdiag.core.findings import Finding
from ccdiag.core.readings import normalize_bdf
from ccdiag.probes.registry import ProbeRun
from ccdiag.core.probenames import PROBE_KMSG, PROBE_NVML

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

#: default bound on serving a failed probe's last good data (seconds)
DEFAULT_MAX_STALE_S = 300.0


@dataclass(frozen=True)
class Cycle:
    runs: Mapping[str, ProbeRun]  # this cycle's outcome of each probe (the first sample)
    data: Mapping[str, Any]  # the observation exported for each probe (fresh or its last good one)
    completed_at: float  # wall-clock time the cycle finished
    duration_s: float = 0.0
    findings: tuple[Finding, ...] | None = None  # None when the checks did not run
    topology: Topology | None = None
    stale: frozenset = frozenset()  # probes whose data comes from an earlier cycle
    last_success: Mapping[str, float] = field(default_factory=dict)
    xid_counts: Mapping[tuple, int] | None = None  # (bdf, xid) -> records; None: count ``data[PROBE_KMSG]``
    stages: Mapping[str, bool] = field(default_factory=dict)  # "topology", "checks" -> worked
    number: int = 1
    #: bus id -> the GPU's UUID when it last answered: a GPU lost since keeps its UUID label, so
    #: its series still join its XIDs and dcgm-exporter's
    known_uuids: Mapping[str, str] = field(default_factory=dict)


def _usable(run: ProbeRun | None) -> Any:
    return run.data if run is not None and run.usable else None


def fresh_data(result: Any) -> dict[str, Any]:
    """The newest usable observation of each probe of a check result (the second sample's
    counters when there is one)."""
    data: dict[str, Any] = {}
    for name, run in result.runs.items():
        value = _usable((result.later or {}).get(name)) if result.later else None
        if value is None:
            value = _usable(run)
        if value is not None:
            data[name] = value
    return data


def _stages(result: Any) -> dict[str, bool]:
    checks_ok = not any(f.check == "check.deadline" for f in result.findings)
    topo_ok = result.topology is not None and not any(f.check == "topology.build" for f in result.findings)
    return {"topology": topo_ok, "checks": checks_ok}


def cycle_from_result(result: Any, completed_at: float | None = None) -> Cycle:
    """A one-off cycle from one evaluation (``ccdiag check --textfile``): no history."""
    completed_at = time.time() if completed_at is None else completed_at
    data = fresh_data(result)
    return Cycle(runs=dict(result.runs), data=data, completed_at=completed_at,
                 duration_s=float(getattr(result, "duration_s", 0.0)), findings=tuple(result.findings),
                 topology=result.topology, last_success={n: completed_at for n in data},
                 stages=_stages(result))


def xid_keys(kmsg: Any) -> dict[tuple, tuple]:
    """Each XID record of a kmsg observation, keyed so a record read again is recognised."""
    keys = {}
    for i, ev in enumerate(getattr(kmsg, "events", ()) or ()):
        if ev.kind == "xid" and ev.code is not None:
            keys[(ev.time_s, ev.bdf, ev.code, ev.message, i if ev.time_s is None else 0)] = (ev.bdf, ev.code)
    return keys


@dataclass
class CycleState:
    """Everything the daemon remembers between cycles (see the module docstring)."""

    max_stale_s: float = DEFAULT_MAX_STALE_S
    last_good: dict[str, tuple[float, Any]] = field(default_factory=dict)  # probe -> (time, data)
    xid_seen: set = field(default_factory=set)
    xid_counts: dict[tuple, int] = field(default_factory=dict)
    number: int = 0
    known_uuids: dict[str, str] = field(default_factory=dict)  # bus id -> UUID, bounded by the GPUs seen

    def _tally_xids(self, kmsg: Any) -> None:
        keys = xid_keys(kmsg)
        for key, (bdf, code) in keys.items():
            if key not in self.xid_seen:
                self.xid_counts[(bdf, code)] = self.xid_counts.get((bdf, code), 0) + 1
        # records gone from the buffer never come back, so only those still there are remembered
        self.xid_seen = set(keys)

    def advance(self, result: Any, completed_at: float | None = None) -> Cycle:
        completed_at = time.time() if completed_at is None else completed_at
        self.number += 1
        data = fresh_data(result)
        for name, value in data.items():
            self.last_good[name] = (completed_at, value)
        if PROBE_KMSG in data:
            self._tally_xids(data[PROBE_KMSG])
        for g in getattr(data.get(PROBE_NVML), "gpus", ()) or ():
            bdf = normalize_bdf(g.bus_id)
            if bdf and g.uuid and len(self.known_uuids) < 4096:
                self.known_uuids[bdf] = g.uuid
        stale = set()
        for name, (when, value) in list(self.last_good.items()):
            if name in data:
                continue
            if completed_at - when <= self.max_stale_s and name in result.runs:
                data[name] = value
                stale.add(name)
            else:
                del self.last_good[name]
        return Cycle(runs=dict(result.runs), data=data, completed_at=completed_at,
                     duration_s=float(getattr(result, "duration_s", 0.0)), findings=tuple(result.findings),
                     topology=result.topology, stale=frozenset(stale),
                     last_success={n: t for n, (t, _) in self.last_good.items()},
                     xid_counts=dict(self.xid_counts), stages=_stages(result), number=self.number,
                     known_uuids=dict(self.known_uuids))
