"""A topology file in NCCL's XML format (``NCCL_TOPO_FILE``), written only when it changes what NCCL sees.

In a VM whose emulated PCI bus puts every GPU and NIC straight under one host bridge, NCCL sees every
GPU-NIC path as PHB and cannot tell which NIC sits beside which GPU. The providers' files (Azure's
``ndv*-topo.xml``) fix that by grouping each GPU with its NIC under a synthetic PCI switch; this
module writes the same shape from what the node shows: GPUs and NICs of one NUMA node are paired in
bus-id order (the order the providers' files follow), each NIC with its GPUs under one synthetic
switch. A file that would only repeat the flat tree NCCL already reads is not written.

Vocabulary, as NCCL's ``src/graph/xml.cc`` and ``topo.cc`` read it: ``system version="1"`` >
``cpu`` (``numaid``; ``affinity`` as the comma-grouped hex mask; ``arch`` one of ``x86_64``,
``arm64``, ``ppc64``) > ``pci`` (``busid``, ``class``, ``link_speed`` from NCCL's own table such as
``"32.0 GT/s PCIe"``, ``link_width``). An attribute whose value is unknown is left out rather than
written empty: NCCL fills a missing ``affinity``, ``arch`` or CPU ``vendor`` from the machine it runs
on and a missing link from sysfs, while an empty ``link_speed`` stops it reading sysfs. Synthetic
switches take bus ids in domain ``ffff``, which no real device uses, and carry the fastest link of
their children (they have no sysfs entry to be read from).
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

GPU_CLASS = "0x030200"  # 3D controller
NIC_CLASS = "0x020700"  # InfiniBand controller (NCCL keys on the busid; class 0x02 means NIC)
BRIDGE_CLASS = "0x060400"
#: PCIe generation -> the link_speed string NCCL's kvDictPciGen parses
NCCL_LINK_SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
                   5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
#: kernel machine names -> NCCL's arch vocabulary (kvDictCpuArch)
NCCL_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64",
             "ppc64": "ppc64"}


def nccl_arch(machine: str | None) -> str | None:
    return NCCL_ARCH.get((machine or "").lower())


def cpulist_mask(cpulist: str | None) -> str | None:
    """A kernel cpulist ("0-3,8") as the comma-grouped hex mask NCCL writes ("0000010f"); None if unknown."""
    from ccdiag.probes.system import cpulist_cpus

    bits = 0
    for c in cpulist_cpus(cpulist, max_cpu=4095):
        bits |= 1 << c
    if not bits:
        return None
    text = f"{bits:x}"
    text = text.rjust(((len(text) + 7) // 8) * 8, "0")
    return ",".join(text[i:i + 8] for i in range(0, len(text), 8))


def _link_attrs(link: Any) -> dict[str, str]:
    attrs = {}
    if link is not None and NCCL_LINK_SPEED.get(link.gen_max or 0):
        attrs["link_speed"] = NCCL_LINK_SPEED[link.gen_max]
    if link is not None and link.width_max:
        attrs["link_width"] = str(link.width_max)
    return attrs


def _fastest(links: list[Any]) -> dict[str, str]:
    known = [l for l in links if l is not None and l.gen_max and l.width_max]
    if not known:
        return {}
    best = max(known, key=lambda l: (l.gen_max, l.width_max))
    return _link_attrs(best)


def pairing(topo: Any) -> dict[int, list[tuple[Any, list[Any]]]] | None:
    """NUMA node -> [(NIC, its GPUs)], pairing in bus-id order inside each NUMA node; None when a
    device's NUMA node is unknown (the pairing could not be derived)."""
    gpus = [g for g in topo.gpus() if g.bdf]
    nics = [n for n in topo.nics() if n.bdf]
    if not gpus or not nics or any(d.numa is None for d in gpus + nics):
        return None
    out: dict[int, list[tuple[Any, list[Any]]]] = {}
    for numa in sorted({d.numa for d in gpus + nics}):
        ng = sorted((g for g in gpus if g.numa == numa), key=lambda d: d.bdf)
        nn = sorted((n for n in nics if n.numa == numa), key=lambda d: d.bdf)
        if not nn:
            return None  # GPUs without a local NIC: the pairing is not a NUMA-local one
        groups: list[tuple[Any, list[Any]]] = [(n, []) for n in nn]
        for i, g in enumerate(ng):
            groups[i * len(nn) // len(ng)][1].append(g)
        out[numa] = groups
    return out


def topology_xml(topo: Any, runs: Any = None, machine: str | None = None) -> str | None:
    """The file, or None when no GPU-NIC pairing can be derived or a synthetic switch would have no
    link to describe (then nothing worth writing exists)."""
    groups = pairing(topo)
    if groups is None:
        return None
    system = ET.Element("system", {"version": "1"})
    arch = nccl_arch(machine)
    switch = 0
    for numa, pairs in groups.items():
        attrs = {"numaid": str(numa)}
        mask = cpulist_mask(topo.numa_cpus.get(numa))
        if mask:
            attrs["affinity"] = mask
        if arch:
            attrs["arch"] = arch
        cpu = ET.SubElement(system, "cpu", attrs)
        for nic, gpus in pairs:
            children = [(nic, NIC_CLASS)] + [(g, GPU_CLASS) for g in gpus]
            links = [topo.up_link.get(d.node) for d, _ in children]
            sw_attrs = _fastest(links)
            if len(sw_attrs) < 2:
                return None
            sw = ET.SubElement(cpu, "pci", {"busid": f"ffff:ff:{switch:02x}.0", "class": BRIDGE_CLASS, **sw_attrs})
            switch += 1
            for (dev, klass), link in zip(children, links):
                ET.SubElement(sw, "pci", {"busid": dev.bdf, "class": klass, **_link_attrs(link)})
    ET.indent(system, "  ")
    return ET.tostring(system, encoding="unicode") + "\n"
