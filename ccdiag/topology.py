"""One graph of the node: NUMA nodes, host bridges, root ports, PCIe switches, GPUs, NICs, NVSwitches.

Why a graph: every later verdict needs the same two answers about a pair of devices, *how far
apart are they* (the NCCL / ``nvidia-smi topo -m`` level: NV#, PIX, PXB, PHB, NODE, SYS) and *what
should a transfer between them reach* (the bottleneck link of their path). Computing both from one
structure built from the probes keeps the topology command, the checks, the recommender and the
exporter in agreement, and lets the result be cross-checked against nvidia-smi's own matrix.

The PCIe part is a tree (NUMA node -> host bridge -> root port -> switch -> ... -> device), so
levels come from the lowest common ancestor. NVLink, InfiniBand wires and the inter-socket
interconnect are extra typed links. Every link carries its capability (max) and its trained
(current) value, in GB/s per direction, so a link trained down shows as a lower current path
bandwidth while the expected value stays what the hardware can do.

Rates (per direction; GB/s = 10^9 bytes/s) are those of the reference table "A.1 Theoretical link
rates" in numbers-and-failure-modes.md (the project's performance reference):
PCIe Gen3/4/5 use 128b/130b (x16: 15.75 / 31.5 / 63 GB/s), Gen1/2 use 8b/10b, Gen6 FLIT mode
carries 242 payload bytes per 256-byte flit (x16 ~121 GB/s); NVLink 2/3/4 carry 25 GB/s per link
per direction and NVLink 5 50; InfiniBand and RoCE rates are Gb/s on the wire, divided by 8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from ccdiag.model import normalize_bdf

# -- link rates ------------------------------------------------------------------------------------

#: PCIe generation by signalling rate (GT/s)
from ccdiag.linkrates import pcie_gen  # noqa: E402,F401 - re-exported

#: NVLink GB/s per link per direction, by NVLink generation (reference table A.1:
#: NVLink 2 (V100), 3 (A100), 4 (H100/H200/GH200) 25 GB/s; NVLink 5 (B200/GB200) 50 GB/s)
NVLINK_GBS_PER_LINK = {2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

LEVELS = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
UNKNOWN = "unknown"




def pcie_gbs(speed_gts: float | None, width: int | None) -> float | None:
    """GB/s per direction of a PCIe link: lanes x rate x encoding efficiency / 8 bits.

    8b/10b for Gen1/2, 128b/130b for Gen3-5, FLIT (242/256) for Gen6, as in reference table A.1.
    """
    if not speed_gts or not width or width <= 0 or speed_gts <= 0:
        return None
    gen = pcie_gen(speed_gts)
    if gen is None:
        eff = 128 / 130 if speed_gts > 5.0 else 8 / 10
    elif gen <= 2:
        eff = 8 / 10
    elif gen <= 5:
        eff = 128 / 130
    else:
        eff = 242 / 256
    return speed_gts * width * eff / 8.0


def nvlink_gbs(version: int | None, count: int) -> float | None:
    """GB/s per direction of ``count`` NVLinks of one generation (None for unknown generations)."""
    per = NVLINK_GBS_PER_LINK.get(version) if version is not None else None
    return None if per is None else per * count


def wire_gbs(rate_gbps: float | None) -> float | None:
    """An InfiniBand/Ethernet signalling rate in Gb/s as GB/s."""
    return None if rate_gbps is None else rate_gbps / 8.0


def _fmt_gen(speed: float | None, width: int | None) -> str:
    gen = pcie_gen(speed)
    g = f"Gen{gen}" if gen else (f"{speed:g} GT/s" if speed else "Gen?")
    return f"{g} x{width}" if width else f"{g} x?"


# -- value types -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """One typed link. ``a`` is the end nearer the CPU for PCIe. Bandwidths are GB/s per direction:
    ``max_gbs`` from capabilities, ``current_gbs`` from what trained (0 for a link that is down)."""

    kind: str  # "pcie" | "nvlink" | "ib" | "roce" | "smp"
    a: str  # node id
    b: str
    name: str  # "GPU3 <- 0000:37:00.0 (PCIe)", "GPU5 NVLink", "mlx5_4 port 1", "SMP numa0-numa1"
    max_gbs: float | None = None
    current_gbs: float | None = None
    max_desc: str | None = None  # "Gen5 x16", "18 x NVLink4", "400 Gb/s"
    current_desc: str | None = None
    gen_max: int | None = None
    gen_current: int | None = None
    width_max: int | None = None
    width_current: int | None = None
    links_total: int | None = None  # NVLink: links with a far end
    links_active: int | None = None
    version: int | None = None  # NVLink generation
    rate_gbps: float | None = None  # IB/RoCE, Gb/s
    state: str | None = None  # IB port state, e.g. "ACTIVE"
    source: str | None = None  # where the values came from (sysfs device, NVML)

    @property
    def degraded(self) -> bool:
        """True when the link trained below what it can do (or is down)."""
        if self.max_gbs is None or self.current_gbs is None:
            return False
        return self.current_gbs + 1e-9 < self.max_gbs

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["max_gbs"] = _r(self.max_gbs)
        d["current_gbs"] = _r(self.current_gbs)
        d["degraded"] = self.degraded
        return d


@dataclass(frozen=True)
class PathBandwidth:
    """The bandwidth of a path: ``gbps`` is GB/s per direction (gigaBYTES, despite the short name)
    at the path's ``bottleneck`` link; None when no link on the path has a known bandwidth."""

    gbps: float | None
    bottleneck: Link | None
    links: list[Link] = field(default_factory=list)
    level: str | None = None

    def to_json(self) -> dict:
        return {"gbps": _r(self.gbps), "level": self.level,
                "bottleneck": self.bottleneck.name if self.bottleneck else None,
                "links": [l.name for l in self.links]}


