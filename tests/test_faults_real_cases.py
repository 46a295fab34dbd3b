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
