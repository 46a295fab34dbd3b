"""What the recommender needs to know about a node, from the node itself or from a pasted matrix.

The recommender reasons about GPUs, RDMA NICs, the path level between them, the NICs' ports and
the network interfaces. On a node (or its snapshot) all of it comes from the topology and the
probes; from a pasted ``nvidia-smi topo -m`` only the names and levels are known, and the fields
that need the node stay ``None`` so the recommender can say what it could not decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ccdiag.topology.levels import UNKNOWN, level_rank
from ccdiag.core.probenames import PROBE_PLATFORM

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology


@dataclass(frozen=True)
class PortFacts:
    nic: str
    port: int
    state: str | None
    link_layer: str | None  # "InfiniBand" | "Ethernet"
    rate_gbit_s: float | None
    v2_ipv4_gids: tuple[int, ...] = ()  # GID indices of type RoCE v2 holding an IPv4-mapped address
    v2_gids: tuple[int, ...] = ()
    v1_gids: tuple[int, ...] = ()
    netdev: str | None = None

    @property
    def active(self) -> bool:
        return (self.state or "").upper() == "ACTIVE"

    @property
    def roce(self) -> bool:
        return (self.link_layer or "").lower() == "ethernet"


@dataclass(frozen=True)
class Layout:
    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    levels: Mapping[tuple[str, str], str]
    source: str  # "node" | "smi"
    where: str  # evidence source for levels
    ports: Mapping[str, tuple[PortFacts, ...]] | None = None  # None: not known (pasted matrix)
    interfaces: tuple[Any, ...] | None = None  # NetInterface values; None: not known
    flattened: str | None = None  # why the PCI tree looks flattened (a VM), when it does
    gpu_numa: Mapping[str, int | None] | None = None
    platform: Any = None  # PlatformObservation (cloud, container, plugins, provider topology files); None: not read
    bdfs: Mapping[str, str | None] | None = None  # device label -> PCI bus id

    def level(self, a: str, b: str) -> str:
        return self.levels.get((a, b)) or self.levels.get((b, a)) or UNKNOWN

    def nvlink(self) -> bool:
        return any(self.level(a, b).startswith("NV") for i, a in enumerate(self.gpus) for b in self.gpus[i + 1:])

    def nearest(self, gpu: str, nics: tuple[str, ...] | None = None) -> tuple[list[str], str | None]:
        """The NICs at this GPU's best known level, and that level."""
        cands = [(n, self.level(gpu, n)) for n in (self.nics if nics is None else nics)]
        cands = [(n, lv) for n, lv in cands if lv != UNKNOWN]
        if not cands:
            return [], None
        best = min(level_rank(lv) for _, lv in cands)
        near = [n for n, lv in cands if level_rank(lv) == best]
        return near, next(lv for _, lv in cands if level_rank(lv) == best)


def gid_facts(port: Any) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A port's populated GID indexes: (RoCE v2 with an IPv4-mapped address, RoCE v2, v1)."""
    v2, v2_ipv4, v1 = [], [], []
    for g in getattr(port, "gids", ()) or ():
        kind = (g.type or "").lower()
        text = (g.gid or "").lower()
        if text.replace("0", "").replace(":", "") == "":
            continue  # an empty GID slot
        if "v2" in kind:
            v2.append(g.index)
            if text.startswith("0000:0000:0000:0000:0000:ffff:"):
                v2_ipv4.append(g.index)
        elif kind:
            v1.append(g.index)
    return tuple(v2_ipv4), tuple(v2), tuple(v1)


def _looks_flattened(layout_levels: dict, gpus: list[str], nics: list[str], switches: int | None) -> str | None:
    """A VM's emulated PCI tree puts every passed-through device straight under one host bridge:
    no PCIe switch anywhere and every GPU-NIC path PHB, so NCCL sees no GPU nearer any NIC."""
    pairs = [layout_levels.get((g, n)) for g in gpus for n in nics]
    if len(gpus) < 2 or not nics or switches not in (0, None) or not pairs:
        return None
    if all(lv == "PHB" for lv in pairs):
        return (f"every GPU-NIC path is PHB ({len(gpus)} GPUs, {len(nics)} NICs) and no PCIe switch is "
                "visible: the tree NCCL would see hides which NIC sits beside which GPU (typical of a VM)")
    return None


def layout_from_topology(topo: Topology, runs: Mapping[str, Any] | None = None) -> Layout:
    """From a built :class:`ccdiag.topology.model.Topology` and the probe runs it was built from."""
    from ccdiag.topology.builder import probe_data

    gpus = [g.label for g in topo.gpus()]
    nics = [n.label for n in topo.nics()]
    levels: dict[tuple[str, str], str] = {}
    for i, g in enumerate(gpus):
        for n in nics:
            levels[(g, n)] = topo.level(g, n)
        for h in gpus[i + 1:]:
            levels[(g, h)] = topo.level(g, h)
    ib = probe_data(runs or {}, "infiniband")
    ports: dict[str, tuple[PortFacts, ...]] | None = None
    if ib is not None:
        ports = {}
        for d in ib.devices:
            facts = []
            for p in d.ports:
                v2_ipv4, v2, v1 = gid_facts(p)
                netdev = next((g.netdev for g in (p.gids or ()) if g.netdev), None) or \
                    (d.netdevs[0] if d.netdevs else None)
                facts.append(PortFacts(d.name, p.port, p.state, p.link_layer, p.rate_gbit_s, v2_ipv4, v2, v1, netdev))
            ports[d.name] = tuple(facts)
    net = probe_data(runs or {}, "netdev")
    bdfs = {d.label: d.bdf for d in list(topo.gpus()) + list(topo.nics())}
    switches = sum(1 for _, a in topo.graph.nodes(data=True) if a.get("kind") == "switch") if topo.have_pcie else None
    return Layout(tuple(gpus), tuple(nics), levels, "node", "topology (PCIe tree from sysfs, NVLinks from NVML)",
                  ports=ports, interfaces=tuple(net.interfaces) if net is not None else None,
                  flattened=_looks_flattened(levels, gpus, nics, switches),
                  gpu_numa={g.label: g.numa for g in topo.gpus()},
                  platform=probe_data(runs or {}, PROBE_PLATFORM), bdfs=bdfs)


def layout_from_matrix(m: Any, where: str) -> Layout:
    """From a parsed ``nvidia-smi topo -m`` (:class:`ccdiag.probes.smi_topo.TopoMatrix`)."""
    gpus = list(m.gpus())
    nic_cols = list(m.nics())
    names = {c: m.nic_name(c) for c in nic_cols}
    levels: dict[tuple[str, str], str] = {}
    for i, g in enumerate(gpus):
        for c in nic_cols:
            lv = m.level(g, c)
            if lv:
                levels[(g, names[c])] = lv
        for h in gpus[i + 1:]:
            lv = m.level(g, h)
            if lv:
                levels[(g, h)] = lv
    nics = [names[c] for c in nic_cols]
    return Layout(tuple(gpus), tuple(nics), levels, "smi", where,
                  flattened=_looks_flattened(levels, gpus, nics, None))
