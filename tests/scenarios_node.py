"""Faults that span the node, one SYNTHESIZED snapshot each, built with the bundled samples'
own builder (samples/make_samples.py ``build(degraded=False, Variant(...))``) and replayed through
the host door, the probes, the topology and the checks exactly as ``ccdiag check --replay`` does.

Nothing here was read from a machine: each scenario changes the few facts its fault changes on the
healthy HGX H100 sample. Kernel-log lines are the REAL lines of tests/fixtures/kmsg (each file
names its public source), placed at a made-up time since boot on this node; where a line had to be
re-addressed to this node's devices, the scenario says so.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import pathlib
import sys
import tempfile

from ccdiag.run.checkrun import CheckResult, evaluate
from ccdiag.host.door import ReplayHost

HERE = pathlib.Path(__file__).resolve().parent
SAMPLES = HERE.parent / "samples"
KMSG = HERE / "fixtures" / "kmsg"
_spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
MS = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("make_samples", MS)
_spec.loader.exec_module(MS)
snv = MS.snv
ssf = MS.ssf

SWITCHES = snv.SYNTH_NVSWITCH_BUS_IDS
UPTIME_S = 52990.0  # the samples' kernel uptime at read time


def fixture_lines(name: str, at_s: float = UPTIME_S - 600.0) -> tuple:
    """The messages of a real kernel-log fixture, stamped ``at_s`` seconds after boot on this
    node (one microsecond apart, in their order)."""
    out = []
    for line in (KMSG / name).read_text().splitlines():
        if line.startswith("#ccdiag-") or not line.strip():
            continue
        msg = line.split("] ", 1)[1] if line.startswith("[") else line
        out.append((at_s + len(out) * 1e-6, msg, 3))
    return tuple(out)


def switch_links(sw: int) -> tuple[int, ...]:
    """The link indexes of every GPU that lead to synthesized switch ``sw`` (5/4/4/5)."""
    start = sum(snv.H100_LINKS_PER_SWITCH[:sw])
    return tuple(range(start, start + snv.H100_LINKS_PER_SWITCH[sw]))


def edit_gpus(fn):
    """A Variant.gpus hook applying ``fn(i, gpu, epoch) -> gpu`` to every GPU."""
    return lambda gpus, epoch: [fn(i, g, epoch) for i, g in enumerate(gpus)]


@functools.lru_cache(maxsize=None)
def result(name: str) -> CheckResult:
    """Build scenario ``name`` into a snapshot, replay it and return the verdict (cached)."""
    variant = SCENARIOS[name]() if name != "healthy" else None
    snap = MS.build(False, variant)
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"{name}.snap.tar.gz"
        snap.save(str(path))
        return evaluate(ReplayHost(str(path)), deadline_s=120)


def link_causes_of(res: CheckResult) -> list:
    return res.findings


# -------------------------------------------------------------------------------- scenarios

def nvswitch_down_sxid() -> "MS.Variant":
    """NVSwitch 0000:06:00.0 down: its four links inactive on every GPU (32 links), and the fatal
    SXid the driver prints for it. The SXid line is the issue's quoted format (no
    ``nvidia-nvswitchN:`` prefix); its code 24007 and layout follow the real lines in
    dmesg-xid79-sxid20034-fatal-links-four-nvswitches.txt."""
    down = switch_links(1)

    def fn(i, g, epoch):
        return dataclasses.replace(g, nvlink_states={k: False for k in down},
                                   nvlink_traffic_kib={k: v for k, v in (g.nvlink_traffic_kib or {}).items()
                                                       if k not in down} or None)
    line = (UPTIME_S - 300.0, f"SXid (PCI:{SWITCHES[1]}): 24007, Fatal, Link 04 sourcetrack timeout error", 3)
    # the XID 74 the guide says a fatal SXid propagates as, in the real line format of the corpus
    # (NVRM: Xid (PCI:<gpu>): 74, pid=..., name=..., <text>); its text is SYNTHESIZED
    xid74 = (UPTIME_S - 299.0, "NVRM: Xid (PCI:0000:18:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal "
             "error detected on link 5", 3)
    return MS.Variant("nvswitch-down", "NVSwitch 0000:06:00.0 down: links 5-8 of every GPU inactive; fatal SXid "
                      "24007 and GPU0's XID 74 in the kernel log", gpus=edit_gpus(fn), kmsg=(line, xid74))


def nvswitch_links_down_no_sxid() -> "MS.Variant":
    """The same switch down with nothing in the kernel log (the log rotated)."""
    v = nvswitch_down_sxid()
    return dataclasses.replace(v, name="nvswitch-links-down", kmsg=())


def nvswitch_sxid_real_lines() -> "MS.Variant":
    """The real XID 79 + SXid 20034 lines (three switches, fatal LTSSM faults) on this node: the
    lines name switches 0000:05/06/07:00.0, which are this sample's switches too; the GPU they
    name (0000:91:00.0) is not one of this node's."""
    name = "dmesg-xid79-sxid20034-fatal-links-four-nvswitches.txt"
    return MS.Variant("sxid-real", f"the real XID 79 / SXid 20034 lines of {name}", kmsg=fixture_lines(name))


