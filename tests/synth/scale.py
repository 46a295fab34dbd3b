"""A synthesized node of any size: ``n_gpus`` GPUs and ``n_nics`` RDMA NICs in PCIe switch groups.

Why: the issue found report building super-linear in the number of RDMA devices (3,000 took 62 s).
Real nodes have 8 of each; large counts stand for what a hostile or broken snapshot (or a host
with SR-IOV virtual functions exposed as RDMA devices) can hold. The layout is regular so levels
are known: each group is a root port with one PCIe switch holding at most one GPU and up to 30
NICs; groups alternate between two NUMA nodes. Every value is SYNTHESIZED.
"""

from __future__ import annotations

import math

from ccdiag.host.snapshot import SnapshotData
from synth import nvml as snv
from synth import sysfs as ssf

PER_GROUP = 30  # NICs per switch group (device numbers 0..31 on one bus, one left for the GPU)


def _bdfs(group: int) -> dict:
    dom = 0x10 + group
    return {"rc": f"pci{dom:04x}:00", "rp": f"{dom:04x}:00:01.0", "up": f"{dom:04x}:01:00.0",
            "down": lambda k: f"{dom:04x}:02:{k:02x}.0", "ep": lambda k: f"{dom:04x}:{3 + k:02x}:00.0"}


def build_scale_node(n_nics: int, n_gpus: int = 8, hostname: str = "scale-synth") -> SnapshotData:
    """The snapshot of a node with ``n_gpus`` H100-class GPUs and ``n_nics`` single-port NDR NICs."""
    groups = max(n_gpus, math.ceil(n_nics / PER_GROUP), 1)
    snap = ssf.new_snapshot(hostname, description=f"SYNTHESIZED scale node: {n_gpus} GPUs, {n_nics} RDMA NICs",
                            time_epoch=1735732800.0)
    full = ssf.Link(ssf.GEN5, 16, ssf.GEN5, 16)
    gpu_bdfs: list[str] = []
    slots = [0] * groups
    for g in range(groups):
        b = _bdfs(g)
        numa = g % 2
        ssf.add_pci_bridge(snap, [b["rc"], b["rp"]], link=full, numa=numa)
        ssf.add_pci_bridge(snap, [b["rc"], b["rp"], b["up"]], link=full, numa=numa)
    for i in range(n_gpus):
        g = i * groups // n_gpus
        b = _bdfs(g)
        k = slots[g]
        slots[g] += 1
        ssf.add_pci_bridge(snap, [b["rc"], b["rp"], b["up"], b["down"](k)], link=full, numa=g % 2)
        ssf.add_pci_device(snap, [b["rc"], b["rp"], b["up"], b["down"](k), b["ep"](k)], **ssf.H100_SXM,
                           numa=g % 2, link=full)
        gpu_bdfs.append(b["ep"](k))
    for i in range(n_nics):
        g = i % groups
        b = _bdfs(g)
        k = slots[g]
        slots[g] += 1
        chain = [b["rc"], b["rp"], b["up"], b["down"](k), b["ep"](k)]
        ssf.add_pci_bridge(snap, chain[:-1], link=full, numa=g % 2)
        ssf.add_pci_device(snap, chain, **ssf.CONNECTX7_IB, numa=g % 2, link=full)
        port = ssf.IbPortSpec(lid=hex(i + 1), netdev=f"ib{i}", with_hw_counters=False)
        ssf.add_ib_device(snap, f"mlx5_{i}", chain[-1], ports=[port], node_guid=f"a088:c203:{i >> 16:04x}:{i & 0xffff:04x}")
        ssf.add_netdev(snap, f"ib{i}", pci_bdf=chain[-1], mtu=4092, speed=400000,
                       address=f"00:00:10:49:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:{i >> 8 & 0xff:02x}:{i & 0xff:02x}",
                       addresses=[("inet", f"10.{10 + (i >> 16)}.{i >> 8 & 0xff}.{i & 0xff}", "255.255.0.0")])
    ssf.add_system(snap, numa_cpulists=("0-47", "48-95"), modules=ssf.DEFAULT_MODULES,
                   fabric_manager="active", shm_bytes=1 << 40, memlock=("unlimited", "unlimited"))
    ssf.add_kmsg(snap, [], uptime_s=1000.0)
    snap.nvml = snv.nvml_records([snv.SynthGpu(bus_id=b) for b in gpu_bdfs])
    return snap
