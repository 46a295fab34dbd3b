"""The sysfs subsets a bug report lets ccdiag rebuild: the PCI tree, the RDMA ports, the DMI identity.

A bug report holds no ``/sys`` tree, but its ``lspci`` sections hold what the PCIe probe reads
there: every function with its ids and class, the bridge above it, its link capability and status,
NUMA node, driver and configuration space. Written back as the files and symlinks the kernel would
show (``/sys/bus/pci/devices/<bdf>`` -> ``/sys/devices/pci0000:15/0000:15:01.0/.../<bdf>``, with
``vendor``, ``class``, ``current_link_speed`` ...), the unchanged PCIe probe reads the node's tree
from the report. Likewise ``ibstat`` gives ``/sys/class/infiniband/<dev>/ports/<n>/{state,
phys_state, link_layer, lid, sm_lid}`` and ``dmidecode`` the ``/sys/class/dmi/id`` strings.

Only what the sections say is written: a value they do not give (AER counters, the port rate
ibstat prints without its width, configuration space beyond what was dumped) is left out, so the
replaying door answers it "not recorded" and the probe says it could not read it.
"""

from __future__ import annotations

from ccdiag.host.snapshot import SnapshotData
from ccdiag.nvfiles import ibstat as ib
from ccdiag.nvfiles.lspci import PciListing, chain

PCI_DEVICES = "/sys/bus/pci/devices"
IB_CLASS = "/sys/class/infiniband"
DMI = "/sys/class/dmi/id"
#: a full configuration space: the dump of ``lspci -xxxx``; a shorter one (``-xxx``: 256 bytes) is
#: not written, or the probe would read a root-only file's short form as "no permission"
FULL_CONFIG_BYTES = 4096


def speed_text(gts: float | None) -> str | None:
    """A link speed as sysfs writes it: ``16.0 GT/s PCIe``; ``Unknown`` for a link that is down."""
    if gts is None:
        return None
    return f"{gts:.1f} GT/s PCIe"


def put_pci_tree(snap: SnapshotData, listing: PciListing) -> int:
    """Write every function of ``listing`` whose place in the tree is known; returns how many."""
    written = 0
    names = []
    for bdf, fn in sorted(listing.functions.items()):
        if not listing.tree_seen and not any(f.secondary_bus is not None for f in listing.functions.values()):
            break  # no tree and no bridge ranges: where devices sit is unknown, write nothing
        path = chain(listing, bdf)
        real = f"/sys/devices/{listing.roots.get(bdf) or 'pci' + bdf[:4] + ':' + bdf[5:7]}/" + "/".join(path)
        snap.put_dir(real)
        snap.put_link(f"{PCI_DEVICES}/{bdf}", "../../.." + real[len("/sys"):])
        names.append(bdf)
        if fn.vendor is not None:
            snap.put_file(f"{real}/vendor", f"0x{fn.vendor:04x}\n")
        if fn.device is not None:
            snap.put_file(f"{real}/device", f"0x{fn.device:04x}\n")
        if fn.class_code is not None:
            snap.put_file(f"{real}/class", f"0x{fn.class_code:06x}\n")
        if fn.numa_node is not None:
            snap.put_file(f"{real}/numa_node", f"{fn.numa_node}\n")
        if fn.link_from is not None:
            if fn.speed_gts is not None or fn.width == 0:
                snap.put_file(f"{real}/current_link_speed",
                              ((speed_text(fn.speed_gts) or "Unknown") if fn.width else "Unknown") + "\n")
            if fn.width is not None:
                snap.put_file(f"{real}/current_link_width", f"{fn.width}\n")
            if fn.max_speed_gts is not None:
                snap.put_file(f"{real}/max_link_speed", f"{speed_text(fn.max_speed_gts)}\n")
            if fn.max_width is not None:
                snap.put_file(f"{real}/max_link_width", f"{fn.max_width}\n")
        if len(fn.config) >= FULL_CONFIG_BYTES:
            snap.put_file(f"{real}/config", fn.config[:FULL_CONFIG_BYTES])
        if fn.driver:
            snap.put_link(f"{real}/driver", f"../../../../bus/pci/drivers/{fn.driver}")
        written += 1
    if names:
        snap.listings[PCI_DEVICES] = names
        snap.put_dir(PCI_DEVICES)
    return written


