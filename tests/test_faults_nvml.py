"""The NVML probe's reading of links and fabric registration where NVIDIA's mock NVML showed it
wrong: an inactive link's all-zero far end is a state, not a read error; NVML's
``FFFFFFFF:FF:FF.0`` placeholder is no switch; clique id and cluster UUID are read; the health mask
is decoded by nvml.h's layout. NVML answers are SYNTHESIZED (tests/synth/nvml.py), edited where a
scenario needs a value the synthesizer does not make; the GB200-style fabric scenario is a
snapshot built with the samples' builder (tests/scenarios_node.py)."""

from __future__ import annotations

import pytest

import scenarios_node as N
from ccdiag.core.findings import FAIL, PASS
from ccdiag.host.door import ReplayHost
from ccdiag.probes import nvml
from ccdiag.host.snapshot import SnapshotData
from synth.nvml import h100_node, nvml_records

ZERO_PCI = {"busIdLegacy": "", "domain": 0, "bus": 0, "device": 0, "pciDeviceId": 0, "pciSubSystemId": 0,
            "busId": ""}  # an all-zero nvmlPciInfo_t as NVML fills it for a link with no far end
PLACEHOLDER_PCI = {"busIdLegacy": "FFFF:FF:FF.0", "domain": 0xFFFFFFFF, "bus": 0xFF, "device": 0xFF,
                   "pciDeviceId": 0, "pciSubSystemId": 0, "busId": "FFFFFFFF:FF:FF.0"}


def _observe(edit):
    recs = nvml_records(h100_node(1, nvlink_states={0: False, 1: False}))
    for r in recs:
        edit(r)
    return nvml.collect(ReplayHost(SnapshotData(nvml=recs, meta={"source": "synthesized"})))


def test_inactive_links_are_a_state_not_read_errors():
    def edit(r):
        if r["call"][0] == "nvmlDeviceGetNvLinkRemotePciInfo" and r["call"][2] in (0, 1):
            r["ok"] = dict(ZERO_PCI)
        if r["call"][0] == "nvmlDeviceGetNvLinkRemoteDeviceType" and r["call"][2] == 1:
            r.pop("ok")
            r.update(error="unknown", code=999, message="Unknown Error")
    obs = _observe(edit)
    g = obs.gpus[0]
    assert [(lk.link, lk.active, lk.remote_bus_id, lk.errors) for lk in g.nvlinks[:2]] == [
        (0, False, None, ()), (1, False, None, ())]
    assert g.errors == () and all(not lk.errors for lk in g.nvlinks)


def test_the_ffffffff_placeholder_is_not_a_switch():
    def edit(r):
        if r["call"][0] == "nvmlDeviceGetNvLinkRemotePciInfo" and r["call"][2] == 5:
            r["ok"] = dict(PLACEHOLDER_PCI)
    g = _observe(edit).gpus[0]
    link5 = g.nvlinks[5]
    assert (link5.active, link5.remote_bus_id, link5.remote_device_type, link5.errors) == (True, None, "switch", ())


@pytest.mark.parametrize("mask, problems", [
    (0, {}),
    (2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8, {}),  # every field FALSE, configuration NONE: healthy
    (1 | 1 << 4 | 5 << 8, {"degraded_bandwidth": True, "route_unhealthy": True,
                           "incorrect_configuration": "insufficient NVLinks"}),
    (1 << 2 | 1 << 6, {"route_recovery": True, "access_timeout_recovery": True}),
    (6 << 8, {"incorrect_configuration": "incompatible GPU firmware"}),
    (7 << 8, {"incorrect_configuration": "invalid location"}),
    (8 << 8, {"incorrect_configuration": "GPU state invalid"}),
    (1 << 12 | 1 << 14 | 1 << 8, {}),  # a partition assigned, the global fabric manager connected
    (2 << 12 | 2 << 14 | 1 << 8, {"no_partition_assigned": True, "fabric_manager_disconnected": True}),
])
def test_fabric_health_mask_follows_nvml_h(mask, problems):
    """Every field and value nvml.h defines (NVML_GPU_FABRIC_HEALTH_MASK_*, as nvidia-ml-py carries
    them): degraded bandwidth, route recovery and health, access timeouts, the nine configuration
    values, partition assignment and the global fabric manager's state."""
    assert nvml.decode_fabric_health(mask) == problems


def test_every_configuration_value_of_nvml_h_has_words():
    import pynvml

    prefix = "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_"
    values = {getattr(pynvml, n) for n in dir(pynvml) if n.startswith(prefix)}
    assert values <= set(nvml.FABRIC_CONFIG), sorted(values - set(nvml.FABRIC_CONFIG))


def test_clique_and_cluster_are_read_once_registered():
    info = {"version": 0x02000024, "clusterUuid": list(range(0x10, 0x20)), "status": 0, "cliqueId": 7, "state": 3,
            "healthMask": 0}
    assert nvml.parse_fabric_identity(info) == (7, "10111213-1415-1617-1819-1a1b1c1d1e1f")
    assert nvml.parse_fabric_identity({**info, "clusterUuid": [0] * 16}) == (7, None)
    assert nvml.parse_fabric_identity({**info, "state": 2}) == (None, None)  # not registered yet


def test_fabric_health_names_the_degraded_gpu_and_the_odd_one_out():
    res = N.result("fabric-degraded")
    bad = {f.component.gpu: f for f in res.findings if f.check == "gpu.fabric_health" and f.status == FAIL}
    assert sorted(bad) == [2, 5]
    assert bad[5].details["problems"] == {"degraded_bandwidth": True, "route_unhealthy": True,
                                          "incorrect_configuration": "insufficient NVLinks"}
    assert bad[2].details["odd"] == {"clique": [9, 7]} and "clique 9 while its peers are in clique 7" in bad[2].summary
    healthy = N.result("fabric-healthy")
    assert [f.status for f in healthy.findings if f.check == "gpu.fabric_health"] == [PASS]
    assert healthy.exit_code == 0


def test_the_gpu_numa_id_is_not_taken_for_the_cpu_affinity():
    """On Grace Hopper/Blackwell NVML's GPU NUMA ID names the node of the GPU's own memory (no
    CPUs); with no NUMA node from PCI the GPU's CPU side stays unknown rather than that node."""
    import dataclasses

    import scenarios_fabric as S
    from ccdiag.probes.system import NumaNode
    from ccdiag.topology import build_topology

    runs = S.edit_system(S.healthy_runs(), numa_nodes=(NumaNode(0, "0-71"), NumaNode(1, "72-143"), NumaNode(4, None)))
    obs = runs["pcie"].data
    runs = S.with_data(runs, "pcie", dataclasses.replace(obs, devices=tuple(
        dataclasses.replace(d, numa_node=None) for d in obs.devices)))
    runs = S.edit_gpu(runs, 0, numa_node=4)   # the GPU memory's own node
    runs = S.edit_gpu(runs, 1, numa_node=1)   # a node with CPUs: taken
    gpus = {g.label: g for g in build_topology(runs).gpus()}
    assert gpus["GPU0"].numa is None and gpus["GPU1"].numa == 1
