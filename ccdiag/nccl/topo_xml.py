"""A topology file in NCCL's XML format (``NCCL_TOPO_FILE``), from the topology ccdiag built.

NCCL loads this file instead of reading the PCI tree when the tree it would see is wrong, as in a
VM whose emulated bus hides the host's PCIe switches. Element and attribute names are NCCL's own
(``src/graph/xml.cc``, and the files NCCL writes with ``NCCL_TOPO_DUMP_FILE``): ``system`` >
``cpu`` (``numaid``, ``affinity``, ``arch``, ``vendor``) > ``pci`` (``busid``, ``class``,
``link_speed``, ``link_width``) > ``gpu`` / ``nic``. Only the PCI tree is written: NCCL still
discovers the GPUs and NICs and attaches them by bus id, which is what its guide asks of a topology
file ("a PCI tree functionally equivalent to the host").
"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

GPU_CLASS = "0x030200"  # 3D controller
NIC_CLASS = "0x020700"  # InfiniBand controller (NCCL keys on the busid, not the class)


def cpulist_mask(cpulist: str | None) -> str:
    """A kernel cpulist ("0-3,8") as the comma-grouped hex mask NCCL writes ("0000010f")."""
    from ccdiag.probes.system import cpulist_cpus

    bits = 0
    for c in cpulist_cpus(cpulist, max_cpu=4095):
        bits |= 1 << c
    text = f"{bits:x}"
    text = text.rjust(((len(text) + 7) // 8) * 8, "0")
    return ",".join(text[i:i + 8] for i in range(0, len(text), 8))


def _pci(parent: ET.Element, bdf: str, klass: str, link: Any) -> ET.Element:
    attrs = {"busid": bdf, "class": klass,
             "link_speed": f"{_gts(link.gen_max)} GT/s PCIe" if link is not None and link.gen_max else "",
             "link_width": str(link.width_max or 0) if link is not None else "0"}
    return ET.SubElement(parent, "pci", attrs)


def _gts(gen: int | None) -> str:
    return {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}.get(gen or 0, "")


def topology_xml(topo: Topology, runs: Any = None) -> str:
    """The GPUs and NICs of ``topo`` under one ``cpu`` element per NUMA node, in NCCL's format."""
    system = ET.Element("system", {"version": "1"})
    numas = sorted({d.numa for d in list(topo.gpus()) + list(topo.nics()) if d.numa is not None}) or [0]
    cpus: dict[int | None, ET.Element] = {}
    for n in numas:
        cpus[n] = ET.SubElement(system, "cpu", {"numaid": str(n), "affinity": cpulist_mask(topo.numa_cpus.get(n)),
                                                "arch": platform.machine() or "x86_64"})
    for g in topo.gpus():
        if not g.bdf:
            continue
        parent = cpus.get(g.numa, cpus[numas[0]])
        _pci(parent, g.bdf, GPU_CLASS, topo.up_link.get(g.node))
    for nic in topo.nics():
        if not nic.bdf:
            continue
        parent = cpus.get(nic.numa, cpus[numas[0]])
        _pci(parent, nic.bdf, NIC_CLASS, topo.up_link.get(nic.node))
    ET.indent(system, "  ")
    return ET.tostring(system, encoding="unicode") + "\n"
