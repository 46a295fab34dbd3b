"""NVLink state and counter checks on named scenarios (tests/scenarios_gpu.py, synthesized)."""

from __future__ import annotations

import dataclasses

import scenarios_gpu as S
from ccdiag.checks import run_checks
from ccdiag.inputs.policy import Policy
from ccdiag.probes.nvml import NvLink


def run(ctx, check_id):
    return [f for f in run_checks(ctx, only=[check_id]) if f.check == check_id]


def status_of(findings):
    return sorted({f.status for f in findings})


class FakeTopology:
    """Stands in for ccdiag.topology.Topology: only the call the NVLink check makes."""

    def __init__(self, expected):
        self.expected = expected

    def has_device(self, name):
        return name in self.expected

    def expected_nvlinks(self, gpu_label):
        return self.expected[gpu_label]


# -- state -----------------------------------------------------------------------------------------

def test_healthy_hgx_all_links_pass():
    findings = run(S.healthy(), "nvlink.down")
    assert len(findings) == 8 and status_of(findings) == ["pass"]
    assert "18/18" in findings[0].summary


def test_one_link_down_on_nvswitch_board_fails_naming_the_link():
    runs = S.with_link(S.healthy_runs(), 5, 7, active=False, remote_bus_id=None, remote_device_type=None)
    findings = run(S.context(runs), "nvlink.down")
    fails = [f for f in findings if f.status == "fail"]
    assert len(fails) == 1
    c = fails[0].component
    assert (c.kind, c.name, c.gpu, c.link, c.uuid, c.bdf) == (
        "nvlink", "GPU5 NVLink 7", 5, 7, S.uuid(5), "0000:ab:00.0")
    assert "NVSwitch" in fails[0].expected_source
    assert fails[0].evidence[0].source == "nvmlDeviceGetNvLinkState(5, 7)"
    # the other GPUs are fine
    assert sum(f.status == "pass" for f in findings) == 7


def test_topology_expectation_is_used_and_named():
    runs = S.with_link(S.healthy_runs(), 2, 0, active=False, remote_bus_id=None, remote_device_type=None)
    topo = FakeTopology({f"GPU{i}": 18 for i in range(8)})
    fails = [f for f in run(S.context(runs, topology=topo), "nvlink.down") if f.status == "fail"]
    assert [(f.component.gpu, f.component.link, f.expected_source) for f in fails] == [(2, 0, "topology")]


def test_link_down_on_every_gpu_is_caught_by_topology_only():
    # the same link dead on every GPU: the peer baseline cannot see it, the topology can
    runs = S.healthy_runs()
    for i in range(8):
        runs = S.with_link(runs, i, 17, active=False, remote_bus_id=None, remote_device_type=None)
    assert status_of(run(S.context(runs), "nvlink.down")) == ["pass"]
    topo = FakeTopology({f"GPU{i}": 18 for i in range(8)})
    assert len([f for f in run(S.context(runs, topology=topo), "nvlink.down") if f.status == "fail"]) == 8


def test_fewer_links_listed_than_expected_fails_per_gpu():
    runs = S.with_gpu(S.healthy_runs(), 4, nvlinks=tuple(S.nvlink(k) for k in range(12)))
    fails = [f for f in run(S.context(runs), "nvlink.down") if f.status == "fail"]
    assert len(fails) == 1
    assert (fails[0].component.kind, fails[0].component.gpu, fails[0].component.link) == ("nvlink", 4, None)
    assert "12/18" in fails[0].summary


def test_unreadable_link_state_is_unknown_not_down():
    runs = S.with_link(S.healthy_runs(), 1, 3, active=None)
    findings = [f for f in run(S.context(runs), "nvlink.down") if f.component.gpu == 1]
    assert status_of(findings) == ["unknown"]


def bridged_pair(active_a=12, active_b=12, total=18):
    """Two PCIe H100s joined by NVLink bridges: 12 of 18 links wired (corpus
    topo-m/h100-pcie-x2-nvlink-bridge-nv12-indented.txt shows NV12), the rest legitimately inactive."""
    def links(count, peer):
        return tuple(NvLink(link=k, active=k < count, version=4,
                            remote_bus_id=peer if k < count else None,
                            remote_device_type="gpu" if k < count else None,
                            crc_flit_errors=0, crc_data_errors=0, replay_errors=0, recovery_errors=0)
                     for k in range(total))
    a, b = "0000:17:00.0", "0000:65:00.0"
    gpus = [S.h100(0, name="NVIDIA H100 PCIe", bus_id=a, nvlinks=links(active_a, b), fabric_state="not_supported",
                   fabric_status=None),
            S.h100(1, name="NVIDIA H100 PCIe", bus_id=b, nvlinks=links(active_b, a), fabric_state="not_supported",
                   fabric_status=None)]
    return S.healthy_runs(n=2, gpus=gpus, pcie=S.pcie_obs([a, b], switches=()))


def test_bridged_pcie_pair_unused_links_are_not_down():
    ctx = S.context(bridged_pair())
    assert status_of(run(ctx, "nvlink.down")) == ["pass"]
    sym = run(ctx, "nvlink.asymmetric")
    assert status_of(sym) == ["pass"] and sym[0].evidence[0].value == 12


def test_asymmetric_link_counts_warn():
    ctx = S.context(bridged_pair(active_a=12, active_b=11))
    f = [x for x in run(ctx, "nvlink.asymmetric") if x.status == "warn"]
    assert len(f) == 1
    assert (f[0].component.kind, f[0].component.name, f[0].component.peer) == ("gpu_pair", "GPU0-GPU1", "GPU1")
    assert "12" in f[0].summary and "11" in f[0].summary


