"""GPUs and NICs against their peers with no policy: mixed models, a power cap, an idle link at a
lower generation than its idle peers', a rail NIC on the other socket. Scenarios are SYNTHESIZED
snapshots built with the samples' builder (tests/scenarios_node.py)."""

from __future__ import annotations

import scenarios_node as N
from ccdiag.core.findings import FAIL, PASS


def _fails(res):
    return [f for f in res.findings if f.status == FAIL and not f.caused_by]


def test_healthy_sample_passes_every_peer_rule():
    res = N.result("healthy")
    got = {f.check: f.status for f in res.findings
           if f.check in ("gpu.peer_model", "gpu.peer_power", "pcie.peer_gen", "ib.rail_socket")}
    assert got == {"gpu.peer_model": PASS, "gpu.peer_power": PASS, "pcie.peer_gen": PASS, "ib.rail_socket": PASS}


def test_an_h800_among_h100s_is_named():
    got = [(f.check, f.component.gpu, f.details["model"]) for f in _fails(N.result("mixed-model"))]
    assert got == [("gpu.peer_model", 5, "NVIDIA H800 80GB HBM3")]


def test_a_power_cap_below_same_model_peers_fails():
    got = [(f.check, f.component.gpu, f.details["power_limit_w"], f.details["peers_w"])
           for f in _fails(N.result("power-capped"))]
    assert got == [("gpu.peer_power", 6, 350.0, 700)]


def test_one_gpu_idle_at_gen3_beside_gen5_idle_peers_fails():
    got = [(f.check, f.component.kind, f.component.gpu, f.details["gen"], f.details["peers_gen"])
           for f in _fails(N.result("idle-gen3"))]
    assert got == [("pcie.peer_gen", "pcie_link", 4, 3, 5)]


def test_a_rail_nic_on_the_other_socket_is_the_misplaced_component():
    res = N.result("rail-nic-other-socket")
    roots = _fails(res)
    assert [(f.check, f.component.kind, f.component.name, f.details["gpus_without_nic"]) for f in roots] == [
        ("ib.rail_socket", "nic", "mlx5_2", ["GPU2"])]
    under = [f for f in res.findings if f.caused_by == roots[0].key]
    assert [(f.check, f.component.name, f.status) for f in under] == [("ib.gpudirect", "GPU2", "warn")]
    assert not [f for f in res.findings if f.status == "warn" and not f.caused_by]


def test_95c_without_nvml_thresholds_fails_on_the_table_limits():
    """NVML gives no thresholds: the model's limits come from the hardware catalogue (H100 SXM5:
    shutdown 92 C, inferred from the H800's), so 95 C fails rather than warning against the policy
    default."""
    res = N.result("hot-no-thresholds")
    temps = {f.component.gpu: f for f in res.findings if f.check == "gpu.temperature"}
    assert temps[7].status == FAIL and "shutdown limit (92 C)" in temps[7].summary
    assert "hardware catalogue (H100-SXM5" in temps[7].expected_source
    assert "INFERRED from the H800" in temps[7].expected_source
    assert all(temps[i].status == PASS for i in range(7))


def test_an_sm_clock_set_below_same_model_peers_fails():
    got = [(f.check, f.component.gpu, f.details["clock"], f.details["mhz"], f.details["peers_mhz"])
           for f in _fails(N.result("clocks-capped"))]
    assert got == [("gpu.peer_clocks", 1, "applications SM clock", 1410, 1980)]
    healthy = [f.status for f in N.result("healthy").findings if f.check == "gpu.peer_clocks"]
    assert healthy == [PASS]


def test_the_hardware_catalogue_is_the_one_source_of_thermal_limits():
    """H800: the catalogue has its limits (a real nvidia-smi -q); the H100's are there too, inferred
    from the H800's and saying so; a model without limits in the catalogue gets none."""
    import dataclasses as dc

    from ccdiag.checks.gpu import _with_thermal_limits
    from ccdiag.probes.nvml import Gpu

    g, src = _with_thermal_limits(Gpu(index=0, name="NVIDIA H800"))
    assert (g.temp_shutdown_c, g.temp_slowdown_c) == (92, 89) and src.startswith("hardware catalogue")
    g, src = _with_thermal_limits(dc.replace(g, name="NVIDIA H100 80GB HBM3", temp_shutdown_c=None,
                                             temp_slowdown_c=None, temp_gpu_max_c=None))
    assert g.temp_shutdown_c == 92 and src.startswith("hardware catalogue (H100-SXM5") and "INFERRED" in src
    g, src = _with_thermal_limits(Gpu(index=0, name="NVIDIA A100 80GB PCIe"))
    assert (g.temp_slowdown_c, g.temp_shutdown_c, g.temp_gpu_max_c, g.temp_mem_max_c) == (89, 92, 85, 95)
    assert src.startswith("hardware catalogue (A100-PCIE")
    g, src = _with_thermal_limits(Gpu(index=0, name="NVIDIA L40S"))
    assert g.temp_shutdown_c is None and src.startswith("the GPU's own")


def test_an_unused_gpu_resting_at_gen1_beside_a_job_at_gen5_is_not_a_fault():
    """GPUs in a job keep their links at Gen5 even between kernels (idle bit up); an unused GPU rests
    at Gen1. Its link is compared with GPUs at rest only, and nothing about it fails or warns."""
    res = N.result("busy-peers-idle-gen1")
    flagged = [(f.check, f.status, f.component.name) for f in res.findings
               if f.check.startswith("pcie.") and f.status not in (PASS, "skip")]
    assert flagged == []
    assert not any(f.status == FAIL for f in res.findings if f.component.gpu == 7)
