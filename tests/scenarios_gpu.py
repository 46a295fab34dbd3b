"""Named scenarios for the GPU, XID and NVLink checks, built from probe dataclasses.

SYNTHESIZED: the observations below were not read from a machine. They follow documented facts of
an 8-GPU HGX H100 node, the same ones synth.nvml uses (GPU name "NVIDIA H100 80GB HBM3",
18 NVLinks per GPU reaching four NVSwitches 5/4/4/5, PCI 10de:2330 / NVSwitch 10de:22a3, driver
570.133.20, the HGX-class bus ids 18/2a/3a/5d/9a/ab/ba/db). UUIDs, serials, NVSwitch bus ids,
temperatures and counter values are made up. Kernel-log scenarios replay the REAL lines in
tests/fixtures/kmsg (parsed by the kmsg probe's own parser); only the uptime that places them in
time and the node they are put on are synthesized.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from ccdiag.checks import CheckContext
from ccdiag.inputs.policy import DEFAULT_POLICY, Policy
from ccdiag.probes.kmsg import KmsgObservation, parse_lines
from ccdiag.probes.nvml import Gpu, NvLink, NvmlObservation
from ccdiag.probes.pcie import PcieDevice, PcieObservation
from ccdiag.probes.system import SystemObservation
from ccdiag.probes.registry import ProbeRun

KMSG_FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "kmsg"

H100 = "NVIDIA H100 80GB HBM3"
DRIVER = "570.133.20"
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
NVSWITCHES = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")  # made up
LINKS_PER_SWITCH = (5, 4, 4, 5)


def bus_id(i: int) -> str:
    return f"0000:{HGX_BUSES[i]:02x}:00.0"


def uuid(i: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{i:012x}"  # made up


def switch_of_link(link: int) -> str:
    edge = 0
    for sw, count in enumerate(LINKS_PER_SWITCH):
        edge += count
        if link < edge:
            return NVSWITCHES[sw]
    return NVSWITCHES[-1]


def nvlink(link: int, active: bool = True, **counters: int) -> NvLink:
    base = dict(crc_flit_errors=0, crc_data_errors=0, replay_errors=0, recovery_errors=0)
    base.update(counters)
    return NvLink(link=link, active=active, version=4, version_raw=6,
                  remote_bus_id=switch_of_link(link) if active else None,
                  remote_device_type="switch" if active else None, **base)


def h100(i: int, **over: Any) -> Gpu:
    """A healthy HGX H100 as the nvml probe returns it."""
    g = Gpu(
        index=i, uuid=uuid(i), name=H100, serial=f"165000000{i:04d}", bus_id=bus_id(i),
        memory_total_bytes=81559 * 2**20, memory_used_bytes=0,
        persistence_mode=True, mig_mode_current=False, mig_mode_pending=False,
        ecc_mode_current=True, ecc_mode_pending=True,
        ecc_volatile_corrected=0, ecc_volatile_uncorrected=0, ecc_aggregate_corrected=0, ecc_aggregate_uncorrected=0,
        remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remapped_rows_pending=False,
        remapped_rows_failure=False,
        clock_event_reasons=0x1, clock_event_names=("idle",),
        temperature_c=33.0, power_w=71.5, power_limit_w=700.0,
        pcie_gen_current=1, pcie_gen_max=5, pcie_gen_device_max=5, pcie_width_current=16, pcie_width_max=16,
        pcie_replay_counter=0,
        nvlinks=tuple(nvlink(k) for k in range(18)),
        fabric_state="completed", fabric_status="success", fabric_health_mask=0,
        recovery_action="none",
    )
    return dataclasses.replace(g, **over)


def nvml_obs(gpus: list[Gpu], **over: Any) -> NvmlObservation:
    base = dict(driver_version=DRIVER, cuda_driver_version="12.8", nvml_version="12.570.133.20",
                device_count=len(gpus), gpus=tuple(gpus))
    base.update(over)
    return NvmlObservation(**base)


def pcie_obs(bus_ids: list[str], switches: tuple[str, ...] = NVSWITCHES, driver: str | None = "nvidia",
             **per_bdf: dict) -> PcieObservation:
    devs = [PcieDevice(bdf=b, kind="gpu", vendor_id="0x10de", device_id="0x2330", class_code="0x030200",
                       driver=driver, **per_bdf.get(b, {})) for b in bus_ids]
    devs += [PcieDevice(bdf=b, kind="nvswitch", vendor_id="0x10de", device_id="0x22a3", class_code="0x068000",
                        driver="nvidia") for b in switches]
    return PcieObservation(devices=tuple(devs))


def system_obs(**over: Any) -> SystemObservation:
    base = dict(hostname="synth-node", kernel="5.15.0-105-generic", nvidia_driver_version=DRIVER,
                fabric_manager="active", modules=("nvidia", "nvidia_uvm", "nvidia_peermem"))
    base.update(over)
    return SystemObservation(**base)


def kmsg_obs(events=(), uptime_s: float | None = 86400.0, **over: Any) -> KmsgObservation:
    return KmsgObservation(events=tuple(events), lines_scanned=len(events) + 1000, source="/dev/kmsg",
                           uptime_s=uptime_s, **over)


def kmsg_fixture(name: str) -> list:
    """Events parsed from a real kernel-log fixture (header lines removed)."""
    lines = [x for x in (KMSG_FIXTURES / name).read_text().splitlines() if not x.startswith("#ccdiag-")]
    events, _ = parse_lines(lines)
    return events


def ok(name: str, data: Any) -> ProbeRun:
    return ProbeRun(name, "ok", 0.01, data)


def healthy_runs(n: int = 8, gpus: list[Gpu] | None = None, kmsg: KmsgObservation | None = None,
                 system: SystemObservation | None = None, pcie: PcieObservation | None = None) -> dict[str, ProbeRun]:
    gpus = gpus if gpus is not None else [h100(i) for i in range(n)]
    return {
        "system": ok("system", system or system_obs()),
        "pcie": ok("pcie", pcie or pcie_obs([bus_id(i) for i in range(n)])),
        "nvml": ok("nvml", nvml_obs(gpus)),
        "kmsg": ok("kmsg", kmsg or kmsg_obs()),
    }


def with_gpu(runs: dict[str, ProbeRun], index: int, **over: Any) -> dict[str, ProbeRun]:
    """``runs`` with GPU ``index`` changed."""
    obs = runs["nvml"].data
    gpus = [dataclasses.replace(g, **over) if g.index == index else g for g in obs.gpus]
    return {**runs, "nvml": ok("nvml", dataclasses.replace(obs, gpus=tuple(gpus)))}


def with_link(runs: dict[str, ProbeRun], index: int, link: int, **over: Any) -> dict[str, ProbeRun]:
    g = next(g for g in runs["nvml"].data.gpus if g.index == index)
    links = tuple(dataclasses.replace(lk, **over) if lk.link == link else lk for lk in g.nvlinks)
    return with_gpu(runs, index, nvlinks=links)


def context(runs: dict[str, ProbeRun], later: dict[str, ProbeRun] | None = None, window_s: float = 0.0,
            policy: Policy = DEFAULT_POLICY, topology: Any = None, env: dict | None = None) -> CheckContext:
    return CheckContext(runs=runs, later=later, window_s=window_s, topology=topology, policy=policy,
                        env=env or {}, now=1_700_000_000.0)


# -- named scenarios -----------------------------------------------------------------------------

def healthy() -> CheckContext:
    return context(healthy_runs())


def gpu_gone(index: int = 3) -> CheckContext:
    """NVML lists 7 GPUs; PCI still enumerates the 8th (a GPU dropped without any XID)."""
    runs = healthy_runs()
    gpus = [g for g in runs["nvml"].data.gpus if g.index != index]
    gpus = [dataclasses.replace(g, index=i) for i, g in enumerate(gpus)]
    runs["nvml"] = ok("nvml", nvml_obs(gpus))
    return context(runs, policy=Policy(expected_gpu_count=8))


def gpu_lost(index: int = 5) -> CheckContext:
    from ccdiag.core.readings import ReadError
    runs = with_gpu(healthy_runs(), index, failed="gpu_lost", ecc_volatile_uncorrected=None,
                    ecc_aggregate_uncorrected=None, remapped_rows_pending=None, remapped_rows_failure=None,
                    temperature_c=None, nvlinks=(),
                    errors=(ReadError(f"nvmlDeviceGetTotalEccErrors({index}, 0, 0)", "gpu_lost", "GPU is lost"),))
    return context(runs)


def xid_at(events, uptime_s: float | None, policy: Policy = DEFAULT_POLICY, gpus=None) -> CheckContext:
    return context(healthy_runs(gpus=gpus, kmsg=kmsg_obs(events, uptime_s=uptime_s)), policy=policy)


def windowed(before: dict[str, ProbeRun], after: dict[str, ProbeRun], window_s: float = 10.0, **kw) -> CheckContext:
    return context(before, later=after, window_s=window_s, **kw)