def nvswitch_sxid_nonfatal() -> "MS.Variant":
    return MS.Variant("sxid-nonfatal", "the real non-fatal SXid 22013 line (re-addressed: switch "
                      "0000:0a:00.0 is not on this node, so it stands as its own component)",
                      kmsg=fixture_lines("dmesg-sxid-nonfatal-12028-22013-gpud-tests.txt")[1:])


def one_gpu_links_down() -> "MS.Variant":
    """GPU2 alone lost its two links to switch 0000:07:00.0: the GPU's fault, not the switch's."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, nvlink_states={9: False, 10: False}) if i == 2 else g
    return MS.Variant("one-gpu-links-down", "GPU2 NVLinks 9 and 10 inactive", gpus=edit_gpus(fn))


def iommu_translated() -> "MS.Variant":
    """``intel_iommu=on`` without ``iommu=pt``: the IOMMU groups' default domain is DMA (translated),
    and the kernel enabled ACS on the switch port above every GPU."""
    return MS.Variant("iommu-translated", "intel_iommu=on without iommu=pt (groups DMA); ACS on above every GPU",
                      system={"cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=on",
                              "iommu_group_type": "DMA"}, acs=tuple(range(8)))


def acs_everywhere() -> "MS.Variant":
    """ACS enabled on the switch port above every GPU (a BIOS option) with the IOMMU in pass-through."""
    return MS.Variant("acs-everywhere", "ACS on the switch port above every GPU, IOMMU pass-through",
                      acs=tuple(range(8)))


def fabric_manager_down() -> "MS.Variant":
    """nvidia-fabricmanager inactive: every GPU's fabric registration not started."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, fabric_state=1)
    return MS.Variant("fabric-manager-down", "nvidia-fabricmanager inactive; every GPU fabric state NOT_STARTED",
                      system={"fabric_manager": "inactive"}, gpus=edit_gpus(fn))


def no_subnet_manager() -> "MS.Variant":
    """No subnet manager: every port's physical link is up, the port stays INIT with no LID or SM LID."""
    def port(i, spec):
        return dataclasses.replace(spec, state="2: INIT", lid="0x0", sm_lid="0x0")
    return MS.Variant("no-subnet-manager", "every IB port LinkUp but INIT, SM LID 0", ib_port=port)


