"""Platform settings that break many components at once, each judged as one root finding.

One kernel or BIOS setting can fail a dozen checks that would otherwise each send the operator to
a different part: the IOMMU in translation mode (GPUDirect RDMA needs 1:1 addresses; the kernel
also turns ACS on for its isolation groups), or no subnet manager on an InfiniBand fabric (every
port with a physical link stays INIT). The checks here name that setting; :mod:`ccdiag.checks.causes`
folds what it explains beneath it.
"""

from __future__ import annotations

from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import NODE, node_component
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Evidence, Finding
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NVML, PROBE_PCIE, PROBE_SYSTEM

#: CUDA "GPUDirect RDMA" guide, Design Considerations, Supported Systems: GPUDirect RDMA relies on
#: every PCI device seeing the same physical addresses, so an IOMMU doing any translation other than
#: 1:1 is incompatible with it; the IOMMU must be disabled or set to pass-through.
CUDA_GDR = "CUDA GPUDirect RDMA guide (Design Considerations: Supported Systems, IOMMUs)"
PEERMEM = ("nvidia_peermem", "nv_peer_mem")
IOMMU_SOURCE = "/sys/kernel/iommu_groups/*/type, /sys/class/iommu, /proc/cmdline"


def _rdma_in_use(ctx: CheckContext) -> tuple[list[str], list[str]]:
    """Active RDMA ports, and the GPUDirect module loaded: what makes IOMMU translation matter."""
    ib = ctx.data(PROBE_INFINIBAND)
    ports = [f"{d.name}/{p.port}" for d in getattr(ib, "devices", ()) or () for p in d.ports
             if (p.state or "").upper() == "ACTIVE"]
    sysobs = ctx.data(PROBE_SYSTEM)
    mods = [m for m in PEERMEM if m in (getattr(sysobs, "modules", ()) or ())]
    return ports, mods


def _gpu_count(ctx: CheckContext) -> int:
    nvml = ctx.data(PROBE_NVML)
    if nvml is not None and nvml.gpus:
        return len(nvml.gpus)
    pcie = ctx.pcie
    return sum(1 for d in getattr(pcie, "devices", ()) or () if d.kind == "gpu")


@check("platform.iommu", needs=(PROBE_SYSTEM,), uses=(PROBE_INFINIBAND, PROBE_NVML, PROBE_PCIE), what="IOMMU mode")
def iommu(ctx: CheckContext) -> list[Finding]:
    """The IOMMU must not translate GPU and NIC addresses where GPUDirect RDMA is used."""
    cid = "platform.iommu"
    sysobs = ctx.data(PROBE_SYSTEM)
    if _gpu_count(ctx) == 0:
        return [Finding(cid, SKIP, NODE, "No GPU on this node; the IOMMU mode does not affect GPUDirect here.")]
    mode = sysobs.iommu
    ports, mods = _rdma_in_use(ctx)
    cmdline = [a for a in (sysobs.cmdline or "").split() if "iommu" in a]
    ev = (Evidence("IOMMU mode", mode, IOMMU_SOURCE), Evidence("kernel command line (iommu)", cmdline or None,
                                                                  "/proc/cmdline"),
          Evidence("active RDMA ports", ports, "/sys/class/infiniband/*/ports/*/state"),
          Evidence("GPUDirect module", mods or None, "/proc/modules"))
    if mode is None:
        status = UNKNOWN if ports or mods else SKIP
        return [Finding(cid, status, NODE, "IOMMU mode not readable (no iommu_groups type, /sys/class/iommu or "
                        "command line)" + ("; GPUDirect RDMA is in use here, so it matters." if status == UNKNOWN
                                           else "."), evidence=ev,
                        remedy="Read /sys/kernel/iommu_groups/*/type as root (identity = pass-through).")]
    if mode in ("off", "passthrough"):
        return [Finding(cid, PASS, NODE, f"IOMMU {mode}: GPU and NIC DMA addresses are not translated.", evidence=ev,
                        expected="off or pass-through", expected_source=CUDA_GDR)]
    gdr = bool(ports or mods)
    why = ("GPUDirect RDMA is in use (" + ", ".join(filter(None, [f"{len(ports)} active RDMA port(s)" if ports else "",
                                                                   "/".join(mods)])) + ")") if gdr else \
        "no RDMA port is active, but GPU peer-to-peer traffic is translated too"
    return [Finding(
        cid, FAIL if gdr else WARN, node_component("IOMMU"),
        f"IOMMU translates DMA addresses ({mode}); {why}: GPUDirect RDMA needs 1:1 addresses.", evidence=ev,
        expected="IOMMU off or in pass-through (iommu=pt)", expected_source=CUDA_GDR,
        remedy="Add iommu=pt (with intel_iommu=on or amd_iommu=on kept if virtualisation needs them) to the "
               "kernel command line and reboot; check /sys/kernel/iommu_groups/*/type reads 'identity'. In "
               "translation mode the kernel also enables PCIe ACS, which sends peer-to-peer traffic through the CPU.",
        details={"mode": mode, "gpudirect": gdr})]


