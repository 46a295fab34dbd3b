"""Builds the bundled SYNTHESIZED snapshots of an 8-GPU / 8-NIC HGX H100-class node.

    python samples/make_samples.py            # rewrites samples/*.snap.tar.gz

Nothing in these snapshots was read from a machine. They are assembled with tests/synth (the
kernel's sysfs layout and value formats, the NVML record format) from facts found in real outputs
kept under ``tests/fixtures/corpus`` (each file names its public source on its first lines; cited
in each snapshot's ``meta.json`` under ``sources``):

* the matrix to reproduce (NV18 via NVSwitches; NIC k PIX to GPU k; NODE within a socket, SYS
  across; NUMA 0 = CPUs 0-47,96-143 for GPU0-3, NUMA 1 = 48-95,144-191 for GPU4-7; driver
  570.133.20): ``topo-m/h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt``;
* ConnectX-7 MT4129 NDR 400 ports, firmware 28.41.1000, node GUIDs and LIDs (taken in order for
  mlx5_0..7): a public ``ibstat`` of an 8x ConnectX-7 NDR node with a BlueField-3 bond;
* sysfs rate "400 Gb/sec (4X NDR)" and PCIe "32.0 GT/s PCIe": ``sysfs/pci-link-sysfs-values-gb10-...``
  and the NDR rate string parsed by prometheus/procfs ``sysfs/class_infiniband.go``;
* P2P all OK on an NVSwitch H100 node: ``topo-p2p/p2p-r-h100-x8-all-ok.txt``;
* GPU bus ids 18/2a/3a/5d/9a/ab/ba/db: a public NCCL_DEBUG=INFO log of a 2-node, 16-rank HGX-class
  run (busIds 18000..db000), via synth.nvml.

Made up (illustrative only): every bus number other than the GPUs', the switch/root port ids,
addresses, counters (the IB data counters and the NVLink data counters both move between the
epochs), the management NIC, the kernel log lines' timing, and the fault values of
the degraded sample. The faults of the degraded sample are listed in samples/README.md.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# the synthesizers live with the tests (they are not part of the installed package)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from ccdiag.host.snapshot import SnapshotData  # noqa: E402
from synth import nvml as snv  # noqa: E402
from synth import sysfs as ssf  # noqa: E402

HEALTHY = "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = "hgx-h100-8gpu-degraded.snap.tar.gz"

TIME_EPOCH = 1735732800.0  # 2025-01-01T12:00:00Z: fixed so the samples rebuild identically
WINDOW_S = 10.0
DRIVER = "570.133.20"
NUMA_CPUS = ("0-47,96-143", "48-95,144-191")
GPU_BUSES = snv.HGX_GPU_BUSES
#: ConnectX-7 node GUIDs and LIDs from the corpus ibstat (CAs mlx5_0,1,4,5,6,7,8,9 there)
IB_GUIDS = ("58a2e10300a7820e", "a088c20300da6342", "a088c20300da656a", "a088c20300da62aa",
            "58a2e10300a78796", "58a2e10300a78756", "58a2e10300a78b5e", "a088c20300da62c2")
IB_LIDS = (128, 534, 972, 1775, 1494, 717, 774, 2015)
CX7_FW = "28.41.1000"

SOURCES = [
    "tests/fixtures/corpus/topo-m/h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt",
    "public ibstat of an 8x ConnectX-7 MT4129 NDR node (CA GUIDs, LIDs, firmware 28.41.1000)",
    "tests/fixtures/corpus/topo-p2p/p2p-r-h100-x8-all-ok.txt",
    "tests/fixtures/corpus/sysfs/pci-link-sysfs-values-gb10-rootport-and-gpu.txt",
    "public NCCL_DEBUG=INFO log of a 2-node 16-rank HGX-class run (GPU busIds 18000..db000)",
    "PCIe and NVLink rates: PCI-SIG base specifications as tabulated in stas00/ml-engineering network/README.md",
]

#: ACS features a kernel enables on a port for isolation (SrcValid, ReqRedir, CmpltRedir, UpstreamFwd)
ACS_ISOLATION = ssf.ACS_SV | ssf.ACS_RR | ssf.ACS_CR | ssf.ACS_UF


def layout(i: int, variant: "Variant | None" = None) -> dict:
    """Bus numbers around GPU ``i``: its own host bridge and root port, one Gen5 switch whose
    downstream port 0 leads to the GPU and port 1 to the GPU's NIC (the PIX pair)."""
    b = GPU_BUSES[i]
    rc = f"pci0000:{b - 3:02x}"
    rp = f"0000:{b - 3:02x}:01.0"
    up = f"0000:{b - 2:02x}:00.0"
    down_gpu = f"0000:{b - 1:02x}:00.0"
    down_nic = f"0000:{b - 1:02x}:01.0"
    nic = f"0000:{b + 1:02x}:00.0"
    if variant is not None and i in variant.nic_at:
        nic = variant.nic_at[i][2]
    return {"numa": 0 if i < 4 else 1, "rc": rc, "rp": rp, "up": up, "down_gpu": down_gpu,
            "down_nic": down_nic, "gpu": f"0000:{b:02x}:00.0", "nic": nic}