def gpu_lost_mid_window() -> "MS.Variant":
    """GPU3 answers in the first sample and is lost in the second (NVML: GPU is lost), as NVIDIA's
    mock NVML shows a GPU lost mid-window; nothing in the kernel log yet."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, overrides={"nvmlDeviceGetUUID": snv.err("gpu_lost")}) if (i, epoch) == (3, 1) \
            else g
    return MS.Variant("gpu-lost-mid-window", "GPU3 lost to NVML in the second sample only", gpus=edit_gpus(fn))


#: nvml.h fabric health mask of a healthy registered GPU: every field FALSE (2), configuration NONE (1)
HEALTHY_MASK = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
CLUSTER = tuple(range(0x10, 0x20))  # made-up cluster UUID bytes


def fabric_degraded() -> "MS.Variant":
    """Every GPU registered in clique 7 of one cluster; GPU5 reports degraded bandwidth, an
    unhealthy route and insufficient NVLinks in its health mask; GPU2 sits in clique 9."""
    def fn(i, g, epoch):
        mask = HEALTHY_MASK
        if i == 5:
            mask = 1 | 2 << 2 | 1 << 4 | 2 << 6 | 5 << 8
        return dataclasses.replace(g, fabric_health_mask=mask, fabric_clique_id=9 if i == 2 else 7,
                                   fabric_cluster_uuid=CLUSTER)
    return MS.Variant("fabric-degraded", "GPU5 fabric health degraded/route unhealthy/insufficient NVLinks; GPU2 in "
                      "clique 9 of 7", gpus=edit_gpus(fn))


def fabric_healthy_mask() -> "MS.Variant":
    def fn(i, g, epoch):
        return dataclasses.replace(g, fabric_health_mask=HEALTHY_MASK, fabric_clique_id=7, fabric_cluster_uuid=CLUSTER)
    return MS.Variant("fabric-healthy", "every GPU healthy in clique 7", gpus=edit_gpus(fn))


def mixed_model() -> "MS.Variant":
    """GPU5 is an H800 among seven H100s (the name NVML gives it; everything else as the H100)."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, name="NVIDIA H800 80GB HBM3") if i == 5 else g
    return MS.Variant("mixed-model", "GPU5 an H800 among H100s", gpus=edit_gpus(fn))


def power_capped() -> "MS.Variant":
    """GPU6's enforced power limit is 350 W; its peers run at 700 W."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, power_limit_mw=350_000) if i == 6 else g
    return MS.Variant("power-capped", "GPU6 power limit 350 W of 700 W", gpus=edit_gpus(fn))


def idle_gen3() -> "MS.Variant":
    """GPU4 idles at PCIe Gen3 (NVML and sysfs alike) while its idle peers hold Gen5."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, pcie_gen=3) if i == 4 else g
    return MS.Variant("idle-gen3", "GPU4 idle at Gen3, peers idle at Gen5", gpus=edit_gpus(fn),
                      gpu_link=lambda i: ssf.Link(ssf.GEN3, 16, ssf.GEN5, 16) if i == 4 else None)


def busy_peers_idle_gen1() -> "MS.Variant":
    """A job runs on GPUs 0-6 (a process each; GPUs 0-3 caught between kernels with the idle bit
    up), their links at Gen5; GPU7 is unused and rests at Gen1 (2.5 GT/s), as idle GPUs do."""
    def fn(i, g, epoch):
        if i == 7:
            return dataclasses.replace(g, pcie_gen=1)
        return dataclasses.replace(g, processes=((4100 + i, 30 << 30),), memory_used_mib=30720,
                                   clocks_event_reasons=0x1 if i < 4 else 0x0)
    return MS.Variant("busy-peers-idle-gen1", "GPUs 0-6 in a job at Gen5, GPU7 unused at Gen1", gpus=edit_gpus(fn),
                      gpu_link=lambda i: ssf.Link(ssf.GEN1, 16, ssf.GEN5, 16) if i == 7 else None)


def dmabuf_no_peermem() -> "MS.Variant":
    """GPUDirect RDMA over DMA-BUF: the open GPU kernel modules (banner of a real R570 one), Linux
    6.8, rdma-core 50, and no nvidia_peermem loaded (the healthy node NCCL's maintainers describe in
    NVIDIA/nccl#1474)."""
    modules = tuple(m for m in MS.ssf.DEFAULT_MODULES if m != "nvidia_peermem")
    return MS.Variant("dmabuf-no-peermem", "open kernel modules, Linux 6.8, rdma-core 50, no nvidia_peermem",
                      system={"modules": modules, "kernel": "6.8.0-90-generic", "open_kernel_module": True,
                              "libibverbs": "libibverbs.so.1.14.50.0"})


def dmabuf_disabled_no_peermem() -> "MS.Variant":
    """The same node with NCCL told not to use DMA-BUF in /etc/nccl.conf (the workaround of
    NVIDIA/nccl#778): now nothing registers GPU memory for the NICs."""
    v = dmabuf_no_peermem()
    return dataclasses.replace(v, name="dmabuf-disabled-no-peermem",
                               system={**v.system, "nccl_conf": "NCCL_DMABUF_ENABLE=0\n"})


