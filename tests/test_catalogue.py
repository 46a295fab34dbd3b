"""The hardware catalogue (ccdiag/data/hardware.json + ccdiag.topology.catalogue): names as the tools
print them pick the right part, every entry carries a public source, and the topology's NVLink rate
comes from it (bridged GA102 boards at 14.06 GB/s per link, not the 25 of an A100)."""

from __future__ import annotations

import json
import re

import networkx as nx
import pytest

from ccdiag.topology import catalogue as C
from ccdiag.topology.bandwidth import NVLINK_GBYTE_S_PER_LINK, nvlink_gbyte_s
from ccdiag.topology.model import nvlink_bundle

# names copied from real outputs in tests/fixtures (nvbandwidth, p2pBandwidthLatencyTest, nccl-tests,
# nvidia-smi) and the public threads cited in tests/fixtures/realcases
PRINTED = [
    ("NVIDIA H100 80GB HBM3", "H100-SXM5"),
    ("NVIDIA H100 PCIe", "H100-PCIE"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4"),
    ("A100-SXM-80GB", "A100-SXM4"),
    ("NVIDIA A100 80GB PCIe", "A100-PCIE"),
    ("NVIDIA A100-PCIE-40GB", "A100-PCIE"),
    ("Tesla V100-SXM2-32GB", "V100-SXM2"),
    ("Tesla P100-SXM2-16GB", "P100-SXM2"),
    ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ("NVIDIA GeForce RTX 3090", "RTX-3090"),
    ("NVIDIA GeForce RTX 2080 Ti", "RTX-2080-Ti"),
    ("NVIDIA RTX A6000", "RTX-A6000"),
    ("NVIDIA A40", "A40"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA H800", "H800-SXM5"),
    ("NVIDIA H800 PCIe", "H800-PCIE"),
    ("NVIDIA H20", "H20"),
    ("NVIDIA H200", "H200-SXM"),
    ("NVIDIA H200 NVL", "H200-NVL"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100-SXM5"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"),
    ("Tesla T4", "T4"),
]


@pytest.mark.parametrize("name,key", PRINTED)
def test_a_printed_name_picks_its_part(name, key):
    assert C.gpu_by_name(name).key == key


def test_unknown_names_and_ids_are_none_not_a_guess():
    assert C.gpu_by_name("NVIDIA A100X") is None  # a word-prefix rule, not a substring one
    assert C.gpu_by_name("Radeon RX 7900 XTX") is None
    assert C.gpu_by_name("") is None and C.gpu_by_pci_id(0xFFFF) is None and C.gpu_by_pci_id("zz") is None


def test_pci_device_ids():
    assert C.gpu_by_pci_id(0x2330).key == "H100-SXM5"
    assert C.gpu_by_pci_id("0x2235").key == "A40"
    assert C.gpu_by_pci_id("20b5").key == "A100-PCIE"


def test_nvlink_rates_per_link_per_direction():
    assert C.gpu_by_name("NVIDIA A40").nvlink.gbyte_s_per_link == pytest.approx(14.0625)
    assert C.gpu_by_name("NVIDIA A100-SXM4-80GB").nvlink.total_gbyte_s == 300.0
    assert C.gpu_by_name("NVIDIA H100 80GB HBM3").nvlink.total_gbyte_s == 450.0
    assert C.gpu_by_name("NVIDIA B200").nvlink.total_gbyte_s == 900.0
    assert C.gpu_by_name("Tesla P100-SXM2-16GB").nvlink.gbyte_s_per_link == 20.0
    assert C.gpu_by_name("NVIDIA GB200").c2c_gbyte_s == 450.0
    assert NVLINK_GBYTE_S_PER_LINK == {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}


def test_geforce_boards_have_no_peer_access_over_pcie():
    assert C.gpu_by_name("NVIDIA GeForce RTX 4090").peer_access_pcie is False
    assert C.gpu_by_name("NVIDIA L40S").peer_access_pcie is True


def test_thermal_limits_read_from_a_real_nvidia_smi():
    h800 = C.gpu_by_name("NVIDIA H800")
    assert h800.thermal("slowdown") == 89 and h800.thermal("shutdown") == 92
    assert C.gpu_by_name("NVIDIA A40").thermal("slowdown") is None


def test_nics_by_name_and_id():
    assert C.nic_by_name("MT4129").max_port_gbit_s == 400
    assert C.nic_by_name("Mellanox Technologies MT28908 Family [ConnectX-6]").key == "ConnectX-6"
    assert C.nic_by_pci_id(0x101B).key == "ConnectX-6"


def test_systems_name_their_gpus_and_rails():
    hgx = C.system_by_key("HGX-H100-8GPU")
    assert hgx.gpus == 8 and hgx.rails == 8 and hgx.rail_gbit_s == 400 and C.gpu_by_key(hgx.gpu)
    assert {s.key for s in C.catalogue().systems} >= {"HGX-A100-8GPU", "HGX-H200-8GPU", "HGX-B200-8GPU",
                                                     "GB200-NVL72-tray", "DGX-Spark", "PCIe-8GPU-switches"}


def test_every_entry_has_a_source_and_an_entry_without_one_is_refused():
    cat = C.catalogue()
    assert all(e.sources for e in (*cat.gpus, *cat.nics, *cat.systems))
    doc = json.loads(C.resources.files("ccdiag").joinpath("data", C.DATA_FILE).read_text())
    doc["gpus"][0]["sources"] = []
    with pytest.raises(C.CatalogueError, match="without a source"):
        C.parse_catalogue(doc)
    del doc["gpus"][0]["key"]
    with pytest.raises(C.CatalogueError):
        C.parse_catalogue(doc)


def test_topology_nvlink_rate_comes_from_the_catalogue_by_model():
    assert nvlink_gbyte_s(3, 4, "NVIDIA A40") == pytest.approx(56.25)
    assert nvlink_gbyte_s(3, 12, "NVIDIA A100-SXM4-40GB") == 300.0
    assert nvlink_gbyte_s(4, 18, None) == 450.0  # unknown part: the generation's rate
    assert nvlink_gbyte_s(None, 4, None) is None

    g = nx.Graph()
    g.add_node("a", label="GPU0", name="NVIDIA A40")
    g.add_node("b", label="GPU1", name="NVIDIA A40")
    link = nvlink_bundle(g, {"a": {"b": (4, 4, 3)}}, (), "a", "b")
    assert link.max_gbyte_s == pytest.approx(56.25) and "A40" in link.source


# ---- the audit: every entry sourced, its figures held to what its vendor states --------------
DOC = json.loads(C.resources.files("ccdiag").joinpath("data", C.DATA_FILE).read_text())


def _entries():
    return [("gpu", g) for g in DOC["gpus"]] + [("nic", n) for n in DOC["nics"]] + [("system", s) for s in DOC["systems"]]


@pytest.mark.parametrize("kind,entry", _entries(), ids=lambda e: e["key"] if isinstance(e, dict) else e)
def test_every_entry_names_its_source_and_when_it_was_checked(kind, entry):
    assert entry["source"].strip() and entry["sources"], entry["key"]
    if entry["checked"] is None:
        assert entry["checked_how"].strip(), f"{entry['key']}: not checked, and not said why"
    else:
        assert re.fullmatch(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]", entry["checked"]) and "stated" in entry


@pytest.mark.parametrize("entry", [g for g in DOC["gpus"] if "stated" in g], ids=lambda g: g["key"])
def test_gpu_figures_are_what_the_vendor_states(entry):
    stated, nv = entry["stated"], entry.get("nvlink")
    if "nvlink_bidir_gbyte_s" in stated:
        rate = (nv or {}).get("gbyte_s_per_link", DOC["nvlink_generations"][str(nv["generation"])]["gbyte_s_per_link"]
                              if nv else 0)
        assert (nv["links"] * rate * 2 if nv else 0) == pytest.approx(stated["nvlink_bidir_gbyte_s"]), entry["key"]
    if "pcie_gen" in stated:
        assert entry["pcie"]["gen"] == stated["pcie_gen"], entry["key"]
    if "c2c_bidir_gbyte_s" in stated:
        assert entry["c2c_gbyte_s"] * 2 == stated["c2c_bidir_gbyte_s"], entry["key"]
    for figure in ("c2c_gbyte_s", "pcie", "nvlink"):
        value = entry.get(figure)
        stated_it = {"c2c_gbyte_s": "c2c_bidir_gbyte_s", "pcie": "pcie_gen", "nvlink": "nvlink_bidir_gbyte_s"}[figure]
        if value and stated_it not in stated:
            assert figure in entry.get("unsourced", {}), f"{entry['key']}: {figure} is neither stated nor marked unsourced"


@pytest.mark.parametrize("entry", [n for n in DOC["nics"]], ids=lambda n: n["key"])
def test_nic_rates_are_what_the_vendor_states(entry):
    assert entry["max_port_gbit_s"] == entry["stated"]["max_port_gbit_s"] == max(entry["port_rates_gbit_s"])


@pytest.mark.parametrize("entry", [s for s in DOC["systems"] if "stated" in s], ids=lambda s: s["key"])
def test_system_figures_are_what_the_vendor_states(entry):
    rails = entry.get("rails") or {}
    got = {"gpus": entry["gpus"], "nvswitches": entry.get("nvswitches", 0), "rails": rails.get("count"),
           "rail_gbit_s": rails.get("gbit_s")}
    assert {k: got[k] for k in entry["stated"]} == entry["stated"]


def test_a800s_have_8_nvlinks_not_the_a100s_12():
    for name, key in (("NVIDIA A800-SXM4-80GB", "A800-SXM4"), ("NVIDIA A800 80GB PCIe", "A800-PCIE")):
        m = C.gpu_by_name(name)
        assert m.key == key and m.nvlink.links == 8 and m.nvlink.total_gbyte_s == 200.0
    assert C.gpu_by_name("NVIDIA A100-SXM4-80GB").nvlink.links == 12
    from ccdiag.bench.filetopo import FileTopology

    ft = FileTopology({f"GPU{i}": "NVIDIA A800-SXM4-80GB" for i in range(8)})
    exp, _ = ft.peer("GPU0", "GPU1")
    assert exp.gbyte_s == 200.0 and "8 x 25" in exp.source  # 171 GB/s, an A800's healthy figure, is 86 %


def test_the_unsourced_gb200_c2c_figure_is_marked_where_it_is_used():
    m = C.gpu_by_name("NVIDIA GB200")
    assert m.unsourced_note("c2c_gbyte_s") and m.source.startswith("NVIDIA GB200 NVL72 specifications")
    from ccdiag.bench.filetopo import FileTopology

    exp, _ = FileTopology({"GPU0": "NVIDIA GB200"}).host_device("GPU0")
    assert "unsourced" in exp.source


def test_an_entry_without_a_source_field_is_refused():
    doc = json.loads(json.dumps(DOC))
    doc["nics"][0]["source"] = " "
    with pytest.raises(C.CatalogueError, match="without a source"):
        C.parse_catalogue(doc)


def test_audit_figures_are_printed(capsys):
    entries = _entries()
    checked = sum(1 for _, e in entries if e["checked"])
    read = sum(1 for _, e in entries if "read in this audit" in (e.get("checked_how") or ""))
    with capsys.disabled():
        print(f"\nhardware catalogue audit: {len(entries)} entries, {len(entries)} with a vendor source, {checked} "
              f"checked against the vendor's stated figures, {read} with a page read in this audit")
    assert checked >= len(entries) - 4


def test_a_new_per_entry_field_is_kept_open():
    """Other readers add fields to entries (per-SKU memory bandwidth, GEMM peaks): the catalogue reads
    what it knows and leaves the rest alone."""
    doc = json.loads(json.dumps(DOC))
    doc["gpus"][0]["hbm_gbyte_s"] = 3350.0
    doc["gpus"][0]["stated"]["hbm_gbyte_s"] = 3350.0
    assert C.parse_catalogue(doc).gpus[0].key == doc["gpus"][0]["key"]


def test_a_systems_known_slow_causes_each_name_their_source():
    spark = next(s for s in C.catalogue().systems if s.key == "DGX-Spark")
    assert len(spark.slow_causes) >= 3 and all(c.endswith(")") and " (" in c for c in spark.slow_causes)
    for entry in DOC["systems"]:
        for c in entry.get("slow_causes", []):
            assert c["cause"].strip() and c["source"].strip(), entry["key"]
