"""The drain cap: ccdiag never holds more than a configured share of the fleet out of service.

A bad policy, a driver roll-out or a shared switch can make every node fail at once; draining them
all would turn a monitoring mistake into an outage. Before it takes a node out, ccdiag counts the
nodes already out for its own reasons - in Slurm the nodes drained or draining with a reason that
starts with ``ccdiag`` (the health check's ``ccdiag-hc:``, the prolog's ``ccdiag-prolog:`` and
``ccdiag-epilog:``, the idle-time loop's ``ccdiag-idle:``, the older ``ccdiag:``), in Kubernetes the
nodes whose ``CcdiagHealthy`` condition is ``False`` - and above the cap it reports (a log line, the
``ccdiag_health_drain_held`` metric and its alert) instead of draining. A node already out is never
counted against itself: refreshing its own reason is always allowed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ccdiag.health.config import CapConfig

#: a Slurm reason ccdiag wrote: "ccdiag:" or "ccdiag-<who>:" at the start
CCDIAG_REASON = re.compile(r"^ccdiag(?:-[a-z]+)?:")


@dataclass(frozen=True)
class FleetCount:
    """What the scheduler says about the fleet: its nodes, and those ccdiag holds out."""

    total: int
    out: int
    out_nodes: tuple[str, ...] = ()
    source: str = ""  # "sinfo", "kubernetes API"


@dataclass(frozen=True)
class CapDecision:
    allowed: bool
    limit: int
    count: FleetCount
    why: str

    def to_json(self) -> dict:
        return {"allowed": self.allowed, "limit": self.limit, "out": self.count.out, "total": self.count.total,
                "source": self.count.source, "why": self.why}


def limit_of(cap: CapConfig, total: int) -> int:
    """How many nodes ccdiag may hold out of a fleet of ``total``: the fraction (rounded down), at
    most ``max_out_nodes``, at least ``min_out_nodes`` (so one bad node of a small fleet still goes)."""
    limit = math.floor(cap.max_out_fraction * total + 1e-9)
    if cap.max_out_nodes is not None:
        limit = min(limit, cap.max_out_nodes)
    return max(limit, cap.min_out_nodes)


def decide(cap: CapConfig, count: FleetCount, node: str, already_out: bool) -> CapDecision:
    """Whether taking ``node`` out keeps ccdiag within the cap."""
    limit = limit_of(cap, count.total)
    out = count.out - (1 if node in count.out_nodes else 0)
    if already_out:
        return CapDecision(True, limit, count, f"{node} is already out; its reason is refreshed")
    if out + 1 <= limit:
        return CapDecision(True, limit, count, f"{out + 1} of {count.total} nodes out with this one "
                                               f"(cap {limit}, {count.source})")
    return CapDecision(False, limit, count,
                       f"drain cap reached: {out} of {count.total} nodes already out for ccdiag's reasons "
                       f"(cap {limit}: max_out_fraction {cap.max_out_fraction:g}"
                       + (f", max_out_nodes {cap.max_out_nodes}" if cap.max_out_nodes is not None else "")
                       + f"; {count.source}); reported instead of drained")


def slurm_count(sinfo_lines: list[str]) -> FleetCount:
    """A fleet count from ``sinfo -h -N -o '%N|%T|%E'`` lines (one per node and partition)."""
    states: dict[str, tuple[str, str]] = {}
    for line in sinfo_lines:
        name, _, rest = line.strip().partition("|")
        if not name:
            continue
        state, _, reason = rest.partition("|")
        states[name] = (state.strip().lower(), reason.strip())
    out = tuple(sorted(n for n, (s, r) in states.items() if "drain" in s and CCDIAG_REASON.match(r)))
    return FleetCount(total=len(states), out=len(out), out_nodes=out, source="sinfo")


__all__ = ["CCDIAG_REASON", "CapDecision", "FleetCount", "decide", "limit_of", "slurm_count"]