def _guid(g: str) -> str:
    return ":".join(g[k:k + 4] for k in range(0, 16, 4))


def _ipoib_hwaddr(g: str) -> str:
    raw = "00000049fe80000000000000" + g  # QPN + link-local GID prefix + port GUID: 20 bytes
    return ":".join(raw[k:k + 2] for k in range(0, 40, 2))


def smi_topo_text(nv: str = "NV18") -> str:
    """``nvidia-smi topo -m`` as the tool prints it (tab separated) for this layout: SYNTHESIZED,
    rendered from the corpus matrix's structure."""
    labels = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(8)]

    def level(a: int, b: int) -> str:
        if a == b:
            return " X "
        ga, gb = a < 8, b < 8
        if ga and gb:
            return nv
        ia, ib = a % 8, b % 8
        if ia == ib:
            return "PIX"
        return "NODE" if (ia < 4) == (ib < 4) else "SYS"

    lines = ["\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a, lab in enumerate(labels):
        cells = [level(a, b) for b in range(16)]
        if a < 8:
            numa = 0 if a < 4 else 1
            cells += [NUMA_CPUS[numa], str(numa), "", "N/A"]
        lines.append(lab + "\t" + "\t".join(cells))
    legend = [
        "", "Legend:", "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
        "", "NIC Legend:", "",
    ] + [f"  NIC{i}: mlx5_{i}" for i in range(8)]
    return "\n".join(lines + legend) + "\n\n"


def smi_p2p_text() -> str:
    """``nvidia-smi topo -p2p <mode>`` with every pair OK (SYNTHESIZED after the corpus -p2p r)."""
    labels = [f"GPU{i}" for i in range(8)]
    lines = ["\t" + "\t".join(labels)]
    for a, lab in enumerate(labels):
        lines.append(" " + lab + "\t" + "\t".join("X" if a == b else "OK" for b in range(8)))
    lines += ["", "Legend:", "", "  X    = Self", "  OK   = Status Ok", "  CNS  = Chipset not supported",
              "  GNS  = GPU not supported", "  TNS  = Topology not supported", "  NS   = Not supported",
              "  U    = Unknown"]
    return "\n".join(lines) + "\n"


def _traffic(i: int, epoch: int) -> dict:
    """Data counters that move between the epochs of a busy node (4-byte words, as IB counts)."""
    base = 10_000_000_000 * (i + 1)
    step = 2_500_000_000 * epoch  # ~ 1 GB/s for 10 s
    return {"port_xmit_data": base + step, "port_rcv_data": base + step + 12345,
            "port_xmit_packets": base // 1000 + step // 1000, "port_rcv_packets": base // 1000 + step // 1000 + 7,
            "unicast_xmit_packets": base // 1000 + step // 1000, "unicast_rcv_packets": base // 1000 + step // 1000}


def _nvlink_traffic(i: int, epoch: int, idle_links: tuple[int, ...] = ()) -> dict[int, tuple[int, int]]:
    """SYNTHESIZED NVLink data counters in KiB, link -> (tx, rx), as NVML's throughput fields
    count them: a few TiB per link over the node's uptime, and about 64 MiB/s per link and
    direction during the 10 s window; a link that is down (``idle_links``) does not move."""
    out = {}
    for k in range(18):
        n = i * 18 + k
        tx = 2_900_000_000 + 7_919_113 * n
        rx = tx + 1_234_567 + 31 * n
        if k not in idle_links:
            tx += epoch * (640_000 + 1_009 * n)
            rx += epoch * (655_360 + 997 * n)
        out[k] = (tx, rx)
    return out


@dataclasses.dataclass(frozen=True)
class Variant:
    """What a fault scenario changes on top of the healthy (or degraded) node; every hook is
    optional. Used by the scenario tests (tests/scenarios_node.py) to build one snapshot per fault
    with this same builder. ``gpus(gpus, epoch)`` edits the NVML GPUs of each epoch;
    ``ib_port(i, spec)`` edits mlx5_i's port; ``gpu_link(i)`` gives GPU i's PCIe link (None: as
    built); ``acs`` the GPUs whose switch port has ACS on; ``system`` overrides add_system's
    arguments; ``kmsg`` adds kernel-log lines (seconds since boot, message, priority)."""

    name: str = "variant"
    description: str = ""
    gpus: Any = None
    ib_port: Any = None
    gpu_link: Any = None
    acs: tuple[int, ...] = ()
    system: dict = dataclasses.field(default_factory=dict)
    kmsg: tuple = ()
    nic_at: dict = dataclasses.field(default_factory=dict)  # i -> (root complex, root port, NIC bdf, NUMA node)
    ib_later: dict = dataclasses.field(default_factory=dict)  # i -> {port attribute: value in the second sample}


def build(degraded: bool, variant: Variant | None = None) -> SnapshotData:
    kind = "degraded" if degraded else "healthy"
    v = variant or Variant()
    faults = ("GPU3 PCIe trained x8 (max x16); GPU5 NVLink 7 inactive; mlx5_4 port 1 DOWN/Polling; "
              "XID 79 and GPU6 lost to NVML; GPU2 remapped rows pending; nvidia_peermem not loaded; "
              "mlx5_1 symbol_error rising between epochs; ACS enabled on the switch port above GPU1")
    description = (
        f"SYNTHESIZED {kind} 8x H100 SXM / 8x ConnectX-7 NDR400 HGX-class node, built by "
        "samples/make_samples.py with tests/synth from facts in real outputs (see sources); "
        "no value was read from a machine." + (f" Faults: {faults}." if degraded else ""))
    if variant is not None:
        kind = f"{kind}-{v.name}"
        description += f" Scenario {v.name}: {v.description}"
    snap = ssf.new_snapshot(f"hgx-h100-synth-{kind}", kernel="5.15.0-131-generic", description=description,
                            time_epoch=TIME_EPOCH)
    snap.meta.update(window_s=WINDOW_S, sources=list(SOURCES), sample=kind)

    # -- PCIe: GPUs, their switches and NICs -----------------------------------------------------------
    full = ssf.Link(ssf.GEN5, 16, ssf.GEN5, 16)
    x8 = ssf.Link(ssf.GEN5, 8, ssf.GEN5, 16)
    for i in range(8):
        L = layout(i)
        numa, cpus = L["numa"], NUMA_CPUS[L["numa"]]
        ssf.add_pci_bridge(snap, [L["rc"], L["rp"]], link=full, numa=numa)
        ssf.add_pci_bridge(snap, [L["rc"], L["rp"], L["up"]], link=full, numa=numa)
        gpu_link = x8 if (degraded and i == 3) else full
        if v.gpu_link is not None and v.gpu_link(i) is not None:
            gpu_link = v.gpu_link(i)
        acs = ACS_ISOLATION if (degraded and i == 1) or i in v.acs else 0
        # a downstream port reports the link below it: the GPU's link
        ssf.add_pci_bridge(snap, [L["rc"], L["rp"], L["up"], L["down_gpu"]], link=gpu_link, numa=numa, acs_ctrl=acs)
        ssf.add_pci_bridge(snap, [L["rc"], L["rp"], L["up"], L["down_nic"]], link=full, numa=numa)
        ssf.add_pci_device(snap, [L["rc"], L["rp"], L["up"], L["down_gpu"], L["gpu"]], **ssf.H100_SXM,
                           numa=numa, link=gpu_link, local_cpulist=cpus)
        if i in v.nic_at:  # the NIC moved to a slot of its own under another root complex
            rc, rp, bdf, nic_numa = v.nic_at[i]
            ssf.add_pci_bridge(snap, [rc, rp], link=full, numa=nic_numa)
            ssf.add_pci_device(snap, [rc, rp, bdf], **ssf.CONNECTX7_IB, numa=nic_numa, link=full,
                               local_cpulist=NUMA_CPUS[nic_numa])
        else:
            ssf.add_pci_device(snap, [L["rc"], L["rp"], L["up"], L["down_nic"], L["nic"]], **ssf.CONNECTX7_IB,
                               numa=numa, link=full, local_cpulist=cpus)
    # NVSwitches: one more host bridge and switch (link values illustrative)
    nvs_rc, nvs_rp, nvs_up = "pci0000:02", "0000:02:01.0", "0000:03:00.0"
    ssf.add_pci_bridge(snap, [nvs_rc, nvs_rp], numa=0)
    ssf.add_pci_bridge(snap, [nvs_rc, nvs_rp, nvs_up], numa=0)
    for k, bdf in enumerate(snv.SYNTH_NVSWITCH_BUS_IDS):
        down = f"0000:04:{k:02x}.0"
        ssf.add_pci_bridge(snap, [nvs_rc, nvs_rp, nvs_up, down], numa=0)
        ssf.add_pci_device(snap, [nvs_rc, nvs_rp, nvs_up, down, bdf], **ssf.NVSWITCH_H100, numa=0)
    # management NIC (Intel X710-class, not RDMA): what a socket-only NCCL_SOCKET_IFNAME would use
    ssf.add_pci_device(snap, ["pci0000:c0", "0000:c0:01.0", "0000:c1:00.0"], vendor="0x8086", device="0x1572",
                       pci_class=ssf.CLASS_ETHERNET, driver="i40e", numa=1,
                       link=ssf.Link(ssf.GEN3, 8, ssf.GEN3, 8))

    # -- InfiniBand and netdevs ----------------------------------------------------------------------
    for i in range(8):
        L = layout(i, v)
        down = degraded and i == 4
        counters0 = _traffic(i, 0)
        if degraded and i == 1:
            counters0.update(symbol_error=3)
        port = ssf.IbPortSpec(
            state="1: DOWN" if down else "4: ACTIVE", phys_state="2: Polling" if down else "5: LinkUp",
            rate="10 Gb/sec (4X SDR)" if down else "400 Gb/sec (4X NDR)",
            lid="0xffff" if down else hex(IB_LIDS[i]), sm_lid="0x0" if down else "0x1",
            counters=counters0, netdev=f"ib{i}")
        if v.ib_port is not None:
            port = v.ib_port(i, port)
        real = ssf.add_ib_device(snap, f"mlx5_{i}", L["nic"], ports=[port], fw_ver=CX7_FW, hca_type="MT4129",
                                 node_guid=_guid(IB_GUIDS[i]))
        for attr, value in v.ib_later.get(i, {}).items():
            ssf.put_attr(snap, f"{real}/ports/1/{attr}", value, epoch=1)
        counters1 = _traffic(i, 0 if down else 1)
        if degraded and i == 1:
            counters1.update(symbol_error=57, link_error_recovery=2)
        for name, value in counters1.items():
            if value != counters0.get(name, 0):
                ssf.put_attr(snap, f"{real}/ports/1/counters/{name}", value, epoch=1)
        ssf.add_netdev(snap, f"ib{i}", pci_bdf=L["nic"], operstate="down" if down else "up", mtu=4092,
                       speed=None if down else 400000, address=_ipoib_hwaddr(IB_GUIDS[i]),
                       addresses=[("inet", f"10.10.{i}.11", "255.255.255.0")])
    ssf.add_netdev(snap, "eno1", pci_bdf="0000:c1:00.0", mtu=1500, speed=10000, address="3c:fd:fe:a1:00:01",
                   addresses=[("inet", "192.0.2.11", "255.255.255.0")])
    ssf.add_netdev(snap, "lo", operstate="unknown", mtu=65536, speed=None, address="00:00:00:00:00:00",
                   addresses=[("inet", "127.0.0.1", "255.0.0.0")])

    # -- the node -----------------------------------------------------------------------------------------
    modules = tuple(m for m in ssf.DEFAULT_MODULES if not (degraded and m == "nvidia_peermem"))
    system = dict(numa_cpulists=NUMA_CPUS, modules=modules, nvidia_version=DRIVER,
                  fabric_manager="active", shm_bytes=1 << 40, memlock=("unlimited", "unlimited"))
    system.update(v.system)
    ssf.add_system(snap, **system)

    # -- kernel log: a clean boot (and, degraded, the faults) --------------------------------------------------
    boot = [
        (0.0, "Linux version 5.15.0-131-generic (buildd@lcy02-amd64-079) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0)", 5),
        (21.412881, "nvidia: module license 'NVIDIA' taints kernel.", 4),
        (21.904512, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  Fri Feb 21 20:16:41 UTC 2025", 6),
    ] + [(14.2 + 0.31 * i, f"mlx5_core {layout(i, v)['nic']}: firmware version: {CX7_FW}", 6) for i in range(8)]
    if degraded:
        g6 = layout(6)["gpu"]
        boot += [
            (88.120455, f"mlx5_core {layout(4)['nic']} mlx5_4: Port: 1 Link DOWN", 4),
            (52873.613208, f"NVRM: Xid (PCI:{g6[:-2]}): 79, pid=48211, name=python3, GPU has fallen off the bus.", 4),
            (52873.613245, f"NVRM: GPU {g6}: GPU has fallen off the bus.", 3),
        ]
    boot += list(v.kmsg)
    ssf.add_kmsg(snap, boot, uptime_s=52990.0)
    # the second read of the ring buffer holds what the first held (nothing new arrived in the window)
    ssf.add_kmsg(snap, boot, epoch=1, uptime_s=52990.0 + WINDOW_S)

    # -- NVML ------------------------------------------------------------------------------------------
    gpus = snv.h100_node(8)
    if degraded:
        gpus[2] = dataclasses.replace(gpus[2], remapped_rows=(0, 1, True, False))
        gpus[3] = dataclasses.replace(gpus[3], pcie_width=8)
        gpus[5] = dataclasses.replace(gpus[5], nvlink_states={7: False})
        gpus[6] = dataclasses.replace(gpus[6], overrides={"nvmlDeviceGetUUID": snv.err("gpu_lost")})
    idle = {5: (7,)} if degraded else {}
    before = [dataclasses.replace(g, nvlink_traffic_kib=_nvlink_traffic(i, 0, idle.get(i, ())))
              for i, g in enumerate(gpus)]
    after = [dataclasses.replace(g, nvlink_traffic_kib=_nvlink_traffic(i, 1, idle.get(i, ())))
             for i, g in enumerate(gpus)]
    if v.gpus is not None:
        before, after = v.gpus(before, 0), v.gpus(after, 1)
    snap.nvml = snv.nvml_window_records(before, after, driver=DRIVER)

    # -- nvidia-smi (healthy only: with a GPU lost the tool's answer would not be a matrix) ------------------
    if not degraded:
        note = "SYNTHESIZED: rendered by samples/make_samples.py after corpus topo-m/h100-sxm-hbm3-x8-nv18-8nic-*"
        ssf.record_command(snap, ["nvidia-smi", "topo", "-m"], smi_topo_text(), 0, duration_s=0.21)
        snap.commands[-1]["note"] = note
        for mode in ("r", "w", "n", "a"):
            ssf.record_command(snap, ["nvidia-smi", "topo", "-p2p", mode], smi_p2p_text(), 0, duration_s=0.19)
            snap.commands[-1]["note"] = "SYNTHESIZED: after corpus topo-p2p/p2p-r-h100-x8-all-ok.txt"
    return snap


def main() -> None:
    for degraded, name in ((False, HEALTHY), (True, DEGRADED)):
        snap = build(degraded)
        path = os.path.join(HERE, name)
        snap.save(path)
        print(f"wrote {path} ({os.path.getsize(path)} bytes, {snap.epochs} epochs)")


if __name__ == "__main__":
    main()
