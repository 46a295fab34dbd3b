"""Observations for the exporter tests, built from the probes' dataclasses.

SYNTHESIZED: these values are invented to exercise every metric family (a 2-GPU slice of an HGX
node with one NDR port); they are not device output. Tests of the whole exposition use the bundled
snapshot samples instead.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

from ccdiag.run.checkrun import CheckResult
from ccdiag.core.findings import Component, Finding
from ccdiag.core.readings import ReadError
from ccdiag.probes.infiniband import IbDevice, IbObservation, IbPort
from ccdiag.probes.kmsg import KernelEvent, KmsgObservation
from ccdiag.probes.nvml import Gpu, NvLink, NvmlObservation
from ccdiag.probes.pcie import PcieDevice, PcieObservation
from ccdiag.probes.system import SystemObservation
from ccdiag.probes.registry import ProbeRun


def nvml_obs(temp0: float | None = 41.0) -> NvmlObservation:
    links0 = (NvLink(0, True, 4, "0000:05:00.0", "switch", 0, 0, 0, 0),
              NvLink(1, False, 4, "0000:2a:00.0", "gpu", 3, None, 1, 0))
    g0 = Gpu(index=0, uuid="GPU-aaaa", name="NVIDIA H100 80GB HBM3", bus_id="0000:18:00.0", numa_node=0,
             memory_total_bytes=85520809984, memory_used_bytes=0, persistence_mode=True,
             ecc_mode_current=True, ecc_volatile_corrected=0, ecc_volatile_uncorrected=0,
             ecc_aggregate_corrected=2, ecc_aggregate_uncorrected=0, remapped_rows_correctable=0,
             remapped_rows_uncorrectable=0, remapped_rows_pending=False, remapped_rows_failure=False,
             clock_event_reasons=0x1, clock_event_names=("idle",), temperature_c=temp0, power_w=71.5,
             power_limit_w=700.0, pcie_gen_current=5, pcie_gen_max=5, pcie_gen_device_max=5,
             pcie_width_current=16, pcie_width_max=16, pcie_replay_counter=0, nvlinks=links0,
             fabric_state="completed", recovery_action="none")
    g1 = Gpu(index=1, uuid="GPU-bbbb", name="NVIDIA H100 80GB HBM3", bus_id="0000:2a:00.0", numa_node=0,
             failed="gpu_lost", errors=(ReadError("nvmlDeviceGetTemperature(1)", "gpu_lost", "GPU is lost"),))
    return NvmlObservation(driver_version="550.54.15", cuda_driver_version="12.4", device_count=2, gpus=(g0, g1))


def pcie_obs() -> PcieObservation:
    return PcieObservation(devices=(
        PcieDevice("0000:16:01.0", "root_port", current_link_speed_gts=32.0, max_link_speed_gts=32.0,
                   current_link_width=16, max_link_width=16),
        PcieDevice("0000:17:00.0", "bridge", parent="0000:16:01.0", path=("0000:16:01.0", "0000:17:00.0"),
                   current_link_speed_gts=32.0, max_link_speed_gts=32.0, current_link_width=16,
                   max_link_width=16, acs_ctrl=0x1d, acs_enabled=("SrcValid", "ReqRedir", "CmplRedir")),
        PcieDevice("0000:18:00.0", "gpu", vendor_id="0x10de", device_id="0x2330", driver="nvidia", numa_node=0,
                   parent="0000:17:00.0", path=("0000:16:01.0", "0000:17:00.0", "0000:18:00.0"),
                   current_link_speed_gts=16.0, max_link_speed_gts=32.0, current_link_width=16,
                   max_link_width=16, aer_correctable={"RxErr": 3, "BadTLP": 0, "TOTAL_ERR_COR": 3},
                   aer_fatal={"TOTAL_ERR_FATAL": 0}),
        PcieDevice("0000:19:00.0", "nic", vendor_id="0x15b3", device_id="0x1021", driver="mlx5_core",
                   parent="0000:17:00.0", path=("0000:16:01.0", "0000:17:00.0", "0000:19:00.0"),
                   current_link_speed_gts=32.0, max_link_speed_gts=32.0, current_link_width=16,
                   max_link_width=16),
        PcieDevice("0000:99:00.0", "other"),
    ))


def ib_obs() -> IbObservation:
    port = IbPort(1, state="ACTIVE", state_code=4, phys_state="LinkUp", phys_state_code=5, rate_gbit_s=400.0,
                  width=4, speed_name="NDR", link_layer="InfiniBand",
                  counters={"port_xmit_data": 1000, "port_rcv_data": 250, "port_xmit_packets": 10,
                            "port_rcv_packets": 5, "symbol_error": 0, "link_downed": 1},
                  hw_counters={"out_of_sequence": 7, "lifespan": 10})
    return IbObservation(devices=(IbDevice("mlx5_0", pci_bdf="0000:19:00.0", fw_ver="28.39.1002",
                                           hca_type="MT4129", netdevs=("ibp25s0",), ports=(port,)),))


def kmsg_obs(extra: tuple = ()) -> KmsgObservation:
    events = (KernelEvent("xid", "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.", 100.0,
                          "0000:18:00.0", 79),
              KernelEvent("xid", "NVRM: Xid (PCI:0000:18:00): 13, pid=42, Graphics Exception", 101.0,
                          "0000:18:00.0", 13),
              KernelEvent("ib_link_down", "mlx5_core 0000:19:00.0: Port 1 link down", 102.0, "0000:19:00.0")) + extra
    return KmsgObservation(events=events, lines_scanned=1000, source="/dev/kmsg", uptime_s=5000.0)


def system_obs() -> SystemObservation:
    return SystemObservation(hostname="node1", kernel="6.1.0-18-amd64", os_release="Debian GNU/Linux 12",
                             modules=("nvidia", "nvidia_uvm", "mlx5_core", "ib_core"), fabric_manager="active",
                             shm_bytes=64 << 20, memlock_soft_bytes=65536, memlock_hard_bytes=65536,
                             memlock_unlimited=False, iommu="passthrough")


def findings() -> list[Finding]:
    return [
        Finding("gpu.lost", "fail", Component("gpu", "GPU1", gpu=1, uuid="GPU-bbbb", bdf="0000:2a:00.0"),
                "GPU1 is lost"),
        Finding("pcie.link_downtrained", "warn", Component("pcie_link", "GPU0 PCIe", gpu=0, uuid="GPU-aaaa"),
                "runs Gen4 of Gen5"),
        Finding("pcie.link_downtrained", "pass", Component("pcie_link", "GPU0 PCIe", gpu=0, uuid="GPU-aaaa"),
                "duplicate of the same component: the worse status must win"),
        Finding("infiniband.port_state", "pass", Component("ib_port", "mlx5_0 port 1", device="mlx5_0", port=1),
                "active"),
    ]


def runs(**override) -> dict[str, ProbeRun]:
    data = {"system": system_obs(), "pcie": pcie_obs(), "nvml": nvml_obs(), "infiniband": ib_obs(),
            "kmsg": kmsg_obs()}
    out = {}
    for name, value in data.items():
        status = "partial" if getattr(value, "errors", ()) else "ok"
        out[name] = ProbeRun(name, status, 0.01, value)
    out["nvml"] = ProbeRun("nvml", "partial", 0.5, data["nvml"])
    out.update(override)
    return out


class FakeTopology:
    """Answers the questions the exporter asks of a topology: GPU0 is PIX to mlx5_0, everything
    else is SYS."""

    def has_device(self, name):
        return name in ("mlx5_0", "mlx5_1", "GPU0", "GPU1")

    def node_id(self, name):
        if not self.has_device(name):
            raise KeyError(name)
        return name

    def label(self, node):
        return node

    def nearest_nics(self, gpu):
        if gpu == "GPU0":
            return [("mlx5_0", "PIX"), ("mlx5_1", "SYS")]
        return [("mlx5_0", "unknown"), ("mlx5_1", "unknown")]

    @staticmethod
    def level_rank(level):
        from ccdiag.topology.levels import level_rank

        return level_rank(level)

    def gpus(self):
        from ccdiag.topology import GpuNode

        return [GpuNode("GPU0", 0, "0000:18:00.0", "GPU-aaaa"), GpuNode("GPU1", 1, "0000:2a:00.0", "GPU-bbbb")]

    def level(self, a, b):
        return "PIX"


def result(**override) -> CheckResult:
    return CheckResult(runs=runs(**override), later=None, topology=FakeTopology(), findings=findings(),
                       exit_code=1, timed_out=False, duration_s=0.75)


def waived_result() -> CheckResult:
    """:func:`result` under a policy waiving GPU0's downtrained link until a date after the run."""
    from ccdiag.checks.waiving import apply_waivers
    from ccdiag.inputs.waivers import parse_waiver

    w = parse_waiver({"check": "pcie.link_downtrained", "component": "GPU0 PCIe", "until": "2023-11-20",
                      "by": "alice", "reason": "riser on order"})
    waived, outcomes = apply_waivers(findings(), [w], now=FIXED_TIME)
    return dataclasses.replace(result(), findings=waived, waivers=tuple(outcomes))


