"""Turns probe observations into a :class:`ccdiag.topology.model.Topology`.

Kept apart from the query code because it is the part that must tolerate every partial input:
GPUs may come from NVML, from PCI, or from both (matched by bus id); NICs from InfiniBand sysfs
and PCI; NUMA facts from the system probe and from each device's ``numa_node``.

PCIe ports are grouped the way NCCL and nvidia-smi count them: a switch (its upstream port and
all its downstream ports) is one bridge. In a device's path from the root port down, bridges
alternate upstream port, downstream port, upstream port, ... because every switch is entered
through its upstream port, so consecutive pairs are one switch each.
"""

from __future__ import annotations

from typing import Any

from ccdiag.core.linkrates import pcie_gen
from ccdiag.core.readings import normalize_bdf
from ccdiag.topology.bandwidth import pcie_desc, pcie_gbyte_s, wire_gbyte_s
from ccdiag.topology.mismatch import Mismatch
from ccdiag.topology.pcie_tree import PcieTree
from ccdiag.topology.model import (GpuNode, Link, NicNode, Topology, TopologyParts, natural_key,
                                   nvlink_bundle)
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NETDEV, PROBE_NVML, PROBE_PCIE, PROBE_SYSTEM

ENDPOINT_KINDS = ("gpu", "nic", "nvswitch", "other")


def probe_data(runs: Any, name: str) -> Any:
    """A probe's data from ``runs`` (ProbeRuns or bare observations); None when unusable."""
    if not runs:
        return None
    run = runs.get(name)
    if run is None:
        return None
    if hasattr(run, "status") and hasattr(run, "data"):
        return run.data if run.status in ("ok", "partial") else None
    return run


def build_topology(runs: Any) -> Topology:
    """Build the graph from probe results (``ProbeRun`` values, or bare observations by name).

    Any probe may be missing: without NVML the GPUs still come from PCI (numbered in bus order,
    as NVML does); without PCIe data the levels are "unknown"."""
    return Builder(runs).build()


def _min(*vals: Any) -> Any:
    known = [v for v in vals if v is not None]
    return min(known) if known else None


def _count_nvlink(entry: list, link: Any) -> None:
    """Counts one NVLink into its far end's ``[links, active links, first version seen]``."""
    entry[0] += 1
    entry[1] += 1 if link.active else 0
    if entry[2] is None and link.version is not None:
        entry[2] = link.version


