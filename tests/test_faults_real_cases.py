"""The node-wide rules tried on cases from public threads (tests/fixtures/cases: each file names
its source and the cause the thread established). The readings each case implies are put on the
SYNTHESIZED sample node (tests/scenarios_node.py) or on the scenario probes, and the verdict must
name that cause as the root."""

from __future__ import annotations

import dataclasses
import pathlib

import scenarios_fabric as S
import scenarios_node as N
from ccdiag.checks import run_checks
from ccdiag.probes.infiniband import IbObservation
from ccdiag.probes.system import iommu_mode

CASES = pathlib.Path(__file__).resolve().parent / "fixtures" / "cases"


def case(name: str) -> dict[str, str]:
    """The facts of a case file: its ``#ccdiag-`` header fields and its ``key: value`` lines."""
    out = {}
    for line in (CASES / name).read_text().splitlines():
        key, _, value = line.partition(": ")
        out[key.removeprefix("#ccdiag-")] = value
    return out


def _root(res):
    roots = [f for f in res.findings if f.status == "fail" and not f.caused_by]
    assert len(roots) == 1, [(f.check, f.component.name) for f in roots]
    return roots[0]


def test_nccl_257_iommu_translation_is_named_without_rdma():
    """P2P AllReduce hangs on 4 GPUs fixed by intel_iommu=off: no RDMA port, so a warning that
    names the IOMMU's translation (GPU peer-to-peer goes through it too)."""
    c = case("nccl-257-intel-iommu-p2p-hang.txt")
    assert "IOMMU" in c["cause"]
    mode = iommu_mode(c["cmdline"], ["dmar0"], c["iommu_group_type"])
    runs = S.edit_system(S.healthy_runs(), iommu=mode, cmdline=c["cmdline"], modules=("nvidia", "nvidia_uvm"))
    runs = S.with_data(runs, "infiniband", IbObservation(devices=()))
    assert int(c["rdma_ports_active"]) == 0
    f = run_checks(S.make_ctx(runs), only=["platform.iommu"])[0]
    assert (f.status, f.details) == ("warn", {"mode": "translated", "gpudirect": False})
    assert "IOMMU translates" in f.summary and "iommu=pt" in f.remedy


def test_nccl_1737_acs_and_iommu_behind_gpudirect_hangs():
    c = case("nccl-1737-gdrdma-acs-iommu.txt")
    assert "ACS" in c["cause"] and "IOMMU" in c["cause"]
    variant = N.SCENARIOS["iommu-translated"]()
    assert variant.system["iommu_group_type"] == c["iommu_group_type"] and len(variant.acs) == 8
    root = _root(N.result("iommu-translated"))
    assert (root.check, root.details["gpudirect"]) == ("platform.iommu", True)
    under = [f for f in N.result("iommu-translated").findings if f.caused_by == root.key]
    assert {f.check for f in under} == {"pcie.acs"}


def test_fabric_manager_missing_is_the_root_of_the_unregistered_gpus():
    c = case("aws-dlami-33-fabric-manager-missing.txt")
    assert "fabricmanager" in c["cause"]
    variant = N.SCENARIOS["fabric-manager-down"]()
    assert variant.system["fabric_manager"] == c["systemctl is-active nvidia-fabricmanager"]
    g = variant.gpus([dataclasses.replace(N.snv.h100_node(1)[0])], 0)[0]
    assert c["nvmlDeviceGetGpuFabricInfoV state"].startswith(str(g.fabric_state))
    root = _root(N.result("fabric-manager-down"))
    assert (root.check, root.component.name) == ("gpu.fabric_manager", "nvidia-fabricmanager")
    assert "enable --now nvidia-fabricmanager" in root.remedy


def test_initializing_ports_without_a_subnet_manager_name_the_subnet_manager():
    c = case("advancedclustering-ib-port-initializing.txt")
    assert "subnet manager" in c["cause"]
    spec = N.SCENARIOS["no-subnet-manager"]().ib_port(0, N.ssf.IbPortSpec())
    assert (spec.state, spec.phys_state, spec.sm_lid) == (c["state"], c["phys_state"], c["sm_lid"])
    root = _root(N.result("no-subnet-manager"))
    assert root.check == "ib.subnet_manager" and "subnet manager" in root.summary


