"""ccdiag's live NVML probe as recorded against NVIDIA's mock NVML (tests/fixtures/mocknvml: the
library's commit, build and the configs are in its README). The mock is an independent reading of
nvml.h, so these replays check that the probe reads it cleanly and that the judging catches what
the fault configs inject."""

from __future__ import annotations

import pathlib

import pytest

from ccdiag.run.checkrun import evaluate
from ccdiag.host.door import ReplayHost
from ccdiag.probes import nvml

MOCK = pathlib.Path(__file__).resolve().parent / "fixtures" / "mocknvml"


def _obs(name):
    return nvml.collect(ReplayHost(str(MOCK / f"{name}.snap.tar.gz")))


def _findings(name, check):
    res = evaluate(ReplayHost(str(MOCK / f"{name}.snap.tar.gz")), only=[check], deadline_s=60)
    return res.findings


@pytest.mark.parametrize("name", ["a100", "b200", "gb200"])
def test_each_profile_reads_without_a_single_read_error(name):
    """Inactive links (a100: 6 of 18, b200: all) are a state, and NVML's FFFFFFFF placeholder far
    end (gb200) is no device: the NVML probe reads every profile with no error at all."""
    obs = _obs(name)
    assert obs.device_count == 8 and len(obs.gpus) == 8
    # calls the probe learnt after these recordings were made are "not recorded", nothing else
    later = ("nvmlDeviceGetSramEccErrorStatus",)
    assert obs.errors == () and all(not g.failed for g in obs.gpus)
    assert all(e.kind == "not_recorded" and e.source.startswith(later) for g in obs.gpus for e in g.errors)
    assert all(lk.errors == () for g in obs.gpus for lk in g.nvlinks)
    assert all(lk.remote_bus_id is None or not lk.remote_bus_id.startswith("ffffffff") for g in obs.gpus
               for lk in g.nvlinks)


def test_mock_nvlink_version_is_decoded_by_the_header():
    """The mock answers the bare generation (5); nvml.h's enumeration value 5 is NVLink 3.1."""
    link = _obs("gb200").gpus[0].nvlinks[0]
    assert (link.version_raw, link.version) == (5, 3)


def test_gb200_registration_clique_and_cluster_are_read():
    g = _obs("gb200").gpus[0]
    assert (g.fabric_state, g.fabric_status, g.fabric_health_mask) == ("completed", "success", 0x1AA)
    assert (g.fabric_clique_id, g.fabric_cluster_uuid) == (0, "00000000-0000-0000-0000-000000000001")
    assert [f.status for f in _findings("gb200", "gpu.fabric_health")] == ["pass"]


def test_gb200_degraded_fabric_names_the_gpu_and_the_odd_clique():
    bad = {f.component.gpu: f for f in _findings("gb200-fabric-degraded", "gpu.fabric_health") if f.status == "fail"}
    assert sorted(bad) == [3, 5]
    assert bad[3].details["problems"] == {"degraded_bandwidth": True, "route_unhealthy": True,
                                          "incorrect_configuration": "insufficient NVLinks"}
    assert bad[5].details["odd"] == {"clique": [7, 0]}


def test_gpus_lost_in_the_second_sample_fail_gpu_lost():
    obs = _obs("h100-all-lost-mid-window")
    assert not any(g.failed for g in obs.gpus)  # the first sample answers
    lost = [f for f in _findings("h100-all-lost-mid-window", "gpu.lost") if f.status == "fail"]
    assert sorted(f.component.gpu for f in lost) == list(range(8))
    assert all("lost during the counter window" in f.summary for f in lost)


def test_uncorrectable_ecc_rising_in_the_window_fails_that_gpu():
    bad = [f for f in _findings("a100-gpu1-ecc-uncorrectable", "gpu.ecc") if f.status == "fail"]
    assert [f.component.gpu for f in bad] == [1]


def test_mig_mode_is_read_on_every_gpu():
    obs = _obs("a100-mig-enabled")
    assert all(g.mig_mode_current is True for g in obs.gpus) and obs.errors == ()



@pytest.mark.parametrize("name, level, gbyte_s", [("gb200", "NV18", 900.0), ("a100", "NV12", 300.0)])
def test_placeholder_far_ends_still_reach_the_nvswitch_fabric(name, level, gbyte_s):
    """NVML names no far end (FFFFFFFF:FF:FF.0) for links to the switch trays; the links still reach
    NVSwitches, so every GPU pair is NV18 (GB200) / NV12 (A100) and P2P expects the links' rate."""
    from ccdiag.topology import build_topology
    topo = build_topology({"nvml": _obs(name)})
    labels = [g.label for g in topo.gpus()]
    assert {topo.level(a, b) for a in labels for b in labels if a != b} == {level}
    assert topo.expected_p2p("GPU0", "GPU7").gbyte_s == pytest.approx(gbyte_s)
    assert [topo.label(s) for s in topo.nvswitches] == ["NVSwitch fabric (clique 0)" if name == "gb200"
                                                         else "NVSwitch fabric"]


def test_a_gpu_in_another_fabric_clique_has_no_nvlink_path_to_the_others():
    """GPU5 of the degraded profile registered in clique 7: NVLink does not join it to clique 0."""
    from ccdiag.topology import build_topology
    topo = build_topology({"nvml": _obs("gb200-fabric-degraded")})
    assert topo.level("GPU0", "GPU3") == "NV18"
    assert not topo.level("GPU0", "GPU5").startswith("NV")