# -- the bundled samples, made deterministic for golden files ---------------------------------------
SAMPLES = pathlib.Path(__file__).resolve().parent.parent / "samples"
HEALTHY = SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = SAMPLES / "hgx-h100-8gpu-degraded.snap.tar.gz"
#: the wall-clock time golden cycles "complete" at, and the scrape 1.5 s later
FIXED_TIME = 1700000000.0


def frozen(result: CheckResult) -> CheckResult:
    """``result`` with every duration set to 0, so its exposition does not depend on the machine."""
    def zero(runs):
        return None if runs is None else {n: dataclasses.replace(r, duration_s=0.0) for n, r in runs.items()}

    return dataclasses.replace(result, runs=zero(result.runs), later=zero(result.later), duration_s=0.0)


def sample_result(path) -> CheckResult:
    from ccdiag.run.checkrun import evaluate
    from ccdiag.host.door import ReplayHost

    return evaluate(ReplayHost(str(path)), deadline_s=120.0)


def golden_exposition(path) -> str:
    """The whole /metrics text for a sample, with times fixed and the Python version masked."""
    from ccdiag.exporters.collector import CycleCollector
    from ccdiag.exporters.cycle import CycleState

    cycle = CycleState().advance(frozen(sample_result(path)), completed_at=FIXED_TIME)
    collector = CycleCollector(interval_s=15.0, clock=lambda: FIXED_TIME + 1.5)
    collector.publish(cycle)
    text = collector.exposition().decode("utf-8")
    return re.sub(r'python_version="[^"]*"', 'python_version="any"', text)
