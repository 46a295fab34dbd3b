"""InfiniBand / RoCE / GPUDirect checks on named, synthesized scenarios (see scenarios_fabric)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import scenarios_fabric as S
from ccdiag.checks import REGISTRY, load_all, run_checks
from ccdiag.checks.infiniband import counters, gpudirect, link_flaps, port_state, rate, roce_gid
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN
from ccdiag.inputs.policy import Policy
from ccdiag.probes.infiniband import Gid
from ccdiag.probes.kmsg import KernelEvent
from ccdiag.probes.registry import ProbeRun

IB_CHECKS = ("ib.port_state", "ib.rate", "ib.counters", "ib.link_flaps", "ib.roce_gid", "ib.gpudirect",
             "ib.subnet_manager", "ib.rail_socket", "ib.mtu", "ib.rp_filter", "ib.ecn")


def bad(findings):
    return [f for f in findings if f.status in (FAIL, WARN, UNKNOWN)]


def test_registered():
    load_all()
    assert set(IB_CHECKS) <= set(REGISTRY)


@pytest.mark.parametrize("runs", [S.healthy_runs, S.roce_node])
def test_healthy_ib_and_roce_nodes_have_no_warn_or_fail(runs):
    r = runs()
    findings = run_checks(S.make_ctx(r, later=r, window_s=30), only=("ib.",))
    assert bad(findings) == []
    assert {f.check for f in findings if f.status == PASS} >= {"ib.port_state", "ib.rate", "ib.counters"}


def test_port_polling_fails_with_cable_remedy():
    problems = bad(port_state(S.sc_ib_polling()))
    assert len(problems) == 1
    f = problems[0]
    assert (f.check, f.status) == ("ib.port_state", FAIL)
    assert (f.component.kind, f.component.device, f.component.port, f.component.name) == \
        ("ib_port", "mlx5_2", 1, "mlx5_2 port 1")
    assert "cable" in f.remedy
    assert {e.source for e in f.evidence} == {"/sys/class/infiniband/mlx5_2/ports/1/state",
                                              "/sys/class/infiniband/mlx5_2/ports/1/phys_state"}
    # a down port is not judged for rate
    assert not [x for x in rate(S.sc_ib_polling()) if x.component.device == "mlx5_2"]


def test_port_linkup_but_init_points_at_the_subnet_manager():
    ctx = S.make_ctx(S.edit_port(S.healthy_runs(), "mlx5_0", state="INIT", state_code=2))
    f = bad(port_state(ctx))
    assert [(x.status, x.component.device) for x in f] == [(FAIL, "mlx5_0")]
    assert "subnet manager" in f[0].remedy


def test_policy_port_count():
    ctx = S.make_ctx(S.sc_ib_polling().runs, policy=Policy(expected_ib_ports=8, source="p.yaml"))
    node = [f for f in port_state(ctx) if f.component.kind == "node"]
    assert [(f.status, f.expected) for f in node] == [(FAIL, "8")]


def test_2x_width_among_4x_siblings_fails():
    problems = bad(rate(S.sc_ib_2x_width()))
    assert len(problems) == 1
    f = problems[0]
    assert (f.check, f.status, f.component.kind, f.component.device, f.component.port) == \
        ("ib.rate", FAIL, "ib_port", "mlx5_7", 1)
    assert f.expected == "4X"
    assert f.evidence[0].value == "200 Gb/sec (2X NDR)"


def test_uniform_2x_hdr_warns_unless_policy_demands_the_rate():
    runs = S.healthy_runs()
    for i in range(S.N):
        runs = S.edit_port(runs, f"mlx5_{i}", rate_gbit_s=100.0, rate_raw="100 Gb/sec (2X HDR)", width=2,
                           speed_name="HDR")
    problems = bad(rate(S.make_ctx(runs)))
    assert len(problems) == 8 and {f.status for f in problems} == {WARN}
    strict = bad(rate(S.make_ctx(runs, policy=Policy(ib_rate_gbit_s=200, source="fleet.yaml"))))
    assert {f.status for f in strict} == {FAIL}
    assert strict[0].expected_source == "policy fleet.yaml: ib_rate_gbit_s"


@pytest.mark.parametrize("incs,status", [
    ({"link_downed": 1}, FAIL),
    ({"symbol_error": 40, "link_error_recovery": 2}, FAIL),
    ({"port_rcv_errors": 3}, WARN),
    ({"port_rcv_errors": 3000}, FAIL),  # 100/s over 30 s: excessive
    ({"local_link_integrity_errors": 1}, WARN),
    ({"excessive_buffer_overrun_errors": 2}, WARN),
    ({"symbol_error": 5}, PASS),  # symbol errors alone, slowly: no action (IBswcountlimits)
    ({"symbol_error": 600}, WARN),  # 20/s
])
def test_counter_rising_over_the_window(incs, status):
    before, after = S.counter_window(**incs)
    findings = counters(S.make_ctx(before, later=after, window_s=30))
    mine = [f for f in findings if f.component.device == "mlx5_3"]
    assert [(f.check, f.status, f.component.kind, f.component.port) for f in mine] == \
        [("ib.counters", status, "ib_port", 1)]
    assert all(f.status == PASS for f in findings if f.component.device != "mlx5_3")
    if status != PASS:
        assert mine[0].evidence[0].source.startswith("/sys/class/infiniband/mlx5_3/ports/1/counters/")


def test_counter_lifetime_only_is_not_judged():
    runs = S.bump_counters(S.healthy_runs(), "mlx5_3", link_downed=50, symbol_error=10_000)
    findings = counters(S.make_ctx(runs))
    assert [(f.check, f.status) for f in findings] == [("ib.counters", SKIP)]
    assert findings[0].details["lifetime_nonzero"]["mlx5_3:1"]["link_downed"] == 51
    # the same totals unchanged across a window are not a fault either
    assert bad(counters(S.make_ctx(runs, later=runs, window_s=30))) == []


def test_counter_reset_between_samples_is_not_an_increase():
    before = S.bump_counters(S.healthy_runs(), "mlx5_3", link_downed=5)
    after = S.healthy_runs()
    assert bad(counters(S.make_ctx(before, later=after, window_s=30))) == []


def test_link_flaps_recent_warn_many_fail_old_ignored():
    up = S.healthy_kmsg().uptime_s
    ev = [KernelEvent("ib_link_down", "mlx5_core 0000:30:00.0 ib1: Link down", time_s=up - 600, device="ib1")] * 2
    runs = S.with_data(S.healthy_runs(), "kmsg", replace(S.healthy_kmsg(), events=tuple(ev)))
    f = bad(link_flaps(S.make_ctx(runs)))
    assert [(x.check, x.status, x.component.kind, x.component.device, x.component.port) for x in f] == \
        [("ib.link_flaps", WARN, "ib_port", "mlx5_1", 1)]
    runs = S.with_data(runs, "kmsg", replace(S.healthy_kmsg(), events=tuple(ev * 3)))
    assert [x.status for x in bad(link_flaps(S.make_ctx(runs)))] == [FAIL]
    old = [replace(e, time_s=10.0) for e in ev]
    runs = S.with_data(runs, "kmsg", replace(S.healthy_kmsg(), events=tuple(old)))
    assert [x.status for x in link_flaps(S.make_ctx(runs))] == [PASS]


def test_link_flaps_unknown_when_kernel_log_failed():
    runs = dict(S.healthy_runs())
    runs["kmsg"] = ProbeRun("kmsg", "timeout", 5.0, None, "deadline")
    assert [f.status for f in link_flaps(S.make_ctx(runs))] == [UNKNOWN]


def test_roce_port_without_v2_gid_fails():
    runs = S.edit_port(S.roce_node(), "mlx5_4", gids=(
        Gid(0, "fe80:0000:0000:0000:ba3f:d2ff:fe00:0001", "IB/RoCE v1", "ib4"),))
    problems = bad(roce_gid(S.make_ctx(runs)))
    assert [(f.check, f.status, f.component.kind, f.component.device, f.component.port) for f in problems] == \
        [("ib.roce_gid", FAIL, "ib_port", "mlx5_4", 1)]
    assert "ib4" in problems[0].remedy


def test_roce_port_with_only_link_local_v2_gid_warns():
    runs = S.edit_port(S.roce_node(), "mlx5_0", gids=(
        Gid(0, "fe80:0000:0000:0000:ba3f:d2ff:fe00:0001", "IB/RoCE v1", "ib0"),
        Gid(1, "fe80:0000:0000:0000:ba3f:d2ff:fe00:0001", "RoCE v2", "ib0")))
    assert [(f.status, f.component.device) for f in bad(roce_gid(S.make_ctx(runs)))] == [(WARN, "mlx5_0")]


def test_roce_gid_skips_on_infiniband_only_node():
    assert [f.status for f in roce_gid(S.make_ctx())] == [SKIP]


NO_PEERMEM = ("nvidia", "mlx5_core", "mlx5_ib", "ib_core")
#: a node that can register GPU memory by DMA-BUF: the open kernel modules, Linux 5.15, R570, rdma-core 44
DMABUF_NODE = dict(modules=NO_PEERMEM, nvidia_module_flavor="open", kernel="5.15.0-131-generic",
                   nvidia_driver_version="570.133.20", rdma_core_version=44)


def test_peermem_missing_fails():
    """The proprietary kernel module cannot export dma-bufs: without nvidia_peermem, no GPUDirect."""
    runs = S.edit_system(S.healthy_runs(), **{**DMABUF_NODE, "nvidia_module_flavor": "proprietary"})
    problems = bad(gpudirect(S.make_ctx(runs)))
    assert [(f.check, f.status, f.component.kind, f.component.name) for f in problems] == \
        [("ib.gpudirect", FAIL, "module", "nvidia_peermem")]
    assert "modprobe nvidia_peermem" in problems[0].remedy and "open GPU kernel modules" in problems[0].summary


def test_a_healthy_dmabuf_node_passes_without_peermem_and_names_nccls_path():
    runs = S.edit_system(S.healthy_runs(), **DMABUF_NODE)
    f = [x for x in gpudirect(S.make_ctx(runs)) if x.component.kind == "module"]
    assert [(x.status, x.component.name, x.details["nccl_path"]) for x in f] == [(PASS, "dma-buf", "dmabuf")]
    assert "DMA-BUF" in f[0].summary and "no nvidia_peermem needed" in f[0].summary


@pytest.mark.parametrize("changes, status, words", [
    ({"environ": {"NCCL_DMABUF_ENABLE": "0"}}, FAIL, "NCCL_DMABUF_ENABLE=0"),
    ({"nccl_conf_text": "NCCL_DMABUF_ENABLE=0\n"}, FAIL, "NCCL_DMABUF_ENABLE=0"),
    ({"environ": {"NCCL_NET_GDR_LEVEL": "LOC"}}, WARN, "will not use GPUDirect RDMA"),
    ({"kernel": "5.4.0-216-generic"}, FAIL, "Linux 5.12 or later"),
    ({"nvidia_driver_version": "470.256.02"}, FAIL, "R515 or later"),
    ({"rdma_core_version": None}, PASS, "rdma-core 34 or later (not read; assumed from the kernel release)"),
    ({"rdma_core_version": 28}, FAIL, "rdma-core 34 or later"),
    ({"kernel": None}, UNKNOWN, "Linux 5.12"),
    ({"nvidia_module_flavor": None}, UNKNOWN, "open GPU kernel modules"),
])
def test_what_stops_each_path_is_named(changes, status, words):
    runs = S.edit_system(S.healthy_runs(), **{**DMABUF_NODE, **changes})
    f = [x for x in gpudirect(S.make_ctx(runs)) if x.component.kind == "module"]
    assert [x.status for x in f] == [status] and words in f[0].summary, f[0].summary


def test_both_paths_nccl_prefers_dmabuf_and_the_policy_can_still_require_peermem():
    runs = S.edit_system(S.healthy_runs(), **{**DMABUF_NODE, "modules": NO_PEERMEM + ("nvidia_peermem",)})
    f = [x for x in gpudirect(S.make_ctx(runs)) if x.component.kind == "module"][0]
    assert (f.status, f.details["nccl_path"]) == (PASS, "dmabuf") and "nvidia_peermem is loaded too" in f.summary
    runs = S.edit_system(S.healthy_runs(), **DMABUF_NODE)
    f = [x for x in gpudirect(S.make_ctx(runs, policy=Policy(require_peermem=True))) if x.component.kind == "module"]
    assert [x.status for x in f] == [FAIL] and "policy requires it" in f[0].summary


def test_legacy_peer_mem_module_counts_and_policy_can_waive():
    runs = S.edit_system(S.healthy_runs(), modules=("nvidia", "nv_peer_mem"))
    assert bad(gpudirect(S.make_ctx(runs))) == []
    runs = S.edit_system(S.healthy_runs(), modules=("nvidia",))
    f = gpudirect(S.make_ctx(runs, policy=Policy(require_peermem=False)))
    assert bad(f) == [] and any(x.status == SKIP and x.component.kind == "module" for x in f)


def test_gpu_whose_nearest_nic_is_sys_warns_naming_gpu_and_nic():
    ctx = S.make_ctx(topology=S.FakeTopology(nearest={3: (6, "SYS")}))
    problems = bad(gpudirect(ctx))
    assert len(problems) == 1
    f = problems[0]
    assert (f.check, f.status, f.component.kind, f.component.gpu, f.component.peer) == \
        ("ib.gpudirect", WARN, "gpu", 3, "mlx5_0")  # every NIC is SYS: the first one is named
    assert "across the CPU" in f.summary and f.details["level"] == "SYS"


def test_gpu_nearest_nic_phb_warns_and_pxb_passes():
    warn = bad(gpudirect(S.make_ctx(topology=S.FakeTopology(nearest={1: (1, "PHB")}))))
    assert [(f.status, f.component.gpu, f.component.peer) for f in warn] == [(WARN, 1, "mlx5_1")]
    assert bad(gpudirect(S.make_ctx(topology=S.FakeTopology(nearest={1: (1, "PXB")})))) == []


def test_no_topology_leaves_affinity_unknown():
    f = gpudirect(S.make_ctx(topology=None))
    assert [x.status for x in f if x.component.kind == "node"] == [UNKNOWN]


def test_no_rdma_stack_skips_every_ib_check():
    runs = dict(S.healthy_runs())
    runs["infiniband"] = ProbeRun("infiniband", "unavailable", 0.0, None, "/sys/class/infiniband absent")
    findings = run_checks(S.make_ctx(runs), only=("ib.",))
    assert {f.check for f in findings} == set(IB_CHECKS)
    assert {f.status for f in findings} == {SKIP}


def test_gpu_whose_own_nic_is_down_is_sent_to_the_next_rdma_nic():
    runs = S.edit_port(S.healthy_runs(), "mlx5_4", state="DOWN", phys_state="Polling")
    problems = bad(gpudirect(S.make_ctx(runs)))
    assert [(f.status, f.component.gpu, f.component.peer) for f in problems] == [(WARN, 4, "mlx5_5")]
    assert "mlx5_4 at PIX has no active RDMA port" in problems[0].summary


def test_link_flaps_map_port_lines_by_device_and_ignore_other_nics():
    up = S.healthy_kmsg().uptime_s
    ev = (KernelEvent("ib_link_down", "mlx5_core 0000:68:00.0 mlx5_3: Port: 1 Link DOWN", up - 60,
                      S.bdfs(3)["nic"], None, "mlx5_3", port=1),
          KernelEvent("ib_link_down", "ice 0000:f8:00.0 eth0: NIC Link is Down", up - 60, "0000:f8:00.0", None, "eth0"))
    runs = S.with_data(S.healthy_runs(), "kmsg", replace(S.healthy_kmsg(), events=ev))
    f = bad(link_flaps(S.make_ctx(runs)))
    assert [(x.status, x.component.device, x.component.port, x.details["count"]) for x in f] == [(WARN, "mlx5_3", 1, 1)]
