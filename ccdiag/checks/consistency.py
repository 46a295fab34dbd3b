"""Findings for devices two probes disagree on (``topology.consistency``).

Why: the probes read one node through separate doors (InfiniBand class, PCI tree, network
interfaces, NVML). When one names a device another lacks or places elsewhere, every verdict that
joins the two (GPU-to-NIC levels, GPUDirect, NCCL rails) stands on a guess. The topology builder
records each disagreement (:mod:`ccdiag.topology.mismatch`) instead of failing on it; this check
reports each as a warning naming the device and both sources, so the operator sees why the
affected levels are "unknown". A consistent node yields no finding here (the sources agreeing is
not a verdict of its own), so reports of healthy nodes are unchanged.
"""

from __future__ import annotations

from ccdiag.checks import CheckContext, check
from ccdiag.core.findings import WARN, Component, Evidence, Finding

_KIND = {"nic": "nic", "netdev": "netdev"}


@check("topology.consistency", what="agreement between probes")
def consistency(ctx: CheckContext) -> list[Finding]:
    """Every device named by one probe is where the others say it is."""
    topo = ctx.topology
    out: list[Finding] = []
    for m in getattr(topo, "mismatches", ()) or ():
        if m.kind == "gpu":
            continue  # NVML and PCI disagreeing on GPUs is gpu.count's failure, reported there
        comp = Component(_KIND.get(m.kind, "node"), m.device, bdf=m.bdf, device=m.device)
        out.append(Finding(
            "topology.consistency", WARN, comp, m.summary,
            evidence=tuple(Evidence(f"source {i + 1}", s, s) for i, s in enumerate(m.sources)),
            expected="every source names the same device at the same place",
            expected_source="one machine read through several probes",
            remedy="Re-read the node (a device may have been hot-plugged or reset during the read); if it "
                   "persists, compare the sources named above: a driver or firmware fault, or an edited "
                   "snapshot."))
    return out
