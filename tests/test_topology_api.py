"""The topology package's contract: read-only once built, one level order, lookups that say
"no such device" without raising, the PCIe tree the checks share, and unit-bearing JSON keys."""

from __future__ import annotations

import pytest

from ccdiag.host.door import ReplayHost
from ccdiag.run.checkrun import evaluate
from ccdiag.topology import build_topology, level_rank
from ccdiag.topology.levels import LEVELS, UNKNOWN, gpudirect_capable
from ccdiag.topology.pcie_tree import common_hops

from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"


@pytest.fixture(scope="module")
def healthy():
    return evaluate(ReplayHost(str(HEALTHY)), deadline_s=120).topology


def test_levels_order_is_defined_once_and_total():
    order = ["X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", UNKNOWN]
    assert [level_rank(l) for l in order] == sorted(level_rank(l) for l in order)
    assert len({level_rank(l) for l in order}) == len(order)
    assert level_rank("NV2") == level_rank("NV18") and level_rank("P2C") == level_rank("PXB")
    assert level_rank("garbage") == level_rank(UNKNOWN) == level_rank(None)
    assert LEVELS[0] == "X" and LEVELS[-1] == "SYS"
    assert [gpudirect_capable(l) for l in ("PIX", "PXB", "P2C", "PHB", "NODE", "SYS", UNKNOWN)] == \
        [True, True, True, False, False, False, False]


def test_topology_cannot_be_changed_after_build(healthy):
    with pytest.raises(AttributeError):
        healthy.graph = None
    with pytest.raises(AttributeError):
        healthy.notes = ("x",)
    with pytest.raises(TypeError):
        healthy.parent["x"] = "y"
    with pytest.raises(TypeError):
        healthy.nv["gpu:x"] = {}
    import networkx as nx

    with pytest.raises(nx.NetworkXError):
        healthy.graph.add_node("intruder")
    assert isinstance(healthy.gpus(), list) and isinstance(healthy.links(), list)
    healthy.gpus().clear()  # a copy: the topology keeps its GPUs
    assert len(healthy.gpus()) == 8


def test_lookup_by_label_bdf_uuid_and_unknown_names(healthy):
    g = healthy.gpus()[3]
    assert healthy.node_id(g.label) == healthy.node_id(g.bdf) == healthy.node_id(g.uuid) == g.node
    assert healthy.node_id(g.bdf.upper()) == g.node  # BDFs are normalised
    assert healthy.has_device("mlx5_0") and not healthy.has_device("mlx5_99")
    with pytest.raises(KeyError, match="mlx5_99"):
        healthy.node_id("mlx5_99")


def test_units_are_spelled_out_in_every_bandwidth_key(healthy):
    doc = healthy.to_json()

    def keys(x):
        if isinstance(x, dict):
            for k, v in x.items():
                yield k
                yield from keys(v)
        elif isinstance(x, list):
            for v in x:
                yield from keys(v)

    every = set(keys(doc))
    assert not [k for k in every if "gbps" in k or k.endswith("_gbs")]
    assert {"max_gbyte_s", "current_gbyte_s", "gbyte_s", "rate_gbit_s"} <= every
    p2p = healthy.path_bandwidth("GPU0", "GPU1")
    assert p2p.gbyte_s == 450.0 and p2p.level == "NV18" and isinstance(p2p.links, tuple)


def test_gpudirect_affinity_is_asked_of_the_topology(healthy):
    a = healthy.gpudirect_nics("GPU0")
    assert (a["nearest"], a["level"], a["via"], a["gbyte_s"]) == (["mlx5_0"], "PIX", "mlx5_0", 50.0)
    assert healthy.nic_states()["mlx5_0"]["usable"] is True
    assert healthy.gpu_state("GPU0") == "ok"


def test_pcie_tree_has_every_function_with_bridges(healthy):
    tree = healthy.pcie_tree
    gpu0 = tree.get(healthy.gpu("GPU0").bdf)
    nic0 = next(d for d in tree.endpoints() if d.kind == "nic")
    parent = tree.parent(gpu0)
    assert parent is not None and parent.kind in ("bridge", "root_port")
    assert gpu0 in tree.children(parent.bdf)
    assert gpu0 in tree.endpoints_below(parent.bdf)
    assert all(d.kind in ("gpu", "nic", "nvswitch") for d in tree.endpoints())
    hops = common_hops(gpu0, nic0)
    assert hops is None or all(h in tree.devices for h in hops)


def test_without_pcie_data_the_tree_is_empty_and_levels_unknown():
    topo = build_topology({})
    assert topo.pcie_tree.endpoints() == () and topo.gpus() == []