# -- one GPU event, one root ------------------------------------------------------------------------

def _gpu_event_case(name: str, at_s: float = 50_000.0, uptime_s: float = 50_600.0):
    """The runs of a case file's XID lines (stamped one second apart) and NVML facts, on GPU2 of the
    synthesized HGX node re-addressed to the case's PCI address."""
    import scenarios_gpu as G
    from ccdiag.probes.kmsg import parse_lines

    c = case(name)
    lines = [f"[{at_s + i:.6f}] {v}" for i, (k, v) in enumerate((k, v) for k, v in c.items() if k.startswith("xid "))]
    events, _ = parse_lines(lines)
    bdf = events[0].bdf
    nv = {k.removeprefix("nvml "): v for k, v in c.items() if k.startswith("nvml ")}
    typed = {k: (v == "True" if v in ("True", "False") else int(v) if v.isdigit() else v) for k, v in nv.items()}
    gpus = [G.h100(i, bus_id=bdf if i == 2 else G.bus_id(i), **(typed if i == 2 else {})) for i in range(8)]
    pcie = G.pcie_obs([g.bus_id for g in gpus])
    return c, G.healthy_runs(gpus=gpus, kmsg=G.kmsg_obs(events, uptime_s=uptime_s), pcie=pcie)


def _linked(runs, **kw):
    import scenarios_gpu as G
    from ccdiag.checks.causes import link_causes, node_action

    found = link_causes(list(run_checks(G.context(runs, **kw))))
    return found, node_action(found)


def test_vllm_backport_62_one_dbe_is_one_root_with_one_remedy():
    """XID 48/171, 63, 94 and 154 with a DBE counted, a remap pending and the driver asking for a
    reset, all on one GPU: one root (the XID 48), everything else folded beneath it, one action."""
    c, runs = _gpu_event_case("vllm-backport-62-hbm-dbe-one-gpu.txt")
    assert "HBM" in c["cause"] and "one GPU" in c["cause"]
    found, action = _linked(runs)
    roots = [f for f in found if f.status in ("fail", "warn", "unknown") and not f.caused_by
             and f.check.startswith(("xid.", "gpu.", "nvlink.", "pcie."))]
    assert [(f.check, f.component.name, f.details.get("xid")) for f in roots] == [("xid.recent", "GPU2", 48)]
    under = {(f.check, f.details.get("xid")) for f in found if f.caused_by == roots[0].key}
    assert under >= {("xid.recent", 171), ("xid.recent", 94), ("xid.recent", 154), ("gpu.ecc", None),
                     ("gpu.remapped_rows", None), ("gpu.recovery_action", None)}
    assert action == "reset_gpu" and roots[0].action == "reset_gpu"
    assert "nvidia-smi -r -i 2" in roots[0].remedy


def test_an_old_xid95_before_the_driver_was_loaded_again_no_longer_fails():
    """An uncontained error (XID 95, the driver's own line format) an hour before the driver was
    loaded again (its real banner, NVIDIA/NVSentinel#155): the GPU was initialised afresh since."""
    import scenarios_gpu as G
    from ccdiag.probes.kmsg import parse_lines

    bdf = G.bus_id(4)[:-2]
    lines = [f"[40000.0] NVRM: Xid (PCI:{bdf}): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No",
             "[44000.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
             "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025"]
    events, _ = parse_lines(lines)
    runs = G.healthy_runs(kmsg=G.kmsg_obs(events, uptime_s=45000.0))
    f = [x for x in run_checks(G.context(runs), only=["xid.recent"]) if x.details.get("xid") == 95][0]
    assert (f.status, f.action, f.details["cleared_by_driver_load"]) == ("pass", "none", True)
    assert "initialised afresh" in f.summary
    events, _ = parse_lines(lines[:1])  # without the reload it still fails, with NVIDIA's bucket
    runs = G.healthy_runs(kmsg=G.kmsg_obs(events, uptime_s=45000.0))
    f = [x for x in run_checks(G.context(runs), only=["xid.recent"]) if x.details.get("xid") == 95][0]
    assert (f.status, f.action) == ("fail", "reset_gpu")