def rail_nic_other_socket() -> "MS.Variant":
    """mlx5_2 (GPU2's rail NIC) sits in a slot of socket 1, under its own root port, instead of
    beside GPU2 on socket 0."""
    return MS.Variant("rail-nic-other-socket", "mlx5_2 moved to a socket-1 slot (0000:c9:00.0)",
                      nic_at={2: ("pci0000:c8", "0000:c8:01.0", "0000:c9:00.0", 1)})


def hot_without_thresholds() -> "MS.Variant":
    """NVML answers no temperature thresholds (not supported) on any GPU; GPU7 reads 95 C."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, temp_thresholds=None, temperature_c=95 if i == 7 else g.temperature_c)
    return MS.Variant("hot-no-thresholds", "no NVML temperature thresholds; GPU7 at 95 C", gpus=edit_gpus(fn))


def rm_init_failed() -> "MS.Variant":
    """The driver could not initialise GPU3: NVML lists seven GPUs, PCI still shows eight. The
    kernel lines are the real ones of dmesg-xid119-gsp-timeout-rminitadapter-failed-guest.txt,
    RE-ADDRESSED from the reporter's 0000:00:06.0 to this node's GPU3 (0000:5d:00.0)."""
    lines = tuple((t, m.replace("0000:00:06", "0000:5d:00"), p)
                  for t, m, p in fixture_lines("dmesg-xid119-gsp-timeout-rminitadapter-failed-guest.txt"))

    def gpus(gs, epoch):
        return [g for i, g in enumerate(gs) if i != 3]
    return MS.Variant("rm-init-failed", "GPU3 failed RmInitAdapter (real lines re-addressed); NVML lists 7 of 8",
                      gpus=gpus, kmsg=lines)


def clocks_capped() -> "MS.Variant":
    """GPU1's applications SM clock set to 1410 MHz; its peers at the default 1980 MHz."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, clock_sm_app_mhz=1410) if i == 1 else g
    return MS.Variant("clocks-capped", "GPU1 applications SM clock 1410 of 1980 MHz", gpus=edit_gpus(fn))


def nvlink_lost_mid_window() -> "MS.Variant":
    """GPU6 NVLink 11 active in the first sample and inactive in the second."""
    def fn(i, g, epoch):
        return dataclasses.replace(g, nvlink_states={11: False}) if (i, epoch) == (6, 1) else g
    return MS.Variant("nvlink-lost-mid-window", "GPU6 NVLink 11 drops between the samples", gpus=edit_gpus(fn))


def ib_port_down_mid_window() -> "MS.Variant":
    """mlx5_6 port 1 ACTIVE in the first sample and DOWN / Polling in the second."""
    return MS.Variant("ib-port-down-mid-window", "mlx5_6 port 1 goes DOWN between the samples",
                      ib_later={6: {"state": "1: DOWN", "phys_state": "2: Polling"}})


SCENARIOS = {
    "ib-port-down-mid-window": ib_port_down_mid_window,
    "nvlink-lost-mid-window": nvlink_lost_mid_window,
    "clocks-capped": clocks_capped,
    "rm-init-failed": rm_init_failed,
    "hot-no-thresholds": hot_without_thresholds,
    "mixed-model": mixed_model,
    "power-capped": power_capped,
    "idle-gen3": idle_gen3,
    "busy-peers-idle-gen1": busy_peers_idle_gen1,
    "dmabuf-no-peermem": dmabuf_no_peermem,
    "dmabuf-disabled-no-peermem": dmabuf_disabled_no_peermem,
    "rail-nic-other-socket": rail_nic_other_socket,
    "fabric-degraded": fabric_degraded,
    "fabric-healthy": fabric_healthy_mask,
    "gpu-lost-mid-window": gpu_lost_mid_window,
    "iommu-translated": iommu_translated,
    "acs-everywhere": acs_everywhere,
    "fabric-manager-down": fabric_manager_down,
    "no-subnet-manager": no_subnet_manager,
    "nvswitch-down": nvswitch_down_sxid,
    "nvswitch-links-down": nvswitch_links_down_no_sxid,
    "sxid-real": nvswitch_sxid_real_lines,
    "sxid-nonfatal": nvswitch_sxid_nonfatal,
    "one-gpu-links-down": one_gpu_links_down,
}
