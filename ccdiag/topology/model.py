"""The topology model: typed links, device nodes, and the read-only :class:`Topology` queries.

Why a graph: every later verdict needs the same two answers about a pair of devices, *how far
apart are they* (the NCCL / ``nvidia-smi topo -m`` level: NV#, PIX, PXB, PHB, NODE, SYS) and *what
should a transfer between them reach* (the bottleneck link of their path). Computing both from one
structure built from the probes keeps the topology command, the checks, the benchmarks, the
recommender and the exporter in agreement, and lets the result be cross-checked against
nvidia-smi's own matrix.

The PCIe part is a tree (NUMA node -> host bridge -> root port -> switch -> ... -> device), so
levels come from the lowest common ancestor. NVLink, InfiniBand wires and the inter-socket
interconnect are extra typed links. Every link carries its capability (max) and its trained
(current) value, in GB/s of payload per direction (``_gbyte_s``), so a link trained down shows as a
lower current path bandwidth while the expected value stays what the hardware can do.

A :class:`Topology` is built once by :mod:`ccdiag.topology.builder` and never changes afterwards:
its collections are tuples and mappings handed out as copies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import networkx as nx

from ccdiag.core.readings import normalize_bdf
from ccdiag.topology import affinity as _affinity
from ccdiag.topology import catalogue
from ccdiag.topology.bandwidth import nvlink_gbyte_s
from ccdiag.topology.fastrows import level_rows
from ccdiag.topology.levels import UNKNOWN, level_rank
from ccdiag.topology.pcie_tree import PcieTree
from ccdiag.topology.usable import add_usable

# -- value types -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """One typed link. ``a`` is the end nearer the CPU for PCIe. Bandwidths are GB/s per direction:
    ``max_gbyte_s`` from capabilities, ``current_gbyte_s`` from what trained (0 for a link that is down)."""

    kind: str  # "pcie" | "nvlink" | "ib" | "roce" | "smp"
    a: str  # node id
    b: str
    name: str  # "GPU3 <- 0000:37:00.0 (PCIe)", "GPU5 NVLink", "mlx5_4 port 1", "SMP numa0-numa1"
    max_gbyte_s: float | None = None
    current_gbyte_s: float | None = None
    max_desc: str | None = None  # "Gen5 x16", "18 x NVLink4", "400 Gb/s"
    current_desc: str | None = None
    gen_max: int | None = None
    gen_current: int | None = None
    width_max: int | None = None
    width_current: int | None = None
    links_total: int | None = None  # NVLink: links with a far end
    links_active: int | None = None
    version: int | None = None  # NVLink generation
    rate_gbit_s: float | None = None  # IB/RoCE signalling rate, Gb/s
    state: str | None = None  # IB port state, e.g. "ACTIVE"
    source: str | None = None  # where the values came from (sysfs device, NVML)

    @property
    def degraded(self) -> bool:
        """True when the link trained below what it can do (or is down)."""
        if self.max_gbyte_s is None or self.current_gbyte_s is None:
            return False
        return self.current_gbyte_s + 1e-9 < self.max_gbyte_s

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["max_gbyte_s"] = _r(self.max_gbyte_s)
        d["current_gbyte_s"] = _r(self.current_gbyte_s)
        d["degraded"] = self.degraded
        return d


@dataclass(frozen=True)
class PathBandwidth:
    """The bandwidth of a path: ``gbyte_s`` is GB/s of payload per direction at the path's
    ``bottleneck`` link; None when no link on the path has a known bandwidth."""

    gbyte_s: float | None
    bottleneck: Link | None
    links: tuple[Link, ...] = ()
    level: str | None = None

    def to_json(self) -> dict:
        return {"gbyte_s": _r(self.gbyte_s), "level": self.level,
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
    rate_gbit_s: float | None = None  # best active port rate, Gb/s
    ports: tuple[int, ...] = ()
    netdevs: tuple[str, ...] = ()
    node: str = ""


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def natural_key(s: str) -> list:
    """Sort key that orders "mlx5_2" before "mlx5_10"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