def put_infiniband(snap: SnapshotData, devices: list[ib.IbstatDevice]) -> int:
    """``/sys/class/infiniband`` from ``ibstat``; returns how many ports were written."""
    ports = 0
    for dev in devices:
        base = f"{IB_CLASS}/{dev.name}"
        snap.put_dir(base)
        for key, name in (("Firmware version", "fw_ver"), ("CA type", "hca_type")):
            if dev.values.get(key):
                snap.put_file(f"{base}/{name}", dev.values[key] + "\n")
        guid = dev.values.get("Node GUID", "")
        if guid.startswith("0x") and len(guid) == 18:
            g = guid[2:]
            snap.put_file(f"{base}/node_guid", ":".join(g[i:i + 4] for i in range(0, 16, 4)) + "\n")
        snap.listings[f"{base}/ports"] = [str(p.port) for p in dev.ports]
        for port in dev.ports:
            pdir = f"{base}/ports/{port.port}"
            snap.put_dir(pdir)
            state = port.values.get("State")
            if state in ib.STATE_CODES:
                snap.put_file(f"{pdir}/state", f"{ib.STATE_CODES[state]}: {ib.STATE_SYSFS[state]}\n")
            phys = port.values.get("Physical state")
            if phys in ib.PHYS_CODES:
                snap.put_file(f"{pdir}/phys_state", f"{ib.PHYS_CODES[phys]}: {phys}\n")
            if port.values.get("Link layer"):
                snap.put_file(f"{pdir}/link_layer", port.values["Link layer"] + "\n")
            for key, name in (("Base lid", "lid"), ("SM lid", "sm_lid")):
                value = port.values.get(key, "")
                if value.isdigit():
                    snap.put_file(f"{pdir}/{name}", f"0x{int(value):x}\n")
            ports += 1
    if devices:
        snap.listings[IB_CLASS] = [d.name for d in devices]
        snap.put_dir(IB_CLASS)
    return ports


def put_dmi(snap: SnapshotData, files: dict[str, str]) -> None:
    for name, value in files.items():
        snap.put_file(f"{DMI}/{name}", value + "\n")


#: PCIe generation -> GT/s per lane
GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def put_gpu_links(snap: SnapshotData, links: list[tuple[str, dict[str, int | None]]]) -> int:
    """Each GPU's own PCIe link as nvidia-smi printed it (``{"gen_current", "gen_max",
    "width_current", "width_max"}`` by bus id), written as a GPU function on its own under a root
    bus: for judging a pasted ``nvidia-smi -q`` alone, where nothing says which bridges are above
    the GPU (never used to build a node's topology)."""
    names = []
    for bdf, link in links:
        real = f"/sys/devices/pci{bdf[:4]}:{bdf[5:7]}/{bdf}"
        snap.put_dir(real)
        snap.put_link(f"{PCI_DEVICES}/{bdf}", "../../.." + real[len("/sys"):])
        snap.put_file(f"{real}/vendor", "0x10de\n")
        snap.put_file(f"{real}/class", "0x030200\n")
        for key, name in (("gen_current", "current_link_speed"), ("gen_max", "max_link_speed")):
            gen = link.get(key)
            if gen in GEN_GTS:
                snap.put_file(f"{real}/{name}", f"{speed_text(GEN_GTS[gen])}\n")
        for key, name in (("width_current", "current_link_width"), ("width_max", "max_link_width")):
            if link.get(key) is not None:
                snap.put_file(f"{real}/{name}", f"{link[key]}\n")
        names.append(bdf)
    if names:
        snap.listings[PCI_DEVICES] = names
        snap.put_dir(PCI_DEVICES)
    return len(names)
