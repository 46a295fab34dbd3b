"""The PCI functions of a node as a tree of bus addresses: who sits above whom, what is below a bridge.

The topology graph groups a switch's upstream and downstream ports into one node (as NCCL counts
bridges); the PCIe checks instead judge every port on its own (each has its own link, AER counters
and ACS control). This tree keeps every function, bridges included, so both views come from the
same observation and the checks no longer rebuild it themselves.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterable, Mapping

#: PCI function kinds that end a path (what the traffic is for)
ENDPOINT_KINDS = ("gpu", "nic", "nvswitch")
#: PCI function kinds that forward traffic
BRIDGE_KINDS = ("bridge", "root_port")


def parent_bdf(d: Any) -> str | None:
    """The function directly above ``d``: its recorded parent, else the hop before it on its path."""
    if getattr(d, "parent", None):
        return d.parent
    path = tuple(getattr(d, "path", ()) or ())
    return path[-2] if len(path) >= 2 and path[-1] == d.bdf else None


def common_hops(a: Any, b: Any) -> list[str] | None:
    """Bridges a peer-to-peer transfer between ``a`` and ``b`` crosses inside a shared switch tree:
    the last common bridge and everything below it on both sides. None without a common bridge (the
    traffic goes through the CPU)."""
    pa, pb = list(a.path[:-1]), list(b.path[:-1])
    n = 0
    while n < min(len(pa), len(pb)) and pa[n] == pb[n]:
        n += 1
    if n == 0:
        return None
    return [pa[n - 1]] + pa[n:] + pb[n:]


class PcieTree:
    """Read-only tree of the PCI functions the ``pcie`` probe saw (``PciDevice`` values by BDF)."""

    def __init__(self, devices: Iterable[Any]):
        self._devices = MappingProxyType({d.bdf: d for d in devices})
        children: dict[str, list[Any]] = {}
        below: dict[str, list[Any]] = {}
        for d in self._devices.values():
            p = parent_bdf(d)
            if p:
                children.setdefault(p, []).append(d)
        self._endpoints = tuple(sorted((d for d in self._devices.values() if d.kind in ENDPOINT_KINDS),
                                       key=lambda d: d.bdf))
        for e in self._endpoints:
            for hop in e.path:
                if hop != e.bdf:
                    below.setdefault(hop, []).append(e)
        self._children = MappingProxyType({k: tuple(v) for k, v in children.items()})
        self._below = MappingProxyType({k: tuple(v) for k, v in below.items()})

    @property
    def devices(self) -> Mapping[str, Any]:
        """BDF -> PCI function."""
        return self._devices

    def get(self, bdf: str) -> Any:
        return self._devices.get(bdf)

    def parent(self, d: Any) -> Any:
        """The function above ``d`` (None at a root port or when it was not read)."""
        p = parent_bdf(d)
        return self._devices.get(p) if p else None

    def children(self, bdf: str) -> tuple[Any, ...]:
        """Functions directly below ``bdf``."""
        return self._children.get(bdf, ())

    def endpoints(self) -> tuple[Any, ...]:
        """GPUs, NICs and NVSwitches, in bus order."""
        return self._endpoints

    def endpoints_below(self, bdf: str) -> tuple[Any, ...]:
        """Endpoints whose path runs through the bridge ``bdf``."""
        return self._below.get(bdf, ())
