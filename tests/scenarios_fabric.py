"""Named fabric scenarios for the PCIe / InfiniBand / environment checks.

SYNTHESIZED: every value here is constructed, not captured from a machine. The healthy node is
shaped like an 8-GPU HGX H100 (each GPU and one ConnectX-7 NDR NIC behind a PCIe Gen5 switch
under its own root port), with the GPUs idle, so their links sit at 2.5 GT/s as idle GPUs' links
do. Each fault scenario changes the few fields the fault changes. Counter values are arbitrary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ccdiag.checks import CheckContext
from ccdiag.inputs.policy import DEFAULT_POLICY, Policy
from ccdiag.probes.registry import ProbeRun
from ccdiag.probes.infiniband import Gid, IbDevice, IbObservation, IbPort
from ccdiag.probes.kmsg import KmsgObservation
from ccdiag.probes.netdev import Address, NetdevObservation, NetInterface
from ccdiag.probes.nvml import Gpu, NvmlObservation
from ccdiag.probes.pcie import PcieDevice, PcieObservation
from ccdiag.probes.system import SystemObservation

N = 8
GEN5 = 32.0
IDLE = 2.5
AER_COR = {"RxErr": 0, "BadTLP": 0, "BadDLLP": 0, "Rollover": 0, "Timeout": 0, "NonFatalErr": 0,
           "CorrIntErr": 0, "HeaderOF": 0, "TOTAL_ERR_COR": 0}
AER_UNC = {"Undefined": 0, "DLP": 0, "SDES": 0, "TLP": 0, "FCP": 0, "CmpltTO": 0, "CmpltAbrt": 0,
           "UnxCmplt": 0, "RxOF": 0, "MalfTLP": 0, "ECRC": 0, "UnsupReq": 0, "ACSViol": 0}


def bdfs(i: int) -> dict[str, str]:
    base = 0x10 + 0x1C * i
    return {"rp": f"0000:{base:02x}:01.0", "up": f"0000:{base + 1:02x}:00.0",
            "dn_gpu": f"0000:{base + 2:02x}:00.0", "dn_nic": f"0000:{base + 2:02x}:01.0",
            "gpu": f"0000:{base + 3:02x}:00.0", "nic": f"0000:{base + 4:02x}:00.0"}


def _dev(bdf: str, kind: str, path: tuple[str, ...], cur: float = GEN5, width: int = 16, **kw) -> PcieDevice:
    return PcieDevice(
        bdf=bdf, kind=kind, parent=path[-2] if len(path) > 1 else None, root_complex=f"pci0000:{path[0][5:7]}",
        path=path, current_link_speed_gts=cur, max_link_speed_gts=GEN5, current_link_width=width,
        max_link_width=16, current_link_speed_raw=f"{cur:g} GT/s PCIe", max_link_speed_raw="32.0 GT/s PCIe",
        aer_correctable=dict(AER_COR), aer_fatal=dict(AER_UNC), aer_nonfatal=dict(AER_UNC),
        acs_ctrl=0 if kind in ("bridge", "root_port") else None, **kw)


def healthy_pcie() -> PcieObservation:
    devs = []
    for i in range(N):
        b = bdfs(i)
        rp, up = (b["rp"],), (b["rp"], b["up"])
        devs += [_dev(b["rp"], "root_port", rp), _dev(b["up"], "bridge", up),
                 _dev(b["dn_gpu"], "bridge", up + (b["dn_gpu"],), cur=IDLE),
                 _dev(b["dn_nic"], "bridge", up + (b["dn_nic"],)),
                 _dev(b["gpu"], "gpu", up + (b["dn_gpu"], b["gpu"]), cur=IDLE, vendor_id="0x10de", driver="nvidia"),
                 _dev(b["nic"], "nic", up + (b["dn_nic"], b["nic"]), vendor_id="0x15b3", driver="mlx5_core")]
    # a lifetime correctable error on one root port: history, never a verdict on its own
    devs[0] = replace(devs[0], aer_correctable={**AER_COR, "RxErr": 3, "TOTAL_ERR_COR": 3})
    return PcieObservation(devices=tuple(devs))


def healthy_nvml() -> NvmlObservation:
    gpus = tuple(Gpu(index=i, uuid=f"GPU-5e0e0000-0000-0000-0000-00000000000{i}", name="NVIDIA H100 80GB HBM3",
                     bus_id="0000" + bdfs(i)["gpu"].upper(), pcie_gen_current=1, pcie_gen_max=5,
                     pcie_gen_device_max=5, pcie_width_current=16, pcie_width_max=16, pcie_replay_counter=0,
                     clock_event_reasons=1, clock_event_names=("idle",), persistence_mode=True)
                 for i in range(N))
    return NvmlObservation(driver_version="550.90.07", device_count=N, gpus=gpus)


def _port(**kw) -> IbPort:
    base = dict(port=1, state="ACTIVE", state_code=4, phys_state="LinkUp", phys_state_code=5, rate_gbit_s=400.0,
                rate_raw="400 Gb/sec (4X NDR)", width=4, speed_name="NDR", link_layer="InfiniBand", lid=7,
                sm_lid=1, gids=(Gid(0, "fe80:0000:0000:0000:a088:c203:0000:0001"),),
                counters={"symbol_error": 12, "link_error_recovery": 1, "link_downed": 1, "port_rcv_errors": 4,
                          "excessive_buffer_overrun_errors": 0, "local_link_integrity_errors": 0,
                          "port_rcv_remote_physical_errors": 0})
    base.update(kw)
    return IbPort(**base)


def healthy_ib() -> IbObservation:
    devs = tuple(IbDevice(name=f"mlx5_{i}", pci_bdf=bdfs(i)["nic"], fw_ver="28.39.1002", hca_type="MT4129",
                          board_id="MT_0000000838", netdevs=(f"ib{i}",), ports=(_port(lid=10 + i),))
                 for i in range(N))
    return IbObservation(devices=devs)


def healthy_netdev() -> NetdevObservation:
    ifs = [NetInterface("lo", up=True, operstate="unknown", addresses=(Address("inet", "127.0.0.1"),), virtual=True),
           NetInterface("eth0", up=True, operstate="up", speed_mbps=25000, addresses=(Address("inet", "10.1.0.5"),),
                        driver="ice", pci_bdf="0000:f8:00.0", virtual=False),
           NetInterface("docker0", up=False, operstate="down", virtual=True,
                        addresses=(Address("inet", "172.17.0.1"),))]
    ifs += [NetInterface(f"ib{i}", up=True, operstate="up", speed_mbps=400000, mtu=4092,
                         addresses=(Address("inet", f"192.168.{i}.5"),), driver="mlx5_core",
                         pci_bdf=bdfs(i)["nic"], virtual=False, ib_device=f"mlx5_{i}") for i in range(N)]
    return NetdevObservation(interfaces=tuple(ifs))


def healthy_system() -> SystemObservation:
    return SystemObservation(hostname="hgx-synth", kernel="6.8.0", cpu_count=224,
                             modules=("nvidia", "nvidia_uvm", "nvidia_peermem", "mlx5_core", "mlx5_ib", "ib_core"),
                             shm_bytes=1 << 40, memlock_unlimited=True)


def healthy_kmsg() -> KmsgObservation:
    return KmsgObservation(events=(), lines_scanned=4000, source="/dev/kmsg", uptime_s=3 * 86400.0)


@dataclass(frozen=True)
class Node:
    label: str
    index: int | None = None
    bdf: str | None = None
    uuid: str | None = None
    numa: int | None = None


class FakeTopology:
    """Answers the topology API the checks use (gpus, nics, nearest_nics, level) from a table.
    GPU i is PIX to mlx5_i; other NICs are NODE on the same socket (i // 4) and SYS across."""

    def __init__(self, nearest: dict[int, tuple[int, str]] | None = None):
        self._gpus = [Node(f"GPU{i}", i, bdfs(i)["gpu"], healthy_nvml().gpus[i].uuid, i // 4) for i in range(N)]
        self._nics = [Node(f"mlx5_{i}", None, bdfs(i)["nic"], None, i // 4) for i in range(N)]
        self._override = nearest or {}

    def gpus(self):
        return list(self._gpus)

    def nics(self):
        return list(self._nics)

    def has_device(self, name: str) -> bool:
        return any(n.label == name for n in self._gpus + self._nics)

    def level(self, a: str, b: str) -> str:
        gi, ni = int(a[3:]), int(b.split("_")[1])
        if gi in self._override:
            want, lvl = self._override[gi]
            if ni == want:
                return lvl
            return "SYS"
        if gi == ni:
            return "PIX"
        return "NODE" if gi // 4 == ni // 4 else "SYS"

    def nearest_nics(self, gpu_label: str) -> list[tuple[str, str]]:
        """Every NIC label with its level, best first (as ccdiag.topology answers)."""
        order = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
        pairs = [(n.label, self.level(gpu_label, n.label)) for n in self._nics]
        return sorted(pairs, key=lambda p: order[p[1]])

    def gpus_near_nic(self, nic: str) -> list[str]:
        return [g.label for g in self._gpus if self.level(g.label, nic) in ("PIX", "PXB")]


def runs_of(**data: Any) -> dict[str, ProbeRun]:
    return {name: ProbeRun(name, "ok", 0.01, value) for name, value in data.items()}


def healthy_runs() -> dict[str, ProbeRun]:
    return runs_of(pcie=healthy_pcie(), nvml=healthy_nvml(), infiniband=healthy_ib(), netdev=healthy_netdev(),
                   system=healthy_system(), kmsg=healthy_kmsg())


def make_ctx(runs: dict[str, ProbeRun] | None = None, later: dict[str, ProbeRun] | None = None,
             window_s: float = 0.0, topology: Any = "fake", policy: Policy = DEFAULT_POLICY,
             env: dict[str, str] | None = None) -> CheckContext:
    return CheckContext(runs=runs if runs is not None else healthy_runs(), later=later, window_s=window_s,
                        topology=FakeTopology() if topology == "fake" else topology, policy=policy,
                        env=dict(env or {}), env_source="environment", now=1_700_000_000.0)


# ------------------------------------------------------------ editing helpers

def with_data(runs: dict[str, ProbeRun], probe: str, data: Any) -> dict[str, ProbeRun]:
    out = dict(runs)
    out[probe] = ProbeRun(probe, "ok", 0.01, data)
    return out


def edit_pcie(runs: dict[str, ProbeRun], bdf: str, **changes) -> dict[str, ProbeRun]:
    obs = runs["pcie"].data
    devs = tuple(replace(d, **changes) if d.bdf == bdf else d for d in obs.devices)
    assert any(d.bdf == bdf for d in obs.devices), bdf
    return with_data(runs, "pcie", replace(obs, devices=devs))


def edit_gpu(runs: dict[str, ProbeRun], index: int, **changes) -> dict[str, ProbeRun]:
    obs = runs["nvml"].data
    return with_data(runs, "nvml", replace(obs, gpus=tuple(replace(g, **changes) if g.index == index else g
                                                           for g in obs.gpus)))


def edit_port(runs: dict[str, ProbeRun], dev: str, port: int = 1,
              fn: Callable[[IbPort], IbPort] | None = None, **changes) -> dict[str, ProbeRun]:
    obs = runs["infiniband"].data

    def fix(p: IbPort) -> IbPort:
        p = replace(p, **changes)
        return fn(p) if fn else p

    devs = tuple(replace(d, ports=tuple(fix(p) if p.port == port else p for p in d.ports)) if d.name == dev else d
                 for d in obs.devices)
    return with_data(runs, "infiniband", replace(obs, devices=devs))


def edit_system(runs: dict[str, ProbeRun], **changes) -> dict[str, ProbeRun]:
    return with_data(runs, "system", replace(runs["system"].data, **changes))


def bump_counters(runs: dict[str, ProbeRun], dev: str, port: int = 1, **increments: int) -> dict[str, ProbeRun]:
    def fn(p: IbPort) -> IbPort:
        c = dict(p.counters or {})
        for k, v in increments.items():
            c[k] = c.get(k, 0) + v
        return replace(p, counters=c)

    return edit_port(runs, dev, port, fn=fn)


def roce_node() -> dict[str, ProbeRun]:
    """The healthy node with its NICs in Ethernet mode (RoCE): an IPv4-derived RoCE v2 GID each."""
    runs = healthy_runs()
    for i in range(N):
        gids = (Gid(0, "fe80:0000:0000:0000:ba3f:d2ff:fe00:0001", "IB/RoCE v1", f"ib{i}"),
                Gid(1, "fe80:0000:0000:0000:ba3f:d2ff:fe00:0001", "RoCE v2", f"ib{i}"),
                Gid(2, f"0000:0000:0000:0000:0000:ffff:c0a8:{i:02x}05", "IB/RoCE v1", f"ib{i}"),
                Gid(3, f"0000:0000:0000:0000:0000:ffff:c0a8:{i:02x}05", "RoCE v2", f"ib{i}"))
        runs = edit_port(runs, f"mlx5_{i}", link_layer="Ethernet", rate_raw="400 Gb/sec (4X NDR)", gids=gids,
                         lid=0, sm_lid=0)
    return runs


# ------------------------------------------------------------ named fault scenarios

def sc_gpu_link_x8() -> CheckContext:
    """GPU3 trained at x8 of x16 (and the switch port above it reports the same link)."""
    b = bdfs(3)
    runs = edit_pcie(healthy_runs(), b["gpu"], current_link_width=8)
    runs = edit_pcie(runs, b["dn_gpu"], current_link_width=8)
    return make_ctx(runs)


def sc_bridge_x8_above_nic() -> CheckContext:
    """The switch uplink above GPU5 and mlx5_5 trained at x8: both ends of that link say x8."""
    b = bdfs(5)
    runs = edit_pcie(healthy_runs(), b["up"], current_link_width=8)
    runs = edit_pcie(runs, b["rp"], current_link_width=8)
    return make_ctx(runs)


def sc_busy_gpu_gen1() -> CheckContext:
    """GPU2 running a job (no idle clock reason, a compute process) with its link at Gen1."""
    from ccdiag.probes.nvml import ComputeProcess
    runs = edit_gpu(healthy_runs(), 2, clock_event_names=(), clock_event_reasons=0,
                    compute_processes=(ComputeProcess(4242, 1 << 30),))
    return make_ctx(runs)


def sc_nic_gen4() -> CheckContext:
    """mlx5_1 trained at 16 GT/s of 32 (the switch port above reports the same link)."""
    b = bdfs(1)
    runs = edit_pcie(healthy_runs(), b["nic"], current_link_speed_gts=16.0, current_link_speed_raw="16.0 GT/s PCIe")
    runs = edit_pcie(runs, b["dn_nic"], current_link_speed_gts=16.0)
    return make_ctx(runs)


def sc_gpu_behind_gen4_switch() -> CheckContext:
    """GPU6's switch port supports only Gen4: the Gen5 GPU is limited by it (a design fact)."""
    b = bdfs(6)
    runs = edit_pcie(healthy_runs(), b["dn_gpu"], max_link_speed_gts=16.0, current_link_speed_gts=16.0)
    runs = edit_pcie(runs, b["gpu"], current_link_speed_gts=16.0)
    return make_ctx(runs)


def sc_acs_on() -> CheckContext:
    """The kernel enabled ACS (as it does with the IOMMU on) on the switch ports of pair 4."""
    b = bdfs(4)
    runs = healthy_runs()
    for port in ("dn_gpu", "dn_nic"):
        runs = edit_pcie(runs, b[port], acs_ctrl=0x1D,
                         acs_enabled=("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"))
    return make_ctx(runs)


def sc_ib_polling() -> CheckContext:
    return make_ctx(edit_port(healthy_runs(), "mlx5_2", state="DOWN", state_code=1, phys_state="Polling",
                              phys_state_code=2, rate_gbit_s=10.0, rate_raw="10 Gb/sec (4X SDR)", width=4))


def sc_ib_2x_width() -> CheckContext:
    """mlx5_7 trained at 2X HDR (100 Gb/s) while its siblings run 4X."""
    return make_ctx(edit_port(healthy_runs(), "mlx5_7", rate_gbit_s=200.0, rate_raw="200 Gb/sec (2X NDR)", width=2))


def counter_window(**increments: int) -> tuple[dict[str, ProbeRun], dict[str, ProbeRun]]:
    before = healthy_runs()
    return before, bump_counters(before, "mlx5_3", **increments)

