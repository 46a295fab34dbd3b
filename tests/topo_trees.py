"""SYNTHESIZED observation trees for topology tests (made up, not read from a machine).

Each helper returns probe observations shaped like the probes' dataclasses, so the topology can
be tested without a snapshot: a PCIe tree is given as nested tuples and flattened into
``PcieDevice`` rows whose ``path`` runs from the root port down, as the pcie probe reports it.
"""

from __future__ import annotations

from ccdiag.probes.infiniband import IbDevice, IbObservation, IbPort
from ccdiag.probes.nvml import Gpu, NvLink, NvmlObservation
from ccdiag.probes.pcie import PcieDevice, PcieObservation
from ccdiag.probes.system import NumaNode, SystemObservation


def dev(bdf, kind, path, rc, numa, speed=32.0, width=16, cur_speed=None, cur_width=None, max_speed=None,
        max_width=None):
    return PcieDevice(bdf=bdf, kind=kind, numa_node=numa, root_complex=rc, path=tuple(path),
                      parent=path[-2] if len(path) > 1 else None,
                      current_link_speed_gts=cur_speed if cur_speed is not None else speed,
                      max_link_speed_gts=max_speed if max_speed is not None else speed,
                      current_link_width=cur_width if cur_width is not None else width,
                      max_link_width=max_width if max_width is not None else width)


class Tree:
    """Accumulates PCIe devices: ``rp(...)`` then ``switch(...)``/``end(...)`` under a path."""

    def __init__(self):
        self.devices: dict[str, PcieDevice] = {}

    def rp(self, bdf, rc, numa, **kw):
        self.devices[bdf] = dev(bdf, "root_port", [bdf], rc, numa, **kw)
        return [bdf]

    def switch(self, path, up, downs, rc, numa, **kw):
        self.devices[up] = dev(up, "bridge", path + [up], rc, numa, **kw)
        for d in downs:
            self.devices[d] = dev(d, "bridge", path + [up, d], rc, numa, **kw)
        return {d: path + [up, d] for d in downs}

    def end(self, path, bdf, kind, rc, numa, **kw):
        self.devices[bdf] = dev(bdf, kind, path + [bdf], rc, numa, **kw)

    def obs(self):
        return PcieObservation(devices=tuple(self.devices.values()))


def system(numa_cpus: dict[int, str]):
    return SystemObservation(numa_nodes=tuple(NumaNode(n, c) for n, c in numa_cpus.items()))


def ib_devices(names_bdfs, rate=400.0, raw="400 Gb/sec (4X NDR)", down=()):
    devs = []
    for name, bdf in names_bdfs:
        is_down = name in down
        devs.append(IbDevice(name=name, pci_bdf=bdf, ports=(IbPort(
            port=1, state="DOWN" if is_down else "ACTIVE", phys_state="Polling" if is_down else "LinkUp",
            rate_gbit_s=10.0 if is_down else rate, rate_raw="10 Gb/sec (4X SDR)" if is_down else raw,
            link_layer="InfiniBand"),)))
    return IbObservation(devices=tuple(devs))


def hgx(gpu5_link7_down=False, gpu3_x8=False, nic_down=()):
    """An 8-GPU HGX-like board: per GPU a host bridge, a root port, a switch holding the GPU and
    one NIC; 4 NVSwitches with 5/4/4/5 links per GPU; NUMA 0 for GPU0-3, 1 for GPU4-7."""
    t = Tree()
    gpu_bus = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    gpus, nics = [], []
    for i, bus in enumerate(gpu_bus):
        numa = 0 if i < 4 else 1
        b = int(bus, 16)
        rc = f"pci0000:{b - 2:02x}"
        rp = t.rp(f"0000:{b - 2:02x}:01.0", rc, numa)
        ports = t.switch(rp, f"0000:{b - 1:02x}:00.0", [f"0000:{b:02x}:00.0", f"0000:{b:02x}:01.0"], rc, numa)
        gpu_path = [*ports[f"0000:{b:02x}:00.0"]]
        gbdf = f"0000:{b + 1:02x}:00.0"
        kw = {"cur_width": 8} if (gpu3_x8 and i == 3) else {}
        t.end(gpu_path, gbdf, "gpu", rc, numa, **kw)
        nbdf = f"0000:{b + 2:02x}:00.0"
        t.end(ports[f"0000:{b:02x}:01.0"], nbdf, "nic", rc, numa)
        gpus.append(gbdf)
        nics.append((f"mlx5_{i}", nbdf))
    switches = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    rc = "pci0000:04"
    rp = t.rp("0000:04:01.0", rc, 0)
    for s in switches:
        t.end(rp, s, "nvswitch", rc, 0, speed=16.0, width=2)
    per_switch = [5, 4, 4, 5]
    nv_gpus = []
    for i, gbdf in enumerate(gpus):
        links = []
        k = 0
        for s, n in zip(switches, per_switch):
            for _ in range(n):
                active = not (gpu5_link7_down and i == 5 and k == 7)
                links.append(NvLink(link=k, active=active, version=4, remote_bus_id=s, remote_device_type="switch"))
                k += 1
        nv_gpus.append(Gpu(index=i, uuid=f"GPU-0000000{i}", bus_id=gbdf, numa_node=0 if i < 4 else 1,
                           nvlinks=tuple(links)))
    runs = {
        "system": system({0: "0-47,96-143", 1: "48-95,144-191"}),
        "pcie": t.obs(),
        "nvml": NvmlObservation(driver_version="570.133.20", gpus=tuple(nv_gpus)),
        "infiniband": ib_devices(nics, down=nic_down),
    }
    return runs