def test_an_xid_logged_during_the_window_is_judged_and_explains_the_lost_gpu():
    """The first read of the kernel log is clean; XID 79 arrives during the window and NVML loses
    the GPU in the second sample: xid.recent fails on it and gpu.lost folds under it."""
    import dataclasses

    import scenarios_gpu as G
    from ccdiag.probes.kmsg import parse_lines

    bdf = G.bus_id(6)[:-2]
    events, _ = parse_lines([f"[52000.0] NVRM: Xid (PCI:{bdf}): 79, pid=48211, name=python3, GPU has fallen off the bus."])
    before = G.healthy_runs(kmsg=G.kmsg_obs((), uptime_s=51990.0))
    after = G.with_gpu(G.healthy_runs(kmsg=G.kmsg_obs(events, uptime_s=52010.0)), 6, failed="gpu_lost")
    after = {k: after[k] for k in ("nvml", "kmsg")}
    found, action = _linked(before, later=after, window_s=20.0)
    xid = [f for f in found if f.check == "xid.recent"]
    assert [(f.status, f.component.name, f.details["during_window"]) for f in xid] == [("fail", "GPU6", 1)]
    lost = [f for f in found if f.check == "gpu.lost" and f.status == "fail"]
    assert [f.caused_by for f in lost] == ["xid.recent|GPU6|XID 79"] and action == "reboot"
    assert dataclasses.replace  # the window's own reads, nothing else changed


def test_nccl_1474_a_dmabuf_node_without_peermem_is_healthy():
    """Open kernel modules, a recent kernel and rdma-core, no nvidia_peermem: GPUDirect RDMA over
    DMA-BUF, the node passes, and the finding says NCCL's path."""
    c = case("nccl-1474-dmabuf-instead-of-peermem.txt")
    assert "DMA-BUF" in c["cause"] and c["nvidia_peermem"] == "not loaded"
    res = N.result("dmabuf-no-peermem")
    f = [x for x in res.findings if x.check == "ib.gpudirect" and x.component.kind == "module"]
    assert [(x.status, x.details["nccl_path"]) for x in f] == [("pass", "dmabuf")]
    assert res.exit_code == 0 and not [x for x in res.findings if x.status == "fail"]


def test_nccl_778_dmabuf_turned_off_without_peermem_fails_naming_the_setting():
    res = N.result("dmabuf-disabled-no-peermem")
    root = _root(res)
    assert (root.check, root.component.name) == ("ib.gpudirect", "dma-buf")
    assert "NCCL_DMABUF_ENABLE=0" in root.summary and "/etc/nccl.conf" in root.remedy


def test_xid79_with_xid154_is_one_event_whose_action_is_a_reboot():
    """XID 79 and the driver's own XID 154 "Node Reboot Required" on one GPU: one root, a reboot."""
    import scenarios_gpu as G

    events = G.kmsg_fixture("dmesg-xid79-then-xid154-node-reboot-required.txt")
    gpus = [G.h100(i, bus_id="0000:01:00.0" if i == 0 else G.bus_id(i)) for i in range(8)]
    runs = G.healthy_runs(gpus=gpus, kmsg=G.kmsg_obs(events, uptime_s=None),
                          pcie=G.pcie_obs([g.bus_id for g in gpus]))
    found, action = _linked(runs)
    xid = {f.details["xid"]: f for f in found if f.check == "xid.recent"}
    assert xid[154].caused_by == xid[79].key and xid[79].caused_by is None
    assert (xid[154].action, xid[79].action, action) == ("reboot", "reboot", "reboot")


def test_awsome_1190_a_failed_row_remap_is_one_root_that_needs_service():
    c, runs = _gpu_event_case("awsome-1190-xid64-row-remap-failure-rma.txt")
    assert "RMA" in c["cause"]
    found, action = _linked(runs)
    roots = [f for f in found if f.status == "fail" and not f.caused_by and f.check.startswith(("xid.", "gpu."))]
    assert [(f.check, f.component.name) for f in roots] == [("gpu.remapped_rows", "GPU2")]
    assert [f.details["xid"] for f in found if f.caused_by == roots[0].key and f.check == "xid.recent"] == [64]
    assert action == "service" and "RMA" in roots[0].remedy
