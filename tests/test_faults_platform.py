"""Platform settings judged as one root finding with what they explain folded beneath: IOMMU
translation, ACS on many bridges, a fabric manager that is down, no subnet manager. Scenarios are
SYNTHESIZED snapshots built with the samples' builder (tests/scenarios_node.py)."""

from __future__ import annotations

import scenarios_node as N
from ccdiag.core.findings import FAIL, PASS, WARN
from ccdiag.report.render import render_text


def _roots(res):
    return [f for f in res.findings if f.status in (FAIL, WARN) and not f.caused_by]


def _under(res, root):
    return [f for f in res.findings if f.caused_by == root.key]


def test_healthy_sample_passes_the_platform_checks():
    res = N.result("healthy")
    got = {f.check: f.status for f in res.findings if f.check in ("platform.iommu", "ib.subnet_manager", "pcie.acs")}
    assert got == {"platform.iommu": PASS, "ib.subnet_manager": PASS, "pcie.acs": PASS}


def test_iommu_translation_with_rdma_fails_and_explains_the_acs_it_brought():
    res = N.result("iommu-translated")
    roots = _roots(res)
    assert [(f.check, f.status, f.component.name) for f in roots] == [("platform.iommu", FAIL, "IOMMU")]
    assert roots[0].details == {"mode": "translated", "gpudirect": True}
    under = _under(res, roots[0])
    assert {f.check for f in under} == {"pcie.acs"} and len(under) == 9  # 8 bridges and their platform root
    assert "iommu=pt" in roots[0].remedy


def test_acs_on_every_bridge_is_one_platform_root():
    res = N.result("acs-everywhere")
    roots = _roots(res)
    assert [(f.check, f.component.name, len(f.details["bridges"])) for f in roots] == [
        ("pcie.acs", "PCIe ACS (platform)", 8)]
    assert sorted(f.component.kind for f in _under(res, roots[0])) == ["bridge"] * 8
    assert next(f for f in res.findings if f.check == "platform.iommu").status == PASS


def test_a_fabric_manager_down_is_the_cause_of_every_gpus_fabric_finding():
    res = N.result("fabric-manager-down")
    roots = _roots(res)
    assert [(f.check, f.component.name) for f in roots] == [("gpu.fabric_manager", "nvidia-fabricmanager")]
    under = _under(res, roots[0])
    assert sorted(f.component.gpu for f in under) == list(range(8))
    text = render_text(res.findings, res.exit_code, "n", quiet=True)
    assert text.count("\nFAIL ") == 1  # one line to act on


def test_no_subnet_manager_is_the_cause_of_the_init_ports():
    res = N.result("no-subnet-manager")
    roots = _roots(res)
    assert [(f.check, f.status) for f in roots] == [("ib.subnet_manager", FAIL)]
    under = _under(res, roots[0])
    assert sorted(f.component.device for f in under) == [f"mlx5_{i}" for i in range(8)]
    assert {f.check for f in under} == {"ib.port_state"}


def test_a_gpu_lost_in_the_second_sample_fails_gpu_lost():
    """NVIDIA's mock NVML showed it: a GPU lost during the counter window passed, its second
    sample only turning into skips. Every sample of the window is judged."""
    res = N.result("gpu-lost-mid-window")
    lost = [f for f in res.findings if f.check == "gpu.lost" and f.status == FAIL]
    assert [(f.component.gpu, f.component.bdf) for f in lost] == [(3, "0000:5d:00.0")]
    assert "lost during the counter window" in lost[0].summary
    assert res.exit_code == 1
    under = [f for f in res.findings if f.caused_by == lost[0].key]
    assert {f.check for f in under} >= {"pcie.replay"} and all(f.component.gpu == 3 for f in under)
    text = render_text(res.findings, res.exit_code, "n")
    assert "SKIP pcie.replay" not in text  # folded under the lost GPU, not a skip line of its own


def test_rm_init_adapter_failed_is_the_root_of_the_missing_gpu():
    """The real guest log (XID 119 GSP timeouts, then RmInitAdapter failed) on a node where NVML
    lists 7 of 8 GPUs: the driver's failure to initialise GPU3 explains the short count."""
    res = N.result("rm-init-failed")
    rm = next(f for f in res.findings if f.check == "xid.recent" and f.details["xid"] == -1)
    assert (rm.status, rm.component.bdf, rm.caused_by) == (FAIL, "0000:5d:00.0", None)
    assert rm.summary.startswith("RmInitAdapter failure")
    count = [f for f in res.findings if f.check == "gpu.count" and f.status == FAIL]
    assert count and all(f.caused_by == rm.key for f in count)


def test_an_nvlink_that_drops_in_the_second_sample_is_down():
    res = N.result("nvlink-lost-mid-window")
    down = [(f.component.name, f.status) for f in res.findings if f.check == "nvlink.down" and f.status != "pass"]
    assert down == [("GPU6 NVLink 11", FAIL)]
    assert res.exit_code == 1


def test_an_ib_port_that_goes_down_in_the_second_sample_fails():
    res = N.result("ib-port-down-mid-window")
    bad = [(f.component.name, f.status) for f in res.findings if f.check == "ib.port_state" and f.status != "pass"]
    assert bad == [("mlx5_6 port 1", FAIL)]