#: NVLinks from one GPU to one far end: (links with that far end, of them active, NVLink generation)
NvLinkCount = tuple[int, int, "int | None"]


@dataclass
class TopologyParts:
    """What the builder assembles; :class:`Topology` freezes it. Nothing else writes these."""

    graph: nx.MultiGraph = field(default_factory=nx.MultiGraph)
    parent: dict[str, str] = field(default_factory=dict)  # PCIe tree: child node -> parent node
    up_link: dict[str, Link] = field(default_factory=dict)  # child node -> the PCIe link to its parent
    gpus: list[GpuNode] = field(default_factory=list)
    nics: list[NicNode] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    nvswitches: list[str] = field(default_factory=list)  # node ids
    numa_cpus: dict[int, str | None] = field(default_factory=dict)
    single_numa: bool = False
    have_pcie: bool = False
    have_nvml: bool = False
    driver_version: str | None = None
    nv: dict[str, dict[str, list]] = field(default_factory=dict)  # gpu node -> {far end: [total, active, gen]}
    notes: list[str] = field(default_factory=list)
    mismatches: list = field(default_factory=list)  # Mismatch values: devices two probes disagree on
    pcie_tree: PcieTree = field(default_factory=lambda: PcieTree(()))


def is_nvswitch(nvswitches: Iterable[str], node: str) -> bool:
    """An NVSwitch, or the fabric an active link reaches when its far end was not readable."""
    return node in nvswitches or node == "nvswitch-fabric"


def nvlink_bundle(graph: Any, nv: Mapping[str, Mapping[str, Any]], nvswitches: Iterable[str], gpu: str,
                  toward: str | None = None) -> Link | None:
    """One GPU's NVLinks as one link: to one peer GPU, or (``toward`` None) to the NVSwitches."""
    switches = tuple(nvswitches)
    remotes = nv.get(gpu, {})
    sel = {r: v for r, v in remotes.items() if (r == toward if toward else is_nvswitch(switches, r))}
    if not sel:
        return None
    total = sum(v[0] for v in sel.values())
    active = sum(v[1] for v in sel.values())
    version = next((v[2] for v in sel.values() if v[2] is not None), None)
    label = graph.nodes[gpu].get("label", gpu)
    far = graph.nodes[toward].get("label", toward) if toward else "NVSwitch fabric"
    # NVML says how many links and which generation; the catalogue says what one link of this
    # part carries (the live node first, the catalogue for what NVML does not report)
    model = graph.nodes[gpu].get("name")
    rate_of = catalogue.gpu_by_name(model)
    src = "NVML links" + (f"; per-link rate of {rate_of.key} from the hardware catalogue" if rate_of and rate_of.nvlink
                          else "; per-link rate by NVLink generation from the hardware catalogue")
    return Link("nvlink", gpu, toward or "nvswitch-fabric", f"{label} NVLink -> {far}",
                max_gbyte_s=nvlink_gbyte_s(version, total, model), current_gbyte_s=nvlink_gbyte_s(version, active, model),
                max_desc=f"{total} x NVLink{version or '?'}", current_desc=f"{active} active",
                links_total=total, links_active=active, version=version, source=src)


# -- the topology ------------------------------------------------------------------------------------


