"""PCIe checks on named, synthesized scenarios (see scenarios_fabric)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import scenarios_fabric as S
from ccdiag.checks import REGISTRY, load_all, run_checks
from ccdiag.checks.pcie import acs, aer, gen_of, link_speed, link_width, replay
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN
from ccdiag.core.readings import ReadError
from ccdiag.inputs.policy import Policy
from ccdiag.probes.registry import ProbeRun


def bad(findings):
    return [f for f in findings if f.status in (FAIL, WARN, UNKNOWN)]


def test_checks_are_registered_under_stable_ids():
    load_all()
    for name in ("pcie.link_width", "pcie.link_speed", "pcie.aer", "pcie.replay", "pcie.acs"):
        assert name in REGISTRY


@pytest.mark.parametrize("window", [0.0, 30.0])
def test_healthy_node_has_no_warn_or_fail(window):
    runs = S.healthy_runs()
    ctx = S.make_ctx(runs, later=S.healthy_runs() if window else None, window_s=window)
    findings = run_checks(ctx, only=("pcie.",))
    assert bad(findings) == []
    assert any(f.status == PASS for f in findings)


def test_gpu_link_at_x8_fails_on_the_gpu_only():
    findings = link_width(S.sc_gpu_link_x8())
    problems = bad(findings)
    assert len(problems) == 1  # the switch port above reports the same link: one finding, not two
    f = problems[0]
    b = S.bdfs(3)
    assert (f.check, f.status) == ("pcie.link_width", FAIL)
    assert f.component.kind == "pcie_link"
    assert (f.component.gpu, f.component.bdf) == (3, b["gpu"])
    assert f.component.uuid.endswith("0003")
    assert f.expected == "x16" and f.expected_source == "device capability (max_link_width)"
    sources = {e.source for e in f.evidence}
    assert f"/sys/bus/pci/devices/{b['gpu']}/current_link_width" in sources
    assert f.remedy
    # the other GPUs still pass
    assert sum(1 for x in findings if x.status == PASS and x.component.gpu is not None) == 7


def test_x8_on_a_bridge_above_a_nic_names_the_bridge_and_what_it_serves():
    findings = link_width(S.sc_bridge_x8_above_nic())
    problems = bad(findings)
    assert len(problems) == 1
    f = problems[0]
    b = S.bdfs(5)
    assert (f.check, f.status) == ("pcie.link_width", FAIL)
    assert (f.component.kind, f.component.bdf) == ("bridge", b["up"])
    assert "mlx5_5" in f.component.peer and "GPU5" in f.component.peer
    # the NIC and GPU behind it get no pass while their path is degraded
    assert not [x for x in findings if x.status == PASS and x.component.bdf in (b["nic"], b["gpu"])]


def test_idle_gpu_at_gen1_is_not_flagged():
    ctx = S.make_ctx()
    findings = link_speed(ctx)
    gpu_findings = [f for f in findings if f.component.gpu is not None]
    assert len(gpu_findings) == 8
    assert all(f.status == PASS for f in gpu_findings)
    assert "idle" in gpu_findings[0].summary
    assert gpu_findings[0].details["notes"]


def test_busy_gpu_at_gen1_warns():
    findings = link_speed(S.sc_busy_gpu_gen1())
    problems = bad(findings)
    assert [(f.check, f.status, f.component.kind, f.component.gpu) for f in problems] == \
        [("pcie.link_speed", WARN, "pcie_link", 2)]


def test_nic_link_speed_downgrade_fails():
    problems = bad(link_speed(S.sc_nic_gen4()))
    assert len(problems) == 1
    f = problems[0]
    assert (f.status, f.component.kind, f.component.device, f.component.bdf) == \
        (FAIL, "pcie_link", "mlx5_1", S.bdfs(1)["nic"])
    assert any(e.value == "16.0 GT/s PCIe" for e in f.evidence)


def test_gpu_limited_by_slower_switch_port_warns_with_evidence():
    problems = bad(link_speed(S.sc_gpu_behind_gen4_switch()))
    assert len(problems) == 1
    f = problems[0]
    b = S.bdfs(6)
    assert (f.status, f.component.gpu) == (WARN, 6)
    assert f.details["limited_by"] == b["dn_gpu"]
    assert any(e.source == f"/sys/bus/pci/devices/{b['dn_gpu']}/max_link_speed" for e in f.evidence)


def test_nvml_reports_host_side_generation_limit():
    runs = S.edit_gpu(S.healthy_runs(), 1, pcie_gen_max=4)
    problems = bad(link_speed(S.make_ctx(runs)))
    assert [(f.status, f.component.gpu, f.expected_source) for f in problems] == [(WARN, 1, "GPU max (NVML)")]


def test_policy_minimum_generation_applies_to_max_capability():
    ctx = S.make_ctx(policy=Policy(min_pcie_gen=6, source="/etc/ccdiag/policy.yaml"))
    problems = bad(link_speed(ctx))
    # GPUs only: a slow management NIC must not set (or fail) the fleet's GPU bar
    assert len(problems) == 8 and sorted(f.component.gpu for f in problems) == list(range(8))
    assert all(f.status == FAIL for f in problems)
    assert problems[0].expected_source == "policy /etc/ccdiag/policy.yaml: min_pcie_gen"
    ok = S.make_ctx(policy=Policy(min_pcie_gen=5, min_pcie_width=16, source="p.yaml"))
    assert bad(link_speed(ok)) == [] and bad(link_width(ok)) == []


def test_unreadable_link_is_unknown_not_pass():
    b = S.bdfs(0)
    runs = S.edit_pcie(S.healthy_runs(), b["gpu"], current_link_width=None, max_link_width=None,
                       errors=(ReadError(f"/sys/bus/pci/devices/{b['gpu']}/max_link_width", "io", "EIO"),))
    f = [x for x in link_width(S.make_ctx(runs)) if x.component.bdf == b["gpu"]]
    assert [x.status for x in f] == [UNKNOWN]


def test_acs_on_bridges_between_gpu_and_nic_fails():
    findings = acs(S.sc_acs_on())
    b = S.bdfs(4)
    problems = bad(findings)
    assert {(f.check, f.status, f.component.kind, f.component.bdf) for f in problems} == \
        {("pcie.acs", FAIL, "bridge", b["dn_gpu"]), ("pcie.acs", FAIL, "bridge", b["dn_nic"])}
    f = problems[0]
    assert "GPU4<->mlx5_4" in f.details["pairs"]
    assert "ECAP_ACS+0x6.w=0000" in f.remedy and "BIOS" in f.remedy


def test_acs_non_redirecting_feature_only_warns():
    b = S.bdfs(2)
    runs = S.edit_pcie(S.healthy_runs(), b["up"], acs_ctrl=0x1, acs_enabled=("SrcValid",))
    problems = bad(acs(S.make_ctx(runs)))
    assert [(f.status, f.component.bdf) for f in problems] == [(WARN, b["up"])]


def test_acs_on_root_port_above_the_shared_switch_does_not_matter():
    b = S.bdfs(2)
    runs = S.edit_pcie(S.healthy_runs(), b["rp"], acs_ctrl=0x1D, acs_enabled=("SrcValid", "ReqRedir", "CmpltRedir"))
    assert bad(acs(S.make_ctx(runs))) == []


def test_acs_unreadable_is_unknown_only_when_it_matters():
    runs = S.healthy_runs()
    obs = runs["pcie"].data
    hidden = tuple(replace(d, acs_ctrl=None, errors=(ReadError(f"/sys/bus/pci/devices/{d.bdf}/config", "permission",
                                                                  "ACS capability beyond 64 bytes"),))
                   if d.kind == "bridge" else d for d in obs.devices)
    runs = S.with_data(runs, "pcie", replace(obs, devices=hidden))
    assert [f.status for f in acs(S.make_ctx(runs))] == [UNKNOWN]
    no_nics = replace(obs, devices=tuple(d for d in hidden if d.kind != "nic"))
    assert [f.status for f in acs(S.make_ctx(S.with_data(runs, "pcie", no_nics)))] == [SKIP]


def _aer_window(bdf, kind, **grow):
    before = S.healthy_runs()
    dev = next(d for d in before["pcie"].data.devices if d.bdf == bdf)
    counts = dict(getattr(dev, f"aer_{kind}"))
    for k, v in grow.items():
        counts[k] = counts.get(k, 0) + v
    return before, S.edit_pcie(before, bdf, **{f"aer_{kind}": counts})


def test_aer_fatal_increase_on_root_port_fails():
    b = S.bdfs(3)
    before, after = _aer_window(b["rp"], "fatal", SDES=1)
    problems = bad(aer(S.make_ctx(before, later=after, window_s=30)))
    assert len(problems) == 1
    f = problems[0]
    assert (f.check, f.status, f.component.kind, f.component.bdf) == ("pcie.aer", FAIL, "bridge", b["rp"])
    assert "GPU3" in f.component.peer and "mlx5_3" in f.component.peer
    assert f.evidence[0].source == f"/sys/bus/pci/devices/{b['rp']}/aer_dev_fatal"
    assert f.evidence[0].value == {"SDES": 1}


def test_aer_correctable_small_increase_passes_storm_warns():
    b = S.bdfs(0)
    before, after = _aer_window(b["nic"], "correctable", RxErr=2, TOTAL_ERR_COR=2)
    small = aer(S.make_ctx(before, later=after, window_s=60))
    assert bad(small) == []
    assert any(f.component.bdf == b["nic"] and "within budget" in f.summary for f in small)
    before, after = _aer_window(b["nic"], "correctable", BadTLP=500, TOTAL_ERR_COR=500)
    storm = bad(aer(S.make_ctx(before, later=after, window_s=60)))
    assert [(f.status, f.component.device) for f in storm] == [(WARN, "mlx5_0")]


def test_aer_lifetime_totals_alone_never_fail():
    b = S.bdfs(1)
    runs = S.edit_pcie(S.healthy_runs(), b["gpu"], aer_fatal={**S.AER_UNC, "DLP": 4})
    findings = aer(S.make_ctx(runs))
    assert [f.status for f in findings] == [SKIP]
    assert findings[0].details["lifetime_nonzero"][b["gpu"]]["fatal"] == 4
    # and with a window, an unchanged lifetime total is not an increase
    assert bad(aer(S.make_ctx(runs, later=runs, window_s=30))) == []


def test_replay_counter_rising_warns_and_flat_passes():
    before = S.healthy_runs()
    after = S.edit_gpu(before, 5, pcie_replay_counter=120)
    findings = replay(S.make_ctx(before, later=after, window_s=30))
    problems = bad(findings)
    assert [(f.check, f.status, f.component.kind, f.component.gpu) for f in problems] == \
        [("pcie.replay", WARN, "pcie_link", 5)]
    assert sum(1 for f in findings if f.status == PASS) == 7
    assert [f.status for f in replay(S.make_ctx(before))] == [SKIP]


@pytest.mark.parametrize("status,expected", [("unavailable", SKIP), ("timeout", UNKNOWN), ("failed", UNKNOWN)])
def test_probe_outcome_gates_the_checks(status, expected):
    runs = dict(S.healthy_runs())
    runs["pcie"] = ProbeRun("pcie", status, 0.1, None, "why")
    ctx = S.make_ctx(runs)
    from ccdiag.checks import run_checks

    ids = ("pcie.link_width", "pcie.aer", "pcie.acs")  # each declares needs=("pcie",)
    findings = run_checks(ctx, only=ids)
    assert sorted((f.check, f.status) for f in findings) == sorted((i, expected) for i in ids)
    assert all(f.details.get("probe") == "pcie" for f in findings)


def test_gen_of_maps_transfer_rates():
    assert [gen_of(x) for x in (2.5, 5.0, 8.0, 16.0, 32.0, 64.0, 7.0, None)] == [1, 2, 3, 4, 5, 6, None, None]


# -- a switch uplink is judged on its own terms; severity follows what the hop carries --------------
# SYNTHESIZED trees (scenarios_fabric): the GPUs idle at 2.5 GT/s, as idle GPUs' links do.

def _gpus_only_switch(n_gpus: int):
    """Switch 2 with ``n_gpus`` idle GPUs below it and no NIC; its uplink trained at 16 GT/s of 32."""
    from dataclasses import replace

    from ccdiag.probes.pcie import PcieObservation

    runs = S.healthy_runs()
    b = S.bdfs(2)
    devs = [d for d in runs["pcie"].data.devices if d.bdf not in (b["dn_nic"], b["nic"])]
    if n_gpus == 2:
        up = (b["rp"], b["up"])
        dn2, gpu2 = b["dn_nic"], b["nic"]  # reuse the NIC's bus numbers for a second GPU
        devs += [S._dev(dn2, "bridge", up + (dn2,), cur=S.IDLE),
                 S._dev(gpu2, "gpu", up + (dn2, gpu2), cur=S.IDLE, vendor_id="0x10de", driver="nvidia")]
    devs = [replace(d, current_link_speed_gts=16.0, current_link_speed_raw="16.0 GT/s PCIe")
            if d.bdf in (b["rp"], b["up"]) else d for d in devs]
    runs["pcie"] = ProbeRun("pcie", "ok", 0.1, PcieObservation(devices=tuple(devs)))
    return S.make_ctx(runs), b


@pytest.mark.parametrize("n_gpus,status", [(1, WARN), (2, FAIL)])
def test_switch_uplink_trained_down_is_judged_while_its_gpus_idle(n_gpus, status):
    ctx, b = _gpus_only_switch(n_gpus)
    problems = bad(link_speed(ctx))
    assert [(f.component.kind, f.component.bdf, f.status) for f in problems] == [("bridge", b["up"], status)]
    assert "16 GT/s" in problems[0].summary and "32 GT/s" in problems[0].summary


def test_uplink_above_a_nic_trained_down_fails_like_the_nics_own_link():
    b = S.bdfs(1)
    runs = S.edit_pcie(S.healthy_runs(), b["up"], current_link_speed_gts=16.0, current_link_speed_raw="16.0 GT/s PCIe")
    runs = S.edit_pcie(runs, b["rp"], current_link_speed_gts=16.0)
    problems = bad(link_speed(S.make_ctx(runs)))
    assert [(f.component.bdf, f.status) for f in problems] == [(b["up"], FAIL)]
    assert "mlx5_1" in problems[0].component.peer
    own = bad(link_speed(S.sc_nic_gen4()))
    assert [f.status for f in own] == [FAIL]