@dataclass(frozen=True)
class GpuNode:
    label: str  # "GPU0"
    index: int | None
    bdf: str | None
    uuid: str | None = None
    numa: int | None = None
    name: str | None = None  # model, e.g. "NVIDIA H100 80GB HBM3"
    failed: str | None = None  # NVML error class when the GPU is lost/hung
    node: str = ""  # graph node id


@dataclass(frozen=True)
class NicNode:
    label: str  # "mlx5_0"
    bdf: str | None
    numa: int | None = None
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    rate_gbps: float | None = None  # best active port rate, Gb/s
    ports: tuple[int, ...] = ()
    netdevs: tuple[str, ...] = ()
    node: str = ""


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _data(runs: Any, name: str) -> Any:
    """A probe's data from ``runs`` (ProbeRuns or bare observations); None when unusable."""
    if not runs:
        return None
    run = runs.get(name)
    if run is None:
        return None
    if hasattr(run, "status") and hasattr(run, "data"):
        return run.data if run.status in ("ok", "partial") else None
    return run


# -- the topology ------------------------------------------------------------------------------------


class Topology:
    """The built graph and every question asked of it. Build with :func:`build_topology`."""

    def __init__(self) -> None:
        self.graph = nx.MultiGraph()
        self.parent: dict[str, str] = {}  # PCIe tree: child node -> parent node
        self.up_link: dict[str, Link] = {}  # child node -> the PCIe link to its parent
        self._gpus: list[GpuNode] = []
        self._nics: list[NicNode] = []
        self._links: list[Link] = []
        self.nvswitches: list[str] = []  # node ids
        self.numa_cpus: dict[int, str | None] = {}
        self.single_numa: bool = False
        self.have_pcie = False
        self.have_nvml = False
        self.driver_version: str | None = None
        # gpu node -> {remote node: (total links, active links, version)}
        self.nv: dict[str, dict[str, list]] = {}
        self.notes: list[str] = []

    # -- lookups ------------------------------------------------------------------------------
    def gpus(self) -> list[GpuNode]:
        return list(self._gpus)

    def nics(self) -> list[NicNode]:
        return list(self._nics)

    def links(self) -> list[Link]:
        return list(self._links)

    def node_id(self, name: str) -> str:
        """Graph node of a label ("GPU0", "mlx5_0", "NVSwitch1"), a BDF, a UUID or a node id."""
        if name in self.graph:
            return name
        for n, attrs in self.graph.nodes(data=True):
            if name in (attrs.get("label"), attrs.get("uuid")):
                return n
        bdf = normalize_bdf(name) if ":" in name else None
        if bdf:
            for n, attrs in self.graph.nodes(data=True):
                if attrs.get("bdf") == bdf and attrs.get("kind") in ("gpu", "nic", "nvswitch", "pci"):
                    return n
        raise KeyError(f"no device {name!r} in the topology")

    def label(self, node: str) -> str:
        return self.graph.nodes[node].get("label", node)

    def gpu(self, name: str) -> GpuNode:
        node = self.node_id(name)
        for g in self._gpus:
            if g.node == node:
                return g
        raise KeyError(f"{name!r} is not a GPU")

    # -- levels -------------------------------------------------------------------------------
    def _ancestors(self, node: str) -> list[str]:
        chain = [node]
        while chain[-1] in self.parent:
            chain.append(self.parent[chain[-1]])
        return chain

    def _numa_of_chain(self, chain: list[str]) -> int | None:
        top = chain[-1]
        if self.graph.nodes[top].get("kind") == "numa":
            return self.graph.nodes[top].get("numa")
        return None

    def is_switch(self, node: str) -> bool:
        """An NVSwitch, or the fabric an active link reaches when its far end was not readable."""
        return node in self.nvswitches or node == "nvswitch-fabric"

    def nvlink_count(self, a: str, b: str) -> int:
        """Active NVLinks joining GPUs ``a`` and ``b``: direct ones, or through NVSwitches the
        smaller of the two GPUs' active links to switches (what nvidia-smi shows as NV18 on HGX)."""
        na, nb = self.node_id(a), self.node_id(b)
        la, lb = self.nv.get(na, {}), self.nv.get(nb, {})
        direct = max(la.get(nb, (0, 0, None))[1], lb.get(na, (0, 0, None))[1])
        if direct:
            return direct
        sa = sum(v[1] for r, v in la.items() if self.is_switch(r))
        sb = sum(v[1] for r, v in lb.items() if self.is_switch(r))
        return min(sa, sb)

    def pcie_level(self, a: str, b: str) -> str:
        """The PCIe-only level between two devices (what ``nvidia-smi topo -mp`` shows)."""
        na, nb = self.node_id(a), self.node_id(b)
        if na == nb:
            return "X"
        ca, cb = self._ancestors(na), self._ancestors(nb)
        if len(ca) == 1 or len(cb) == 1:
            return UNKNOWN
        common = set(ca) & set(cb)
        if not common:
            numa_a, numa_b = self._numa_of_chain(ca), self._numa_of_chain(cb)
            if numa_a is not None and numa_b is not None and numa_a != numa_b:
                return "SYS"
            return UNKNOWN
        lca = next(n for n in ca if n in common)
        kind = self.graph.nodes[lca].get("kind")
        if kind == "numa":
            return "NODE"
        if kind == "host_bridge":
            return "PHB"
        # bridges (switches, root ports) traversed on the way up from both ends, the LCA once
        between = ca[1:ca.index(lca)] + cb[1:cb.index(lca)] + [lca]
        bridges = sum(1 for n in between if self.graph.nodes[n].get("kind") == "switch")
        return "PIX" if bridges <= 1 else "PXB"

    def level(self, a: str, b: str) -> str:
        """NCCL / nvidia-smi level: X, NV<n>, PIX, PXB, PHB, NODE, SYS (or "unknown")."""
        na, nb = self.node_id(a), self.node_id(b)
        if na == nb:
            return "X"
        if self.graph.nodes[na].get("kind") == "gpu" and self.graph.nodes[nb].get("kind") == "gpu":
            n = self.nvlink_count(na, nb)
            if n:
                return f"NV{n}"
        return self.pcie_level(na, nb)

    @staticmethod
    def level_rank(level: str) -> int:
        """Smaller is closer; NV# is closest, unknown farthest."""
        if level.startswith("NV"):
            return 1
        try:
            return LEVELS.index(level)
        except ValueError:
            return len(LEVELS)

    def nearest_nics(self, gpu_label: str) -> list[tuple[str, str]]:
        """Every NIC with its level from this GPU, best first (ties in NIC name order)."""
        g = self.node_id(gpu_label)
        pairs = [(n.label, self.level(g, n.node)) for n in self._nics]
        return sorted(pairs, key=lambda p: (self.level_rank(p[1]), _natural(p[0])))

    def gpus_near_nic(self, nic: str) -> list[str]:
        """GPUs for which this NIC is at their best level (the GPUs the NIC serves)."""
        target = self.label(self.node_id(nic))
        out = []
        for g in self._gpus:
            near = self.nearest_nics(g.label)
            if not near or near[0][1] == UNKNOWN:
                continue
            best = self.level_rank(near[0][1])
            if any(n == target and self.level_rank(lv) == best for n, lv in near):
                out.append(g.label)
        return out

    # -- bandwidth ----------------------------------------------------------------------------
    def _pcie_path_links(self, na: str, nb: str) -> list[Link] | None:
        ca, cb = self._ancestors(na), self._ancestors(nb)
        common = set(ca) & set(cb)
        if common:
            lca = next(n for n in ca if n in common)
            ups = ca[:ca.index(lca)]
            downs = cb[:cb.index(lca)]
            return [self.up_link[n] for n in ups + list(reversed(downs)) if n in self.up_link]
        numa_a, numa_b = self._numa_of_chain(ca), self._numa_of_chain(cb)
        if numa_a is None or numa_b is None:
            return None
        links = [self.up_link[n] for n in ca if n in self.up_link]
        smp = self._smp_link(ca[-1], cb[-1])
        if smp is not None:
            links.append(smp)
        links += [self.up_link[n] for n in reversed(cb) if n in self.up_link]
        return links

    def _smp_link(self, x: str, y: str) -> Link | None:
        for l in self._links:
            if l.kind == "smp" and {l.a, l.b} == {x, y}:
                return l
        return None

    def _nv_bundle(self, gpu: str, toward: str | None = None) -> Link | None:
        """One GPU's NVLinks as one link: to one peer GPU, or (``toward`` None) to the NVSwitches."""
        remotes = self.nv.get(gpu, {})
        sel = {r: v for r, v in remotes.items() if (r == toward if toward else self.is_switch(r))}
        if not sel:
            return None
        total = sum(v[0] for v in sel.values())
        active = sum(v[1] for v in sel.values())
        version = next((v[2] for v in sel.values() if v[2] is not None), None)
        far = self.label(toward) if toward else "NVSwitch fabric"
        return Link("nvlink", gpu, toward or "nvswitch-fabric", f"{self.label(gpu)} NVLink -> {far}",
                    max_gbs=nvlink_gbs(version, total), current_gbs=nvlink_gbs(version, active),
                    max_desc=f"{total} x NVLink{version or '?'}", current_desc=f"{active} active",
                    links_total=total, links_active=active, version=version, source="NVML")

    def _nv_path_links(self, na: str, nb: str) -> list[Link]:
        direct = [l for l in (self._nv_bundle(na, nb), self._nv_bundle(nb, na)) if l is not None]
        if direct:
            return direct
        return [l for l in (self._nv_bundle(na), self._nv_bundle(nb)) if l is not None]

    def _path(self, a: str, b: str) -> tuple[list[Link] | None, str]:
        na, nb = self.node_id(a), self.node_id(b)
        lvl = self.level(na, nb)
        if lvl.startswith("NV"):
            return self._nv_path_links(na, nb), lvl
        return self._pcie_path_links(na, nb), lvl

    @staticmethod
    def _bottleneck(links: list[Link] | None, current: bool, level: str | None) -> PathBandwidth:
        if links is None:
            return PathBandwidth(None, None, [], level)
        best: Link | None = None
        val: float | None = None
        for l in links:
            v = l.current_gbs if current else l.max_gbs
            if v is None:
                continue
            if val is None or v < val:
                best, val = l, v
        return PathBandwidth(val, best, list(links), level)

    def path_bandwidth(self, a: str, b: str) -> PathBandwidth:
        """What the path between two devices can carry (capabilities of its links)."""
        links, lvl = self._path(a, b)
        return self._bottleneck(links, False, lvl)

    def current_path_bandwidth(self, a: str, b: str) -> PathBandwidth:
        """What the path carries as trained now (a link at x8 or a port down lowers it)."""
        links, lvl = self._path(a, b)
        return self._bottleneck(links, True, lvl)

    def expected_p2p(self, a: str, b: str) -> PathBandwidth:
        return self.path_bandwidth(a, b)

    def _cpu_links(self, node: str) -> list[Link] | None:
        chain = self._ancestors(node)
        if len(chain) == 1:
            return None
        return [self.up_link[n] for n in chain if n in self.up_link]

    def expected_h2d(self, gpu: str, current: bool = False) -> PathBandwidth:
        """Host memory (the GPU's NUMA node) to the GPU over PCIe."""
        node = self.node_id(gpu)
        return self._bottleneck(self._cpu_links(node), current, "H2D")

    def _wire_links(self, nic: str) -> list[Link]:
        return [l for l in self._links if l.kind in ("ib", "roce") and l.a == nic]

    def expected_gpu_nic(self, gpu: str, nic: str, current: bool = False) -> PathBandwidth:
        """GPU -> NIC over PCIe, then the NIC's wire: the smaller of the two."""
        ng, nn = self.node_id(gpu), self.node_id(nic)
        links = self._pcie_path_links(ng, nn)
        wires = self._wire_links(nn)
        if wires:
            # a multi-port NIC's wire capacity is its best port
            key = (lambda l: l.current_gbs or 0.0) if current else (lambda l: l.max_gbs or 0.0)
            wire = max(wires, key=key)
            links = (links or []) + [wire] if links is not None else [wire]
        return self._bottleneck(links, current, self.level(ng, nn))

    def expected_nvlinks(self, gpu_label: str) -> int | None:
        """NVLinks that should be up on this GPU. On NVSwitch systems: every link with a far end
        (the most any switch-attached GPU shows, since HGX boards are wired alike); for GPUs wired
        to peers: the links the peers show towards it. None when NVML did not describe the GPU."""
        g = self.gpu(gpu_label)
        node = g.node
        if node not in self.nv and not self.graph.nodes[node].get("nvml"):
            return None
        own = self.nv.get(node, {})
        if any(self.is_switch(r) for r in own) or (not own and self.nvswitches):
            best = 0
            for other, remotes in self.nv.items():
                best = max(best, sum(v[0] for r, v in remotes.items() if self.is_switch(r)))
            return best
        peer = 0
        for other, remotes in self.nv.items():
            if other != node and node in remotes:
                peer += remotes[node][0]
        own_total = sum(v[0] for v in own.values())
        return max(peer, own_total)

    # -- nvidia-smi style matrix ---------------------------------------------------------------------
    def matrix(self):
        """The matrix nvidia-smi topo -m would print, as a :class:`ccdiag.probes.smi_topo.TopoMatrix`."""
        from ccdiag.topology_matrix import to_topo_matrix

        return to_topo_matrix(self)

    def matrix_rows(self) -> tuple[list[str], dict[tuple[str, str], str], dict[str, dict]]:
        """Labels (GPUs then NICs as NIC<i>), the cells, and per-row affinity / legend facts."""
        gl = [g.label for g in self._gpus]
        nl = [f"NIC{i}" for i in range(len(self._nics))]
        nodes = [g.node for g in self._gpus] + [n.node for n in self._nics]
        labels = gl + nl
        cells: dict[tuple[str, str], str] = {}
        for i, a in enumerate(nodes):
            for j, b in enumerate(nodes):
                cells[(labels[i], labels[j])] = "X" if i == j else self.level(a, b)
        info: dict[str, dict] = {}
        for g in self._gpus:
            numa = g.numa
            info[g.label] = {"cpu_affinity": self.numa_cpus.get(numa) if numa is not None else None,
                             "numa_affinity": numa, "gpu_numa_id": None}
        for i, n in enumerate(self._nics):
            info[f"NIC{i}"] = {"nic_name": n.label}
        return labels, cells, info

    def compare_smi(self, m: Any) -> list[str]:
        """Differences between this topology and a parsed ``nvidia-smi topo -m`` matrix, one line
        each ("GPU0/NIC1: nvidia-smi NODE, ccdiag PIX"); empty when they agree."""
        from ccdiag.topology_matrix import compare

        return compare(self, m)

    # -- export ---------------------------------------------------------------------------------
    def to_json(self) -> dict:
        labels, cells, info = self.matrix_rows()
        nodes = []
        for n, attrs in sorted(self.graph.nodes(data=True)):
            nodes.append({"id": n, **{k: v for k, v in attrs.items() if k != "nvml"}})
        expected = []
        for i, a in enumerate(self._gpus):
            for b in self._gpus[i + 1:]:
                expected.append({"a": a.label, "b": b.label, "kind": "p2p",
                                 **self.path_bandwidth(a.node, b.node).to_json(),
                                 "current_gbps": _r(self.current_path_bandwidth(a.node, b.node).gbps)})
        for g in self._gpus:
            h = self.expected_h2d(g.node)
            expected.append({"a": "host", "b": g.label, "kind": "h2d", **h.to_json(),
                             "current_gbps": _r(self.expected_h2d(g.node, current=True).gbps)})
            for nic, lvl in self.nearest_nics(g.label)[:1]:
                e = self.expected_gpu_nic(g.node, nic)
                expected.append({"a": g.label, "b": nic, "kind": "gpu_nic", **e.to_json(),
                                 "current_gbps": _r(self.expected_gpu_nic(g.node, nic, current=True).gbps)})
        return {
            "gpus": [dict(g.__dict__) for g in self._gpus],
            "nics": [dict(n.__dict__, ports=list(n.ports), netdevs=list(n.netdevs)) for n in self._nics],
            "nvswitches": [self.label(s) for s in self.nvswitches],
            "nodes": nodes,
            "links": [l.to_json() for l in self._links],
            "matrix": {"labels": labels, "rows": [[cells[(a, b)] for b in labels] for a in labels],
                       "affinity": info},
            "nic_affinity": {g.label: [list(p) for p in self.nearest_nics(g.label)] for g in self._gpus},
            "expected": expected,
            "nvlinks_expected": {g.label: self.expected_nvlinks(g.label) for g in self._gpus},
            "notes": list(self.notes),
        }

    def to_dot(self) -> str:
        """Graphviz DOT of the graph: PCIe tree, NVLinks (per switch, with counts), wires, SMP."""
        from ccdiag.topology_dot import render_dot

        return render_dot(self)


# -- building -----------------------------------------------------------------------------------------


def build_topology(runs: dict) -> Topology:
    """Build the graph from probe results (``ProbeRun`` values, or bare observations by name).

    Any probe may be missing: without NVML the GPUs still come from PCI (numbered in bus order,
    as NVML does); without PCIe data the levels are "unknown"."""
    from ccdiag.topology_build import Builder

    return Builder(Topology(), runs).build()


__all__ = ["Topology", "Link", "PathBandwidth", "GpuNode", "NicNode", "build_topology", "pcie_gbs",
           "nvlink_gbs", "wire_gbs", "pcie_gen", "NVLINK_GBS_PER_LINK"]