# --------------------------------------------------------------------------------- InfiniBand SM

def _init_ports(ib: Any) -> list[tuple[Any, Any]]:
    out = []
    for d in ib.devices:
        for p in d.ports:
            state = (p.state or "").upper()
            phys_up = (p.phys_state or "").replace(" ", "").lower() == "linkup" or p.phys_state_code == 5
            if state in ("INIT", "ARMED") and phys_up and (p.link_layer or "InfiniBand") == "InfiniBand":
                out.append((d, p))
    return out


@check("ib.subnet_manager", needs=(PROBE_INFINIBAND,), what="InfiniBand subnet manager")
def subnet_manager(ctx: CheckContext) -> list[Finding]:
    """InfiniBand ports whose physical link is up stay INIT until a subnet manager assigns them a LID
    and activates them: several INIT ports that know of no SM are one fault, the missing SM."""
    cid = "ib.subnet_manager"
    ib = ctx.data(PROBE_INFINIBAND)
    ib_ports = [(d, p) for d in ib.devices for p in d.ports if (p.link_layer or "InfiniBand") == "InfiniBand"]
    if not ib_ports:
        return [Finding(cid, SKIP, NODE, "No InfiniBand port (Ethernet/RoCE needs no subnet manager).")]
    init = _init_ports(ib)
    sms = sorted({p.sm_lid for _, p in ib_ports if p.sm_lid})
    ev = (Evidence("INIT ports with the physical link up", [f"{d.name}/{p.port}" for d, p in init],
                   "/sys/class/infiniband/*/ports/*/state, phys_state"),
          Evidence("subnet manager LIDs seen", sms or None, "/sys/class/infiniband/*/ports/*/sm_lid"))
    if not init:
        return [Finding(cid, PASS, NODE, "No port is waiting for a subnet manager"
                        + (f" (SM at LID {', '.join(str(s) for s in sms)})." if sms else "."), evidence=ev)]
    no_sm = [(d, p) for d, p in init if not p.sm_lid]
    if not no_sm:
        return [Finding(cid, WARN, NODE, f"{len(init)} port(s) INIT although a subnet manager (LID "
                        f"{', '.join(str(s) for s in sms)}) is known: it has not activated them.", evidence=ev,
                        remedy="Check the subnet manager's log (opensm or UFM) for errors sweeping this node.",
                        details={"ports": [f"{d.name}/{p.port}" for d, p in init]})]
    return [Finding(
        cid, FAIL, node_component("InfiniBand subnet manager"),
        f"{len(no_sm)} InfiniBand port(s) have a physical link but stay INIT with no subnet manager (SM LID 0): "
        "no subnet manager runs on this fabric, or none reaches these ports.", evidence=ev,
        expected="a subnet manager that activates every port", expected_source="InfiniBand port state machine",
        remedy="Start a subnet manager for this fabric (opensm on one node, or the switch's/UFM's SM) and check it "
               "sees these ports (`sminfo`, `ibstat` SM lid); the ports turn ACTIVE within a sweep.",
        details={"root": "no_subnet_manager", "ports": [f"{d.name}/{p.port}" for d, p in no_sm]})]
