"""The topology as an ``nvidia-smi topo -m`` matrix, and its comparison with nvidia-smi's own.

Producing the very structure the text parser yields (:class:`ccdiag.probes.smi_topo.TopoMatrix`)
means one renderer and one comparison serve both: the matrix ccdiag derived from sysfs and NVML,
and the one nvidia-smi printed (live, recorded, or pasted into a ticket).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ccdiag.probes.smi_topo import EXTRA_COLUMNS, TopoMatrix, cells_equal

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

#: the legend nvidia-smi prints under the matrix (its wording, so a rendered matrix reads the same)
SMI_LEGEND = {
    "X": "Self",
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "NV#": "Connection traversing a bonded set of # NVLinks",
}


def to_topo_matrix(topo: Topology) -> TopoMatrix:
    labels, cells, info = topo.matrix_rows()
    cpu: dict[str, str | None] = {}
    numa: dict[str, str | None] = {}
    gnuma: dict[str, str | None] = {}
    legend = {}
    for label in labels:
        facts = info.get(label, {})
        if "nic_name" in facts:
            legend[label] = facts["nic_name"]
            cpu[label] = numa[label] = gnuma[label] = None
            continue
        cpu[label] = facts.get("cpu_affinity")
        n = facts.get("numa_affinity")
        numa[label] = None if n is None else str(n)
        g = facts.get("gpu_numa_id")
        gnuma[label] = None if g is None else str(g)
    out_cells = {k: (None if v == "unknown" else v) for k, v in cells.items()}
    return TopoMatrix(devices=tuple(labels), cells=out_cells, cpu_affinity=cpu, numa_affinity=numa,
                      gpu_numa_id=gnuma, nic_legend=legend, legend=dict(SMI_LEGEND),
                      extra_columns=tuple(EXTRA_COLUMNS) if any(l.startswith("GPU") for l in labels) else ())


def compare(topo: Topology, smi: TopoMatrix) -> list[str]:
    """nvidia-smi's matrix against ccdiag's: "nvidia-smi vs ccdiag: GPU0 - mlx5_1: NODE vs PIX"."""
    mine = to_topo_matrix(topo)
    diffs = cells_equal(smi, mine)
    out = []
    for d in diffs:
        d = d.replace("only in the first matrix", "only in nvidia-smi's matrix")
        d = d.replace("only in the second matrix", "only in ccdiag's matrix")
        out.append(f"nvidia-smi vs ccdiag: {d}")
    return out
