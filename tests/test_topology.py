"""Topology levels and bandwidths from SYNTHESIZED observation trees (tests/topo_trees.py)."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from topo_trees import Tree, hgx, ib_devices, system

from ccdiag.probes.nvml import Gpu, NvLink, NvmlObservation
from ccdiag.probes.smi_topo import parse_topo_matrix
from ccdiag.probes.registry import ProbeRun
from ccdiag.topology import build_topology, nvlink_gbyte_s, pcie_gbyte_s, pcie_gen, wire_gbyte_s
from ccdiag.topology.dot import render_dot
from ccdiag.topology.matrix import compare, to_topo_matrix

CORPUS_H100 = FIXTURES / "corpus" / "topo-m" / "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"


# -- bandwidth arithmetic (PCI-SIG / NVLink / IBTA rates, see ccdiag.topology.bandwidth) ---------------
@pytest.mark.parametrize("gts,width,expected", [
    (32.0, 16, 63.0), (16.0, 16, 31.5), (8.0, 16, 15.75), (32.0, 8, 31.5),
    (5.0, 16, 8.0), (2.5, 16, 4.0), (2.5, 1, 0.25), (64.0, 16, 121.0),
])
def test_pcie_bandwidth_per_direction(gts, width, expected):
    assert pcie_gbyte_s(gts, width) == pytest.approx(expected, abs=0.1)


def test_pcie_bandwidth_unknown_inputs_are_none():
    assert pcie_gbyte_s(None, 16) is None
    assert pcie_gbyte_s(32.0, None) is None
    assert pcie_gbyte_s(32.0, 0) is None
    assert pcie_gen(32.0) == 5 and pcie_gen(8.0) == 3 and pcie_gen(3.3) is None


def test_nvlink_and_wire_rates():
    assert nvlink_gbyte_s(4, 18) == 450.0
    assert nvlink_gbyte_s(3, 12) == 300.0
    assert nvlink_gbyte_s(5, 18) == 900.0
    assert nvlink_gbyte_s(None, 18) is None
    assert wire_gbyte_s(400.0) == 50.0 and wire_gbyte_s(200.0) == 25.0


# -- levels --------------------------------------------------------------------------------------------
def test_hgx_levels_match_the_corpus_matrix_cell_by_cell():
    topo = build_topology(hgx())
    corpus = parse_topo_matrix(CORPUS_H100.read_text())
    mine = to_topo_matrix(topo)
    assert mine.devices == corpus.devices
    for a in corpus.devices:
        for b in corpus.devices:
            assert mine.level(a, b) == corpus.level(a, b), (a, b)
    assert compare(topo, corpus) == []
    assert mine.nic_legend == corpus.nic_legend
    assert mine.cpu_affinity["GPU5"] == "48-95,144-191" and mine.numa_affinity["GPU1"] == "0"


def test_levels_pix_node_sys_nv():
    topo = build_topology(hgx())
    assert topo.level("GPU0", "mlx5_0") == "PIX"
    assert topo.level("GPU0", "mlx5_1") == "NODE"
    assert topo.level("GPU0", "mlx5_4") == "SYS"
    assert topo.level("GPU0", "GPU7") == "NV18"
    assert topo.pcie_level("GPU0", "GPU7") == "SYS"
    assert topo.level("GPU2", "GPU2") == "X"
    assert topo.level("mlx5_0", "mlx5_3") == "NODE"


def _two_device_tree(shape: str):
    """A GPU and a NIC placed so that their level is ``shape``."""
    t = Tree()
    if shape == "PXB":  # root port -> switch A -> (switch B -> GPU, NIC)
        rp = t.rp("0000:10:01.0", "pci0000:10", 0)
        a = t.switch(rp, "0000:11:00.0", ["0000:12:00.0", "0000:12:01.0"], "pci0000:10", 0)
        b = t.switch(a["0000:12:00.0"], "0000:13:00.0", ["0000:14:00.0"], "pci0000:10", 0)
        t.end(b["0000:14:00.0"], "0000:15:00.0", "gpu", "pci0000:10", 0)
        t.end(a["0000:12:01.0"], "0000:16:00.0", "nic", "pci0000:10", 0)
    elif shape == "PHB":  # two root ports of one host bridge
        r1 = t.rp("0000:10:01.0", "pci0000:10", 0)
        r2 = t.rp("0000:10:02.0", "pci0000:10", 0)
        t.end(r1, "0000:11:00.0", "gpu", "pci0000:10", 0)
        t.end(r2, "0000:12:00.0", "nic", "pci0000:10", 0)
    elif shape == "PIX-root":  # dual-function NIC... here GPU and NIC behind one switch directly
        r1 = t.rp("0000:10:01.0", "pci0000:10", 0)
        s = t.switch(r1, "0000:11:00.0", ["0000:12:00.0", "0000:12:01.0"], "pci0000:10", 0)
        t.end(s["0000:12:00.0"], "0000:13:00.0", "gpu", "pci0000:10", 0)
        t.end(s["0000:12:01.0"], "0000:14:00.0", "nic", "pci0000:10", 0)
    elif shape in ("NODE", "SYS"):
        numa_nic = 0 if shape == "NODE" else 1
        r1 = t.rp("0000:10:01.0", "pci0000:10", 0)
        r2 = t.rp("0000:80:01.0", "pci0000:80", numa_nic)
        t.end(r1, "0000:11:00.0", "gpu", "pci0000:10", 0)
        t.end(r2, "0000:81:00.0", "nic", "pci0000:80", numa_nic)
    nics = [d for d in t.devices.values() if d.kind == "nic"]
    return {"pcie": t.obs(), "system": system({0: "0-7", 1: "8-15"}),
            "infiniband": ib_devices([("mlx5_0", nics[0].bdf)])}


@pytest.mark.parametrize("shape,level", [("PXB", "PXB"), ("PHB", "PHB"), ("PIX-root", "PIX"),
                                         ("NODE", "NODE"), ("SYS", "SYS")])
def test_pcie_levels_from_tree_shapes(shape, level):
    topo = build_topology(_two_device_tree(shape))
    assert [g.label for g in topo.gpus()] == ["GPU0"]  # no NVML: GPUs still come from PCI
    assert topo.level("GPU0", "mlx5_0") == level
    assert topo.nearest_nics("GPU0") == [("mlx5_0", level)]


def test_single_numa_node_without_numa_attribute_is_node_level():
    runs = _two_device_tree("NODE")
    t = Tree()
    r1 = t.rp("0000:10:01.0", "pci0000:10", None)
    r2 = t.rp("0000:80:01.0", "pci0000:80", None)
    t.end(r1, "0000:11:00.0", "gpu", "pci0000:10", None)
    t.end(r2, "0000:81:00.0", "nic", "pci0000:80", None)
    runs = {"pcie": t.obs(), "infiniband": ib_devices([("mlx5_0", "0000:81:00.0")])}
    assert build_topology(runs).level("GPU0", "mlx5_0") == "unknown"
    runs["system"] = system({0: "0-15"})
    assert build_topology(runs).level("GPU0", "mlx5_0") == "NODE"


def test_nvlink_down_lowers_the_count_for_that_gpu_only():
    topo = build_topology(hgx(gpu5_link7_down=True))
    assert topo.level("GPU5", "GPU0") == "NV17"
    assert topo.level("GPU0", "GPU1") == "NV18"
    assert topo.expected_nvlinks("GPU5") == 18
    assert topo.path_bandwidth("GPU0", "GPU5").gbyte_s == 450.0
    cur = topo.current_path_bandwidth("GPU0", "GPU5")
    assert cur.gbyte_s == 425.0 and cur.bottleneck.name.startswith("GPU5 NVLink")


def test_peer_wired_pair_counts_direct_links():
    t = Tree()
    r1 = t.rp("0000:10:01.0", "pci0000:10", 0)
    r2 = t.rp("0000:20:01.0", "pci0000:20", 0)
    t.end(r1, "0000:11:00.0", "gpu", "pci0000:10", 0)
    t.end(r2, "0000:21:00.0", "gpu", "pci0000:20", 0)

    def links(peer, active=4):
        return tuple(NvLink(link=k, active=k < active, version=3, remote_bus_id=peer, remote_device_type="gpu")
                     for k in range(4))

    nvml = NvmlObservation(gpus=(Gpu(index=0, bus_id="0000:11:00.0", nvlinks=links("0000:21:00.0")),
                                 Gpu(index=1, bus_id="0000:21:00.0", nvlinks=links("0000:11:00.0", active=3))))
    topo = build_topology({"pcie": t.obs(), "nvml": nvml, "system": system({0: "0-7"})})
    assert topo.level("GPU0", "GPU1") == "NV4"  # a link counts once it is active at either end
    assert topo.expected_nvlinks("GPU1") == 4
    assert topo.path_bandwidth("GPU0", "GPU1").gbyte_s == 100.0
    assert topo.current_path_bandwidth("GPU0", "GPU1").gbyte_s == 75.0



@pytest.mark.parametrize("gpu1_links, far_end", [
    ((("0000:11:00.0", "gpu"),), None),  # no NVSwitch on the node: the far end stays unknown
    ((("0000:99:00.0", "switch"), ("0000:99:00.0", "switch")), "NVSwitch fabric"),
])
def test_an_active_nvlink_whose_far_end_is_unread_still_counts(gpu1_links, far_end):
    """GPU0's two active links name no far end (NVML gave none) and a third is inactive: the active
    ones count, toward the NVSwitch fabric when the node has one; the inactive one does not."""
    t = Tree()
    for bus in ("10", "20"):
        t.end(t.rp(f"0000:{bus}:01.0", f"pci0000:{bus}", 0), f"0000:{int(bus) + 1}:00.0", "gpu", f"pci0000:{bus}", 0)
    unread = tuple(NvLink(link=k, active=k < 2, version=4) for k in range(3))
    to_gpu1 = tuple(NvLink(link=k, active=True, version=4, remote_bus_id=bdf, remote_device_type=kind)
                    for k, (bdf, kind) in enumerate(gpu1_links))
    nvml = NvmlObservation(gpus=(Gpu(index=0, bus_id="0000:11:00.0", nvlinks=unread),
                                 Gpu(index=1, bus_id="0000:21:00.0", nvlinks=to_gpu1)))
    topo = build_topology({"pcie": t.obs(), "nvml": nvml, "system": system({0: "0-7"})})
    assert topo.expected_nvlinks("GPU0") == 2
    gpu0 = [(lk.name, lk.max_desc) for lk in topo.links() if lk.kind == "nvlink" and lk.name.startswith("GPU0 ")]
    assert gpu0 == ([] if far_end is None else [(f"GPU0 NVLink -> {far_end}", "2 x NVLink4")])

def test_no_pcie_probe_gives_unknown_levels_but_keeps_nvlink():
    runs = hgx()
    runs["pcie"] = ProbeRun("pcie", "unavailable", 0.0, None, "no PCI bus")
    topo = build_topology(runs)
    assert len(topo.gpus()) == 8 and len(topo.nics()) == 8
    assert topo.level("GPU0", "mlx5_0") == "unknown"
    assert topo.level("GPU0", "GPU1") == "NV18"
    assert topo.expected_h2d("GPU0").gbyte_s is None
    assert to_topo_matrix(topo).cells[("GPU0", "NIC0")] is None


def test_no_nvml_numbers_gpus_in_bus_order():
    runs = hgx()
    del runs["nvml"]
    topo = build_topology(runs)
    assert [(g.label, g.bdf) for g in topo.gpus()][:2] == [("GPU0", "0000:19:00.0"), ("GPU1", "0000:2b:00.0")]
    assert topo.level("GPU0", "GPU1") == "NODE" and topo.level("GPU0", "GPU4") == "SYS"
    assert topo.expected_nvlinks("GPU0") is None


def test_empty_inputs_build_an_empty_topology():
    topo = build_topology({})
    assert topo.gpus() == [] and topo.nics() == [] and topo.links() == []
    json.dumps(topo.to_json())


# -- bandwidths on paths --------------------------------------------------------------------------------
def test_downtrained_gpu_link_shows_in_current_but_not_expected():
    topo = build_topology(hgx(gpu3_x8=True))
    assert topo.expected_h2d("GPU3").gbyte_s == pytest.approx(63.0, abs=0.1)
    cur = topo.expected_h2d("GPU3", current=True)
    assert cur.gbyte_s == pytest.approx(31.5, abs=0.1)
    assert cur.bottleneck.name.startswith("GPU3") and cur.bottleneck.width_current == 8
    bad = [l for l in topo.links() if l.degraded]
    assert [l.name.split(" ")[0] for l in bad] == ["GPU3"]


def test_gpu_nic_is_the_smaller_of_pcie_and_wire():
    topo = build_topology(hgx(nic_down=("mlx5_4",)))
    e = topo.expected_gpu_nic("GPU0", "mlx5_0")
    assert e.gbyte_s == 50.0 and e.bottleneck.kind == "ib" and e.level == "PIX"
    # a port that is down is expected at the rate the node's other ports run at; it carries 0 now
    assert topo.expected_gpu_nic("GPU4", "mlx5_4").gbyte_s == 50.0
    assert topo.expected_gpu_nic("GPU4", "mlx5_4", current=True).gbyte_s == 0.0
    assert topo.nics()[4].rate_gbit_s is None


def test_nearest_nics_and_gpus_served():
    topo = build_topology(hgx())
    near = topo.nearest_nics("GPU2")
    assert near[0] == ("mlx5_2", "PIX")
    assert [lv for _, lv in near[1:4]] == ["NODE"] * 3 and near[-1][1] == "SYS"
    assert topo.gpus_near_nic("mlx5_6") == ["GPU6"]


def test_gpus_near_nic_shares_a_nic_between_gpus_at_the_same_best_level():
    t = Tree()
    rp = t.rp("0000:10:01.0", "pci0000:10", 0)
    s = t.switch(rp, "0000:11:00.0", ["0000:12:00.0", "0000:12:01.0", "0000:12:02.0"], "pci0000:10", 0)
    t.end(s["0000:12:00.0"], "0000:13:00.0", "gpu", "pci0000:10", 0)
    t.end(s["0000:12:01.0"], "0000:14:00.0", "gpu", "pci0000:10", 0)
    t.end(s["0000:12:02.0"], "0000:15:00.0", "nic", "pci0000:10", 0)
    topo = build_topology({"pcie": t.obs(), "infiniband": ib_devices([("mlx5_0", "0000:15:00.0")])})
    assert topo.gpus_near_nic("mlx5_0") == ["GPU0", "GPU1"]
    assert topo.level("GPU0", "GPU1") == "PIX"


def test_exports_are_serialisable_and_name_every_gpu():
    topo = build_topology(hgx(gpu3_x8=True))
    doc = json.loads(json.dumps(topo.to_json()))
    assert [g["label"] for g in doc["gpus"]] == [f"GPU{i}" for i in range(8)]
    assert doc["matrix"]["rows"][0][8] == "PIX"
    assert any(l["degraded"] and l["width_current"] == 8 for l in doc["links"])
    dot = render_dot(topo)
    assert dot.startswith("graph ccdiag_topology {") and '"GPU0\\n0000:19:00.0"' in dot
    assert "color=red" in dot  # the x8 link stands out