def test_bridged_pair_with_topology_expectation_fails_missing_link():
    ctx = S.context(bridged_pair(active_a=11, active_b=11), topology=FakeTopology({"GPU0": 12, "GPU1": 12}))
    fails = [f for f in run(ctx, "nvlink.down") if f.status == "fail"]
    # 18 links listed but only 12 expected: which inactive one is the broken one is unknown,
    # so the finding names the GPU's links as a whole
    assert [(f.component.gpu, f.component.link) for f in fails] == [(0, None), (1, None)]
    assert "11/12" in fails[0].summary


def test_pcie_only_gpus_skip_once():
    gpus = [S.h100(i, name="NVIDIA L4", nvlinks=(), fabric_state="not_supported", fabric_status=None) for i in range(2)]
    runs = S.healthy_runs(n=2, gpus=gpus, pcie=S.pcie_obs([S.bus_id(0), S.bus_id(1)], switches=()))
    for cid in ("nvlink.down", "nvlink.errors", "nvlink.asymmetric"):
        findings = run(S.context(runs), cid)
        assert [(f.status, f.component.kind) for f in findings] == [("skip", "node")], cid


def test_lost_gpu_links_are_unknown():
    ctx = S.gpu_lost(5)
    f = [x for x in run(ctx, "nvlink.down") if x.component.gpu == 5]
    assert status_of(f) == ["unknown"]


# -- counters ------------------------------------------------------------------------------------------

def with_totals(runs, gpu, link, **counters):
    return S.with_link(runs, gpu, link, **counters)


def test_lifetime_totals_without_window_are_not_judged():
    runs = with_totals(S.healthy_runs(), 2, 4, crc_flit_errors=65535, replay_errors=900, recovery_errors=12)
    findings = run(S.context(runs), "nvlink.errors")
    assert [(f.status, f.component.kind) for f in findings] == [("skip", "node")]
    assert "--window" in findings[0].summary


def test_same_lifetime_totals_over_a_window_pass():
    runs = with_totals(S.healthy_runs(), 2, 4, crc_flit_errors=65535, replay_errors=900, recovery_errors=12)
    findings = run(S.windowed(runs, runs, 10.0), "nvlink.errors")
    assert status_of(findings) == ["pass"] and len(findings) == 8


def test_crc_rising_over_window_warns_on_the_link():
    before = with_totals(S.healthy_runs(), 2, 4, crc_flit_errors=100)
    after = with_totals(S.healthy_runs(), 2, 4, crc_flit_errors=140)
    findings = run(S.windowed(before, after, 10.0), "nvlink.errors")
    warns = [f for f in findings if f.status == "warn"]
    assert len(warns) == 1
    c = warns[0].component
    assert (c.kind, c.name, c.gpu, c.link, c.peer) == ("nvlink", "GPU2 NVLink 4", 2, 4, "NVSwitch 0000:05:00.0")
    assert warns[0].details["deltas"]["crc_flit_errors"] == 40
    assert any(e.source == "nvmlDeviceGetNvLinkErrorCounter(2, 4, 2)" and e.value == (100, 140)
               for e in warns[0].evidence)


def test_warn_threshold_comes_from_policy():
    before = S.healthy_runs()
    after = with_totals(S.healthy_runs(), 2, 4, replay_errors=3)
    strict = S.windowed(before, after, 10.0)
    assert status_of([f for f in run(strict, "nvlink.errors") if f.component.gpu == 2]) == ["warn"]
    relaxed = S.windowed(before, after, 10.0, policy=Policy(nvlink_error_rate_warn=5))
    assert status_of([f for f in run(relaxed, "nvlink.errors") if f.component.gpu == 2]) == ["pass"]


def test_recovery_rising_fails():
    before = S.healthy_runs()
    after = with_totals(S.healthy_runs(), 6, 11, recovery_errors=1)
    fails = [f for f in run(S.windowed(before, after, 10.0), "nvlink.errors") if f.status == "fail"]
    assert [(f.component.gpu, f.component.link) for f in fails] == [(6, 11)]
    assert "recovery" in fails[0].summary


def test_crc_storm_fails():
    before = S.healthy_runs()
    after = with_totals(S.healthy_runs(), 0, 0, crc_data_errors=1000)  # 100/s over 10 s
    fails = [f for f in run(S.windowed(before, after, 10.0), "nvlink.errors") if f.status == "fail"]
    assert [(f.component.gpu, f.component.link) for f in fails] == [(0, 0)]


def test_counter_going_backwards_is_unknown():
    before = with_totals(S.healthy_runs(), 3, 3, crc_flit_errors=50)
    after = S.healthy_runs()
    findings = [f for f in run(S.windowed(before, after, 10.0), "nvlink.errors") if f.component.gpu == 3]
    assert status_of(findings) == ["unknown"] and "backwards" in findings[0].summary


def test_unreadable_counters_skip_per_gpu():
    gpus = [S.h100(i, nvlinks=tuple(dataclasses.replace(S.nvlink(k), crc_flit_errors=None, crc_data_errors=None,
                                                         replay_errors=None, recovery_errors=None)
                                    for k in range(18))) for i in range(8)]
    runs = S.healthy_runs(gpus=gpus)
    findings = run(S.windowed(runs, runs, 10.0), "nvlink.errors")
    assert status_of(findings) == ["skip"] and len(findings) == 8