class Builder:
    """Assembles :class:`TopologyParts` step by step, then freezes them into a Topology."""

    def __init__(self, runs: Any):
        self.t = TopologyParts()
        self.g = self.t.graph
        self.pcie = probe_data(runs, PROBE_PCIE)
        self.nvml = probe_data(runs, PROBE_NVML)
        self.ib = probe_data(runs, PROBE_INFINIBAND)
        self.system = probe_data(runs, PROBE_SYSTEM)
        self.netdev = probe_data(runs, PROBE_NETDEV)
        self.devs: dict[str, Any] = {}
        self.node_of_bdf: dict[str, str] = {}

    def _mismatch(self, device: str, kind: str, summary: str, *sources: str, bdf: str | None = None) -> None:
        """Two probes disagree about ``device``: record it (a check reports it) and note it (topo shows it)."""
        self.t.mismatches.append(Mismatch(device, kind, summary, tuple(sources), bdf))
        self.t.notes.append(summary)

    def build(self) -> Topology:
        self._numa()
        self._pcie()
        self._gpus()
        self._nvswitches()
        self._nics()
        self._nvlinks()
        self._smp()
        return Topology(self.t)

    # -- NUMA -------------------------------------------------------------------------------
    def _numa(self) -> None:
        nodes = getattr(self.system, "numa_nodes", ()) or ()
        for n in nodes:
            self.t.numa_cpus[n.node] = n.cpulist
            self._add_numa(n.node)
        self.t.single_numa = len(nodes) == 1

    def _add_numa(self, numa: int) -> str:
        nid = f"numa:{numa}"
        if nid not in self.g:
            self.g.add_node(nid, kind="numa", label=f"NUMA{numa}", numa=numa,
                            cpus=self.t.numa_cpus.get(numa))
        return nid

    def _numa_for(self, numa: int | None) -> int | None:
        if numa is None and self.t.single_numa:
            return next(iter(self.t.numa_cpus))
        return numa

    def _gpu_cpu_numa(self, gpu_numa_id: int | None) -> int | None:
        """The CPU-side NUMA node for a GPU PCI gave none. NVML's "GPU NUMA ID" names the NUMA node
        of the GPU's own memory on Grace Hopper/Blackwell: a node without CPUs, never the GPU's CPU
        affinity, so it counts only where that node has CPUs."""
        if gpu_numa_id is not None and not self.t.numa_cpus.get(gpu_numa_id):
            gpu_numa_id = None
        return self._numa_for(gpu_numa_id)

    # -- PCIe ------------------------------------------------------------------------------
    def _pcie(self) -> None:
        devices = getattr(self.pcie, "devices", None)
        if not devices:
            return
        self.t.have_pcie = True
        self.t.pcie_tree = PcieTree(devices)
        self.devs = {d.bdf: d for d in devices}
        for d in sorted(devices, key=lambda d: d.bdf):
            if d.kind in ("bridge", "root_port"):
                continue
            self._place(d)

    def _attach_host_bridge(self, d: Any, first: str) -> str:
        rc = d.root_complex or f"pci{first[:4]}:{first[5:7]}"
        hb = f"hb:{rc}"
        numa = self._numa_for(d.numa_node)
        if hb not in self.g:
            self.g.add_node(hb, kind="host_bridge", label=rc, numa=numa)
        elif self.g.nodes[hb].get("numa") is None and numa is not None:
            self.g.nodes[hb]["numa"] = numa
        hb_numa = self.g.nodes[hb].get("numa")
        if hb_numa is not None and hb not in self.t.parent:
            self.t.parent[hb] = self._add_numa(hb_numa)
            self.g.add_edge(hb, self.t.parent[hb], kind="host")
        return hb

    def _hop(self, parent: str, child: str, child_bdf: str, parent_port: Any, label: str) -> None:
        """The PCIe link between ``parent`` (node) and ``child`` (node). Values are those read at
        the child (its link above); the port above (root or downstream port) reports the same
        link, so its capability bounds the link's too."""
        if child in self.t.parent:
            return
        self.t.parent[child] = parent
        cd = self.devs.get(child_bdf)
        if cd is None:
            return
        max_s = _min(cd.max_link_speed_gts, getattr(parent_port, "max_link_speed_gts", None))
        max_w = _min(cd.max_link_width, getattr(parent_port, "max_link_width", None))
        cur_s = cd.current_link_speed_gts
        if cur_s is None and parent_port is not None:
            cur_s = parent_port.current_link_speed_gts
        cur_w = cd.current_link_width
        if cur_w is None and parent_port is not None:
            cur_w = parent_port.current_link_width
        upper = getattr(parent_port, "bdf", None) or self.g.nodes[parent].get("label")
        link = Link("pcie", parent, child, f"{label} <- {upper}", max_gbyte_s=pcie_gbyte_s(max_s, max_w),
                    current_gbyte_s=pcie_gbyte_s(cur_s, cur_w), max_desc=pcie_desc(max_s, max_w),
                    current_desc=pcie_desc(cur_s, cur_w), gen_max=pcie_gen(max_s),
                    gen_current=pcie_gen(cur_s), width_max=max_w, width_current=cur_w,
                    source=f"/sys/bus/pci/devices/{child_bdf}")
        self.t.up_link[child] = link
        self.t.links.append(link)
        self.g.add_edge(parent, child, kind="pcie", link=link.name)

    def _place(self, d: Any) -> None:
        chain = list(d.path) or [d.bdf]
        if chain[-1] != d.bdf:
            chain.append(d.bdf)
        hb = self._attach_host_bridge(d, chain[0])
        parent, parent_port = hb, None
        bridges = chain[:-1]
        if bridges and self.devs.get(bridges[0]) is not None and self.devs[bridges[0]].kind == "root_port":
            rp = f"rp:{bridges[0]}"
            if rp not in self.g:
                self.g.add_node(rp, kind="root_port", label=bridges[0], bdf=bridges[0])
            if rp not in self.t.parent:
                self.t.parent[rp] = hb
                self.g.add_edge(hb, rp, kind="host")
            parent, parent_port = rp, self.devs[bridges[0]]
            bridges = bridges[1:]
        i = 0
        while i < len(bridges):
            up = bridges[i]
            down = bridges[i + 1] if i + 1 < len(bridges) else None
            sw = f"sw:{up}"
            if sw not in self.g:
                self.g.add_node(sw, kind="switch", label=f"switch {up}", bdf=up, ports=[])
            if down and down not in self.g.nodes[sw]["ports"]:
                self.g.nodes[sw]["ports"].append(down)
            self._hop(parent, sw, up, parent_port, f"switch {up}")
            parent, parent_port = sw, self.devs.get(down) if down else None
            i += 2
        node = self._endpoint_node(d)
        self._hop(parent, node, d.bdf, parent_port, self.g.nodes[node]["label"])

    def _endpoint_node(self, d: Any) -> str:
        kind = d.kind if d.kind in ENDPOINT_KINDS else "other"
        prefix = {"gpu": "gpu", "nic": "nic", "nvswitch": "nvswitch"}.get(kind, "pci")
        node = f"{prefix}:{d.bdf}"
        if node not in self.g:
            self.g.add_node(node, kind=prefix if prefix != "pci" else "pci", label=d.bdf, bdf=d.bdf,
                            numa=self._numa_for(d.numa_node), pci_kind=d.kind)
        self.node_of_bdf[d.bdf] = node
        return node

    # -- GPUs -----------------------------------------------------------------------------------
    def _gpus(self) -> None:
        nv_gpus = list(getattr(self.nvml, "gpus", ()) or ())
        if self.nvml is not None:
            self.t.have_nvml = True
            self.t.driver_version = getattr(self.nvml, "driver_version", None)
        pci_gpus = sorted(n for n, a in self.g.nodes(data=True) if a.get("kind") == "gpu")
        by_bdf = {self.g.nodes[n]["bdf"]: n for n in pci_gpus}  # the PCI GPUs no NVML GPU has taken yet
        matched: dict[int, str] = {}  # GPU index -> its graph node
        unmatched_nv = []
        for g in nv_gpus:
            bdf = normalize_bdf(g.bus_id)
            if bdf and bdf in by_bdf:
                matched[g.index] = by_bdf.pop(bdf)
            elif bdf:
                matched[g.index] = self._gpu_off_tree(g, bdf)
            else:
                unmatched_nv.append(g)
        # NVML GPUs without a bus id (lost before it was read) take the PCI GPUs left, in bus order
        rest = sorted(by_bdf)
        for g in sorted(unmatched_nv, key=lambda g: g.index):
            if rest:
                matched[g.index] = by_bdf.pop(rest.pop(0))
            else:
                node = f"gpu:nvml{g.index}"
                self.g.add_node(node, kind="gpu", label=node, bdf=None, numa=None)
                matched[g.index] = node
        self._number_pci_only(by_bdf, matched)
        self._label_gpus(matched, nv_gpus)
        self._relabel_links()

    def _gpu_off_tree(self, g: Any, bdf: str) -> str:
        """A node for an NVML GPU whose bus id the PCI tree has no GPU at (or another NVML GPU took),
        with the disagreement recorded."""
        node = f"gpu:{bdf}"
        if node in self.g:  # two NVML GPUs claim one bus id: the second gets a node of its own
            self._mismatch(f"GPU{g.index}", "gpu", f"NVML GPU{g.index} reports bus id {bdf}, which another "
                           "NVML GPU already has", "NVML nvmlDeviceGetPciInfo", "NVML nvmlDeviceGetPciInfo",
                           bdf=bdf)
            node = f"gpu:nvml{g.index}"
        elif self.t.have_pcie:
            self._mismatch(f"GPU{g.index}", "gpu", f"NVML lists GPU{g.index} at {bdf}, but the PCI tree "
                           f"has no GPU there: its PCIe levels are unknown", "NVML nvmlDeviceGetPciInfo",
                           f"/sys/bus/pci/devices/{bdf}", bdf=bdf)
        self.g.add_node(node, kind="gpu", label=bdf, bdf=bdf, numa=self._gpu_cpu_numa(g.numa_node))
        return node

    def _number_pci_only(self, by_bdf: dict[str, str], matched: dict[int, str]) -> None:
        """GPUs PCI shows but NVML does not (or no NVML) take the lowest free indices, in bus order."""
        used = set(matched)
        nxt = 0
        for bdf in sorted(by_bdf):
            while nxt in used:
                nxt += 1
            matched[nxt] = by_bdf[bdf]
            used.add(nxt)
            if self.nvml is not None:
                self.t.notes.append(f"GPU at {bdf} is on the PCI bus but not listed by NVML")
                self.t.mismatches.append(Mismatch(f"GPU{nxt}", "gpu", f"GPU at {bdf} is on the PCI bus but not "
                                                  "listed by NVML", (f"/sys/bus/pci/devices/{bdf}", "NVML"), bdf))

    def _label_gpus(self, matched: dict[int, str], nv_gpus: list) -> None:
        """Each GPU's node labelled ``GPU<index>`` with what NVML says of it, as a :class:`GpuNode`."""
        nv_by_index = {g.index: g for g in nv_gpus}
        for index in sorted(matched):
            node = matched[index]
            attrs = self.g.nodes[node]
            g = nv_by_index.get(index)
            numa = attrs.get("numa")
            if numa is None and g is not None:
                numa = self._gpu_cpu_numa(g.numa_node)
            label = f"GPU{index}"
            attrs.update(label=label, index=index, numa=numa, uuid=getattr(g, "uuid", None),
                         name=getattr(g, "name", None), failed=getattr(g, "failed", None), nvml=g is not None)
            self.t.gpus.append(GpuNode(label, index, attrs.get("bdf"), attrs.get("uuid"), numa,
                                        attrs.get("name"), attrs.get("failed"), node))
        for gpu in self.t.gpus:
            if gpu.failed:
                self.t.notes.append(f"{gpu.label} ({gpu.bdf or 'bus id unknown'}) failed in NVML ({gpu.failed}): "
                                    "its NVLinks are unknown, so its levels are PCIe-only")

    def _relabel_links(self) -> None:
        """PCIe links were named by BDF before the GPUs had labels; use the labels now."""
        for i, l in enumerate(self.t.links):
            lbl = self.g.nodes[l.b].get("label")
            if l.kind == "pcie" and lbl and not l.name.startswith(lbl):
                new = Link(**{**l.__dict__, "name": f"{lbl} <- {l.name.split(' <- ', 1)[1]}"})
                self.t.links[i] = new
                self.t.up_link[l.b] = new

    # -- NVSwitches -------------------------------------------------------------------------------
    def _domain_node(self, g: Any) -> str:
        """The switch node standing for the NVSwitches a GPU reaches when NVML names no far end.

        NVML answers the placeholder ``FFFFFFFF:FF:FF.0`` for the far end of a link to an NVSwitch it
        cannot address (the switch trays of a GB200 NVL72, some HGX baseboards): the links still
        reach switches, so they get one switch node per NVLink domain. The GPUs of one node share
        one physical NVLink domain; the fabric manager may still split it into cliques (partitions),
        and GPUs of different cliques do not reach each other. So the domain is the GPU's clique when
        it registered with the fabric, else the node itself."""
        clique = getattr(g, "fabric_clique_id", None)
        domain = f"clique {clique}" if clique is not None else "node"
        node = f"nvswitch-domain:{domain}"
        if node not in self.g:
            label = "NVSwitch fabric" + (f" (clique {clique})" if clique is not None else "")
            self.g.add_node(node, kind="nvswitch", label=label, bdf=None, numa=None, domain=domain,
                            placeholder=True)
        return node

    def _nvswitches(self) -> None:
        sw = {n for n, a in self.g.nodes(data=True) if a.get("kind") == "nvswitch"}
        domains = set()
        for g in getattr(self.nvml, "gpus", ()) or ():
            for l in g.nvlinks:
                if l.remote_device_type != "switch":
                    continue
                if not l.remote_bus_id:
                    domains.add(self._domain_node(g))
                    continue
                bdf = normalize_bdf(l.remote_bus_id)
                node = (self.node_of_bdf.get(bdf) if bdf is not None else None) or f"nvswitch:{bdf}"
                if node not in self.g:
                    self.g.add_node(node, kind="nvswitch", label=bdf, bdf=bdf, numa=None)
                sw.add(node)
        for i, node in enumerate(sorted(sw)):
            self.g.nodes[node]["label"] = f"NVSwitch{i}"
            self.g.nodes[node].setdefault("domain", "node")
            self.t.nvswitches.append(node)
        self.t.nvswitches.extend(sorted(domains))
        self._relabel_links()

    # -- NICs ------------------------------------------------------------------------------------
    def _nics(self) -> None:
        devices = sorted(getattr(self.ib, "devices", ()) or (), key=lambda d: natural_key(d.name))
        netdev_by_ib: dict[str, list[str]] = {}
        for itf in getattr(self.netdev, "interfaces", ()) or ():
            if itf.ib_device:
                netdev_by_ib.setdefault(itf.ib_device, []).append(itf.name)
        self._netdev_mismatches(devices)
        claimed: dict[str, str] = {}  # graph node -> the RDMA device that took it
        for d in devices:
            bdf = normalize_bdf(d.pci_bdf)
            node = self._nic_node(d, bdf, claimed)
            claimed[node] = d.name
            attrs = self.g.nodes[node]
            attrs.update(kind="nic", label=d.name, ib=True)
            active = [p for p in d.ports if (p.state or "").upper() == "ACTIVE"]
            layers = [p.link_layer for p in d.ports if p.link_layer]
            rate = max((p.rate_gbit_s for p in active if p.rate_gbit_s is not None), default=None)
            netdevs = tuple(sorted(set(d.netdevs) | set(netdev_by_ib.get(d.name, ())), key=natural_key))
            nic = NicNode(d.name, bdf, attrs.get("numa"), layers[0] if layers else None, rate,
                          tuple(p.port for p in d.ports), netdevs, node)
            self.t.nics.append(nic)
        typical = self._typical_rates(devices)
        for d, nic in zip(devices, self.t.nics):
            for p in d.ports:
                self._wire(d.name, nic.node, p, typical)
        self._label_plain_nics()
        self._relabel_links()

    def _nic_node(self, d: Any, bdf: str | None, claimed: dict[str, str]) -> str:
        """The graph node of RDMA device ``d``: its PCI function's, when the PCI tree has that function
        as a NIC and no other RDMA device took it; otherwise a node of its own, outside the PCIe tree
        (levels "unknown"), with the disagreement recorded. Every RDMA device gets exactly one node of
        its own, so its name always resolves."""
        src_ib = f"/sys/class/infiniband/{d.name}/device"
        node = self.node_of_bdf.get(bdf) if bdf else None
        if node is not None and node in claimed:
            self._mismatch(d.name, "nic", f"RDMA devices {claimed[node]} and {d.name} both name PCI function {bdf} "
                           f"as their device: {d.name}'s place in the PCIe tree is unknown",
                           f"/sys/class/infiniband/{claimed[node]}/device", src_ib, bdf=bdf)
            node = None
        elif node is not None and self.g.nodes[node].get("kind") not in ("nic", "pci"):
            self._mismatch(d.name, "nic", f"RDMA device {d.name} names PCI function {bdf} as its device, but the "
                           f"PCI tree has a {self.g.nodes[node].get('kind')} there: its place in the PCIe tree "
                           "is unknown", src_ib, f"/sys/bus/pci/devices/{bdf}", bdf=bdf)
            node = None
        elif node is None and self.t.have_pcie:
            if bdf:
                self._mismatch(d.name, "nic", f"RDMA device {d.name} names PCI function {bdf}, which the PCI "
                               "tree does not have: its PCIe levels are unknown", src_ib,
                               f"/sys/bus/pci/devices/{bdf}", bdf=bdf)
            else:
                self._mismatch(d.name, "nic", f"RDMA device {d.name} is listed without a readable PCI device "
                               "link: its PCIe levels are unknown", "/sys/class/infiniband", src_ib)
        if node is not None:
            return node
        for cand in (f"nic:{bdf}" if bdf else None, f"nic:{d.name}", f"nic:{d.name}#{len(claimed)}"):
            if cand and cand not in self.g:
                self.g.add_node(cand, kind="nic", label=d.name, bdf=bdf, numa=None)
                return cand
            if cand and cand not in claimed and self.g.nodes[cand].get("kind") == "nic" \
                    and self.g.nodes[cand].get("label") == d.name:
                return cand
        raise AssertionError("unreachable: the last candidate node name is unique")  # pragma: no cover

    def _netdev_mismatches(self, devices: list) -> None:
        """Network interfaces and RDMA devices that name each other inconsistently."""
        names = {d.name for d in devices}
        owners: dict[str, list[str]] = {}
        for d in devices:
            for n in d.netdevs:
                owners.setdefault(n, []).append(d.name)
        for itf in getattr(self.netdev, "interfaces", ()) or ():
            src = f"/sys/class/net/{itf.name}/device/infiniband"
            if itf.ib_device and self.ib is not None and itf.ib_device not in names:
                self._mismatch(itf.name, "netdev", f"network interface {itf.name} belongs to RDMA device "
                               f"{itf.ib_device}, which the InfiniBand class does not list", src,
                               "/sys/class/infiniband")
            elif itf.ib_device and owners.get(itf.name) and itf.ib_device not in owners[itf.name]:
                other = owners[itf.name][0]
                self._mismatch(itf.name, "netdev", f"network interface {itf.name} belongs to RDMA device "
                               f"{itf.ib_device}, but RDMA device {other} lists it as its own", src,
                               f"/sys/class/infiniband/{other}/device/net")

    @staticmethod
    def _typical_rates(devices: list) -> dict[str, tuple[float, str | None]]:
        """Per link layer, the rate most active ports run at: what a port that is down should
        reach when it comes back (its own sysfs rate is meaningless while down)."""
        seen: dict[str, dict[float, list]] = {}
        for d in devices:
            for p in d.ports:
                if (p.state or "").upper() == "ACTIVE" and p.rate_gbit_s:
                    seen.setdefault(p.link_layer or "", {}).setdefault(p.rate_gbit_s, []).append(p.rate_raw)
        out = {}
        for layer, rates in seen.items():
            rate, raws = max(rates.items(), key=lambda kv: (len(kv[1]), kv[0]))
            out[layer] = (rate, raws[0])
        return out

    def _wire(self, name: str, node: str, p: Any, typical: dict) -> None:
        up = (p.state or "").upper() == "ACTIVE"
        kind = "roce" if (p.link_layer or "").lower() == "ethernet" else "ib"
        wire = f"wire:{name}:{p.port}"
        self.g.add_node(wire, kind="wire", label=f"{name} port {p.port} fabric")
        rate_desc = p.rate_raw or (f"{p.rate_gbit_s:g} Gb/s" if p.rate_gbit_s else None)
        if up:
            max_rate, max_desc = p.rate_gbit_s, rate_desc
        elif (p.link_layer or "") in typical:
            max_rate, raw = typical[p.link_layer or ""]
            max_desc = f"{raw or f'{max_rate:g} Gb/s'} (as the node's other active ports)"
        else:
            max_rate, max_desc = None, "unknown while down"
        link = Link(kind, node, wire, f"{name} port {p.port}", max_gbyte_s=wire_gbyte_s(max_rate),
                    current_gbyte_s=wire_gbyte_s(p.rate_gbit_s) if up else 0.0, max_desc=max_desc,
                    current_desc=f"{p.state or '?'} / {p.phys_state or '?'}" + (
                        f", {rate_desc}" if up and rate_desc else ""),
                    rate_gbit_s=p.rate_gbit_s, state=p.state, source=f"/sys/class/infiniband/{name}/ports/{p.port}")
        self.t.links.append(link)
        self.g.add_edge(node, wire, kind=kind, link=link.name)

    def _label_plain_nics(self) -> None:
        """NICs without RDMA (a management Ethernet port) are labelled by their interface name."""
        for itf in getattr(self.netdev, "interfaces", ()) or ():
            bdf = normalize_bdf(itf.pci_bdf) if itf.pci_bdf else None
            node = self.node_of_bdf.get(bdf) if bdf else None
            if node and not self.g.nodes[node].get("ib") and self.g.nodes[node].get("label") == bdf:
                self.g.nodes[node]["label"] = itf.name

    # -- NVLink -----------------------------------------------------------------------------------
    def _nvlinks(self) -> None:
        node_by_index = {g.index: g.node for g in self.t.gpus}
        gpu_by_bdf = {g.bdf: g.node for g in self.t.gpus if g.bdf}
        for g in getattr(self.nvml, "gpus", ()) or ():
            me = node_by_index.get(g.index)
            if me is None or not g.nvlinks:
                continue
            remotes = self.t.nv.setdefault(me, {})
            for l in g.nvlinks:
                remote = self._nvlink_remote(g, l, gpu_by_bdf)
                if remote is not None:
                    _count_nvlink(remotes.setdefault(remote, [0, 0, None]), l)
        self._nvlink_edges()
        self._nvlink_bundles()

    def _nvlink_remote(self, g: Any, l: Any, gpu_by_bdf: dict[str, str]) -> str | None:
        """The graph node at the far end of GPU ``g``'s NVLink ``l``: a GPU, an NVSwitch (added when
        the PCI tree lacks it), the GPU's NVLink domain for a switch NVML cannot address, a stand-in
        for an active link whose far end could not be read; None for an inactive link without one."""
        bdf = normalize_bdf(l.remote_bus_id)
        if bdf is None and l.remote_device_type == "switch":
            return self._domain_node(g)
        if bdf is None:
            if not l.active:
                return None
            return "nvswitch-fabric" if self.t.nvswitches else "nvlink:unknown"
        if bdf in gpu_by_bdf:
            return gpu_by_bdf[bdf]
        remote = self.node_of_bdf.get(bdf) or f"nvswitch:{bdf}"
        if remote not in self.t.nvswitches:
            if remote not in self.g:
                self.g.add_node(remote, kind="nvswitch", label=bdf, bdf=bdf)
                self.t.nvswitches.append(remote)
            elif self.g.nodes[remote].get("kind") == "nvswitch":
                self.t.nvswitches.append(remote)
        return remote

    def _nvlink_edges(self) -> None:
        """One graph edge per GPU and far end, carrying its link count, active count and version."""
        for me, remotes in self.t.nv.items():
            for remote, (total, active, version) in remotes.items():
                if remote in self.g:
                    self.g.add_edge(me, remote, kind="nvlink", links_total=total, links_active=active,
                                    version=version)

    def _nvlink_bundles(self) -> None:
        """Per GPU its NVLinks as one bundle, then one bundle per GPU peer it reaches directly."""
        for gpu in self.t.gpus:
            if gpu.node in self.t.nv:
                bundles = [nvlink_bundle(self.g, self.t.nv, self.t.nvswitches, gpu.node)] + [
                    nvlink_bundle(self.g, self.t.nv, self.t.nvswitches, gpu.node, r) for r in self.t.nv[gpu.node]
                    if self.g.nodes.get(r, {}).get("kind") == "gpu"]
                self.t.links.extend(b for b in bundles if b is not None)

    # -- inter-socket ------------------------------------------------------------------------------
    def _smp(self) -> None:
        numas = sorted(a["numa"] for _, a in self.g.nodes(data=True) if a.get("kind") == "numa")
        for i, x in enumerate(numas):
            for y in numas[i + 1:]:
                link = Link("smp", f"numa:{x}", f"numa:{y}", f"SMP NUMA{x} - NUMA{y}",
                            max_desc="inter-socket interconnect (rate not known)",
                            current_desc="inter-socket interconnect", source="system")
                self.t.links.append(link)
                self.g.add_edge(link.a, link.b, kind="smp", link=link.name)