class Topology:
    """The built graph and every question asked of it. Build with
    :func:`ccdiag.topology.build_topology`; read-only once built."""

    def __init__(self, parts: TopologyParts) -> None:
        self._graph = nx.freeze(parts.graph)
        self._parent = MappingProxyType(dict(parts.parent))
        self._up_link = MappingProxyType(dict(parts.up_link))
        self._gpus: tuple[GpuNode, ...] = tuple(parts.gpus)
        self._nics: tuple[NicNode, ...] = tuple(parts.nics)
        # GPU node -> its NICs by level: asked per GPU by the checks, the affinity and the report
        # (with 3,000 NICs, computing it each time was most of the judging stage)
        self._nearest: dict[str, tuple[tuple[str, str], ...]] = {}
        self._links: tuple[Link, ...] = tuple(parts.links)
        self._nvswitches: tuple[str, ...] = tuple(parts.nvswitches)
        self._numa_cpus = MappingProxyType(dict(parts.numa_cpus))
        self._nv = MappingProxyType({g: MappingProxyType({r: tuple(v) for r, v in rem.items()})
                                     for g, rem in parts.nv.items()})
        self.single_numa: bool = parts.single_numa
        self.have_pcie: bool = parts.have_pcie
        self.have_nvml: bool = parts.have_nvml
        self.driver_version: str | None = parts.driver_version
        self._notes: tuple[str, ...] = tuple(parts.notes)
        self._mismatches: tuple = tuple(parts.mismatches)
        self._names = MappingProxyType(self._name_index())
        self._pcie_tree = parts.pcie_tree
        # the graph never changes, so chains and leaf-pair levels are computed once (a node with
        # thousands of NICs asks for millions of levels, all between a few hundred switch pairs)
        self._chains: dict[str, tuple[str, ...]] = {}
        self._branch_levels: dict[tuple[str, str], str] = {}
        self._inner = frozenset(self._parent.values())
        # a GPU's NVLinks as one link (to a peer or to the switches), and its active links to the
        # switches: asked four times per GPU pair by the report (32,640 pairs at 256 GPUs)
        self._bundles: dict[tuple[str, str | None], Link | None] = {}
        self._switch_active: dict[str, int] = {}
        self._domains: dict[str, frozenset] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ or not name.startswith("_") and name not in (
                "single_numa", "have_pcie", "have_nvml", "driver_version"):
            raise AttributeError(f"Topology is read-only: cannot set {name!r}")
        object.__setattr__(self, name, value)

    def _name_index(self) -> dict[str, str]:
        """Label, UUID and BDF -> node, built once so lookups stay constant-time on large nodes."""
        index: dict[str, str] = {}
        by_bdf: dict[str, str] = {}
        # a GPU's or RDMA NIC's own label always names it, whatever other node shares the word
        devices: tuple[GpuNode | NicNode, ...] = (*self._gpus, *self._nics)
        for dev in devices:
            if dev.label and dev.node in self._graph:
                index.setdefault(dev.label, dev.node)
        for n, attrs in self._graph.nodes(data=True):
            for key in (attrs.get("label"), attrs.get("uuid")):
                if key and key not in index:
                    index[key] = n
            bdf = attrs.get("bdf")
            if bdf and attrs.get("kind") in ("gpu", "nic", "nvswitch", "pci") and bdf not in by_bdf:
                by_bdf[bdf] = n
        return {**{f"bdf:{b}": n for b, n in by_bdf.items()}, **index}

    # -- read-only views ----------------------------------------------------------------------
    @property
    def graph(self) -> nx.MultiGraph:
        """The graph (frozen: networkx refuses changes)."""
        return self._graph

    @property
    def parent(self) -> Mapping[str, str]:
        """PCIe tree: child node -> parent node."""
        return self._parent

    @property
    def up_link(self) -> Mapping[str, Link]:
        """Child node -> the PCIe link to its parent."""
        return self._up_link

    @property
    def nvswitches(self) -> tuple[str, ...]:
        return self._nvswitches

    @property
    def numa_cpus(self) -> Mapping[int, str | None]:
        return self._numa_cpus

    @property
    def nv(self) -> Mapping[str, Mapping[str, NvLinkCount]]:
        """GPU node -> {far end node: (links, active links, NVLink generation)}."""
        return self._nv

    @property
    def notes(self) -> tuple[str, ...]:
        return self._notes

    @property
    def mismatches(self) -> tuple:
        """Devices two probes disagree on (:class:`ccdiag.topology.mismatch.Mismatch`)."""
        return self._mismatches

    @property
    def pcie_tree(self) -> PcieTree:
        """Every PCI function the pcie probe saw, bridges included, as a tree of bus addresses."""
        return self._pcie_tree

    # -- lookups ------------------------------------------------------------------------------
    def gpus(self) -> list[GpuNode]:
        return list(self._gpus)

    def nics(self) -> list[NicNode]:
        return list(self._nics)

    def links(self) -> list[Link]:
        return list(self._links)

    def node_id(self, name: str) -> str:
        """Graph node of a label ("GPU0", "mlx5_0", "NVSwitch1"), a BDF, a UUID or a node id.

        Raises KeyError naming the device when the topology has no such device."""
        if name in self._graph:
            return name
        node = self._names.get(name)
        if node is not None:
            return node
        bdf = normalize_bdf(name) if isinstance(name, str) and ":" in name else None
        if bdf and f"bdf:{bdf}" in self._names:
            return self._names[f"bdf:{bdf}"]
        raise KeyError(f"no device {name!r} in the topology")

    def has_device(self, name: str) -> bool:
        """Whether :meth:`node_id` knows ``name`` (callers holding names from other probes ask first)."""
        try:
            self.node_id(name)
        except KeyError:
            return False
        return True

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
        chain = self._chains.get(node)
        if chain is None:
            walk = [node]
            seen = {node}
            while walk[-1] in self._parent and self._parent[walk[-1]] not in seen:
                walk.append(self._parent[walk[-1]])
                seen.add(walk[-1])
            chain = self._chains[node] = tuple(walk)
        return list(chain)

    def _numa_of_chain(self, chain: list[str]) -> int | None:
        top = chain[-1]
        if self.graph.nodes[top].get("kind") == "numa":
            return self.graph.nodes[top].get("numa")
        return None

    def is_switch(self, node: str) -> bool:
        """An NVSwitch, or the fabric an active link reaches when its far end was not readable."""
        return is_nvswitch(self._nvswitches, node)

    def nvlink_count(self, a: str, b: str) -> int:
        """Active NVLinks joining GPUs ``a`` and ``b``: direct ones, or through NVSwitches the
        smaller of the two GPUs' active links to switches (what nvidia-smi shows as NV18 on HGX)."""
        na, nb = self.node_id(a), self.node_id(b)
        la, lb = self.nv.get(na, {}), self.nv.get(nb, {})
        direct = max(la.get(nb, (0, 0, None))[1], lb.get(na, (0, 0, None))[1])
        if direct:
            return direct
        if not self._switch_domains(na) & self._switch_domains(nb):
            return 0  # switches of different NVLink domains (two NVL72 racks, two cliques) do not join
        return min(self._active_to_switches(na), self._active_to_switches(nb))

    def _switch_domains(self, gpu: str) -> frozenset:
        """The NVLink domains a GPU's active switch links reach: a placeholder switch node carries
        its fabric clique; switches NVML addresses, and the unreadable far end, are this node's.
        Kept per GPU (the graph does not change once built): every GPU pair asks twice."""
        found = self._domains.get(gpu)
        if found is None:
            found = self._domains[gpu] = frozenset(
                self.graph.nodes[r].get("domain", "node") if r in self.graph else "node"
                for r, v in self.nv.get(gpu, {}).items() if v[1] and self.is_switch(r))
        return found

    def _active_to_switches(self, gpu: str) -> int:
        n = self._switch_active.get(gpu)
        if n is None:
            n = self._switch_active[gpu] = sum(v[1] for r, v in self.nv.get(gpu, {}).items() if self.is_switch(r))
        return n

    def pcie_level(self, a: str, b: str) -> str:
        """The PCIe-only level between two devices (what ``nvidia-smi topo -mp`` shows)."""
        na, nb = self.node_id(a), self.node_id(b)
        if na == nb:
            return "X"
        pa, pb = self._parent.get(na), self._parent.get(nb)
        if pa is None or pb is None:
            return UNKNOWN
        if na not in self._inner and nb not in self._inner:
            # two leaves (endpoints): their level depends only on the branches above them
            key = (pa, pb) if pa <= pb else (pb, pa)
            lvl = self._branch_levels.get(key)
            if lvl is None:
                lvl = self._branch_levels[key] = self._level_of_chains(self._ancestors(key[0]),
                                                                       self._ancestors(key[1]), 0)
            return lvl
        return self._level_of_chains(self._ancestors(na), self._ancestors(nb), 1)

    def _level_of_chains(self, ca: list[str], cb: list[str], skip: int) -> str:
        """The level between the ends of two ancestor chains; ``skip`` 1 when each chain starts at
        the device itself (not counted as a bridge), 0 when it starts at the device's parent."""
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
        between = ca[skip:ca.index(lca)] + cb[skip:cb.index(lca)] + [lca]
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
        """Smaller is closer (see :func:`ccdiag.topology.levels.level_rank`)."""
        return level_rank(level)

    def nearest_nics(self, gpu_label: str) -> list[tuple[str, str]]:
        """Every NIC with its level from this GPU, best first (ties in NIC name order)."""
        g = self.node_id(gpu_label)
        done = self._nearest.get(g)
        if done is None:
            pairs = [(n.label, self.level(g, n.node)) for n in self._nics]
            done = self._nearest[g] = tuple(sorted(pairs, key=lambda p: (level_rank(p[1]), natural_key(p[0]))))
        return list(done)

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

    # -- GPUDirect affinity -------------------------------------------------------------------
    def gpu_state(self, gpu: str | GpuNode) -> str:
        """"ok", or what NVML said about a GPU it cannot use ("lost", "hung", ...)."""
        return _affinity.gpu_state(gpu if isinstance(gpu, GpuNode) else self.gpu(gpu))

    def nic_states(self) -> dict[str, dict]:
        """Per RDMA NIC: ``state``, ``usable`` and each port's state (see :mod:`.affinity`)."""
        return _affinity.nic_states(self)

    def gpudirect_nics(self, gpu: str | GpuNode, nic_states: dict[str, dict] | None = None) -> dict:
        """The NICs this GPU's network traffic uses for GPUDirect: the nearest by level, and when
        those are all down the nearest with an active port (see :func:`.affinity.gpu_affinity`)."""
        g = gpu if isinstance(gpu, GpuNode) else self.gpu(gpu)
        return _affinity.gpu_affinity(self, g, nic_states)

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
        key = (gpu, toward)
        if key not in self._bundles:
            self._bundles[key] = nvlink_bundle(self._graph, self._nv, self._nvswitches, gpu, toward)
        return self._bundles[key]

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
        """The path's slowest link with a known bandwidth (``current``: as trained, else capability)."""
        if links is None:
            return PathBandwidth(None, None, (), level)
        best: Link | None = None
        val: float | None = None
        for l in links:
            v = l.current_gbyte_s if current else l.max_gbyte_s
            if v is None:
                continue
            if val is None or v < val:
                best, val = l, v
        return PathBandwidth(val, best, tuple(links), level)

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
            key = (lambda l: l.current_gbyte_s or 0.0) if current else (lambda l: l.max_gbyte_s or 0.0)
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

    # -- nvidia-smi style matrix (ccdiag.topology.matrix renders it and compares it with nvidia-smi's) --
    def matrix_rows(self) -> tuple[list[str], dict[tuple[str, str], str], dict[str, dict]]:
        """Labels (GPUs then NICs as NIC<i>), the cells, and per-row affinity / legend facts."""
        labels, info = self._matrix_labels_info()
        nodes = [g.node for g in self._gpus] + [n.node for n in self._nics]
        cells: dict[tuple[str, str], str] = {}
        for la, row in zip(labels, level_rows(self, nodes)):
            for lb, v in zip(labels, row):
                cells[(la, lb)] = v
        return labels, cells, info

    def _matrix_labels_info(self) -> tuple[list[str], dict[str, dict]]:
        labels = [g.label for g in self._gpus] + [f"NIC{i}" for i in range(len(self._nics))]
        info: dict[str, dict] = {}
        for g in self._gpus:
            numa = g.numa
            info[g.label] = {"cpu_affinity": self.numa_cpus.get(numa) if numa is not None else None,
                             "numa_affinity": numa, "gpu_numa_id": None}
        for i, n in enumerate(self._nics):
            info[f"NIC{i}"] = {"nic_name": n.label}
        return labels, info

    # -- export ---------------------------------------------------------------------------------
    def to_json(self, max_matrix_ends: int | None = None) -> dict:
        """The topology as JSON. With ``max_matrix_ends``, a node with more GPUs and NICs than that
        gets the GPU rows of the level matrix only (``matrix.omitted`` says so): the all-pairs
        matrix of 3,000 NICs is 9 million cells, and NIC-to-NIC levels are not what a verdict or
        NCCL placement reads."""
        labels, info = self._matrix_labels_info()
        ends = [g.node for g in self._gpus] + [n.node for n in self._nics]
        matrix: dict[str, Any] = {"labels": labels, "affinity": info}
        if max_matrix_ends is not None and len(ends) > max_matrix_ends:
            matrix["rows"] = [[self.level(g, e) for e in ends] for g in ends[:len(self._gpus)]]
            matrix["omitted"] = {"rows": "NIC", "ends": len(ends), "limit": max_matrix_ends,
                                 "why": "the NIC rows of the all-pairs matrix are left out above the limit; "
                                        "`ccdiag topo --json` has them"}
        else:
            # rows built directly (no cell dictionary): a node with thousands of NICs has millions of cells
            matrix["rows"] = level_rows(self, ends)
        nodes = []
        for n, attrs in sorted(self.graph.nodes(data=True)):
            nodes.append({"id": n, **{k: v for k, v in attrs.items() if k != "nvml"}})
        expected = []
        for i, a in enumerate(self._gpus):
            for b in self._gpus[i + 1:]:
                # one path walk for both figures: 256 GPUs have 32,640 pairs
                links, lvl = self._path(a.node, b.node)
                expected.append({"a": a.label, "b": b.label, "kind": "p2p",
                                 **self._bottleneck(links, False, lvl).to_json(),
                                 "current_gbyte_s": _r(self._bottleneck(links, True, lvl).gbyte_s)})
        for g in self._gpus:
            h = self.expected_h2d(g.node)
            expected.append({"a": "host", "b": g.label, "kind": "h2d", **h.to_json(),
                             "current_gbyte_s": _r(self.expected_h2d(g.node, current=True).gbyte_s)})
            for nic, lvl in self.nearest_nics(g.label)[:1]:
                e = self.expected_gpu_nic(g.node, nic)
                expected.append({"a": g.label, "b": nic, "kind": "gpu_nic", **e.to_json(),
                                 "current_gbyte_s": _r(self.expected_gpu_nic(g.node, nic, current=True).gbyte_s)})
        return add_usable(self, {
            "gpus": [dict(g.__dict__) for g in self._gpus],
            "nics": [dict(n.__dict__, ports=list(n.ports), netdevs=list(n.netdevs)) for n in self._nics],
            "nvswitches": [self.label(s) for s in self.nvswitches],
            "nodes": nodes,
            "links": [l.to_json() for l in self._links],
            "matrix": matrix,
            "nic_affinity": {g.label: [list(p) for p in self.nearest_nics(g.label)] for g in self._gpus},
            "expected": expected,
            "nvlinks_expected": {g.label: self.expected_nvlinks(g.label) for g in self._gpus},
            "notes": list(self.notes),
        })
