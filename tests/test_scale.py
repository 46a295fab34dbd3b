"""A node with hundreds of RDMA devices is judged and shown without an internal error.

SYNTHESIZED with tests/synth/scale.py (300 NICs, 8 GPUs). No timing is asserted here; the times
are measured by bench/bench_scale.py.
"""

from __future__ import annotations

import json

import pytest

from cli_runner import run
from synth.scale import build_scale_node


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("scale") / "scale-300.snap.tar.gz"
    build_scale_node(300, 8).save(str(path))
    return str(path)


@pytest.mark.parametrize("args", [("check",), ("topo", "--json"), ("nccl",)])
def test_a_300_nic_node_completes(big, args):
    code, out, err = run(args[0], "--replay", big, *args[1:])
    assert code != 4 and "Traceback" not in err, err
    if "--json" in args:
        doc = json.loads(out)
        assert len(doc["topology"]["matrix"]["labels"]) == 308


def _topology_of(snapshot):
    from ccdiag.commands.topo import gather
    from ccdiag.host.door import ReplayHost

    return gather(ReplayHost(snapshot))[1]


def _slow_rows(topo, ends):
    return [["X" if i == j else topo.level(a, b) for j, b in enumerate(ends)] for i, a in enumerate(ends)]


def _fixture_snapshots():
    import pathlib

    root = pathlib.Path(__file__).parent.parent
    return sorted(str(p) for p in [*root.glob("samples/*.snap.tar.gz"), *root.glob("tests/fixtures/**/*.snap.tar.gz")])


@pytest.mark.parametrize("snapshot", _fixture_snapshots())
def test_fast_matrix_rows_equal_level_cell_by_cell(snapshot):
    """ccdiag.topology.fastrows fills rows by subtree ranges; every cell must be what level() says."""
    from ccdiag.topology.fastrows import level_rows

    topo = _topology_of(snapshot)
    ends = [g.node for g in topo.gpus()] + [n.node for n in topo.nics()]
    assert level_rows(topo, ends) == _slow_rows(topo, ends)


def test_fast_matrix_rows_on_the_scale_node(big):
    from ccdiag.topology.fastrows import level_rows

    topo = _topology_of(big)
    ends = [g.node for g in topo.gpus()] + [n.node for n in topo.nics()]
    assert level_rows(topo, ends) == _slow_rows(topo, ends)


def test_fast_matrix_rows_with_every_pcie_shape():
    """Tree fixtures (switches, root ports, two NUMA nodes, a device with no parent) and odd ends."""
    from topo_trees import hgx

    from ccdiag.topology import build_topology
    from ccdiag.topology.fastrows import level_rows

    for topo in (build_topology(hgx()), build_topology(hgx(gpu3_x8=True, nic_down=("mlx5_1",)))):
        graph_ends = sorted(n for n in topo.graph.nodes if n not in topo._inner)
        for ends in ([g.node for g in topo.gpus()] + [n.node for n in topo.nics()], graph_ends,
                     graph_ends[::-1], graph_ends + graph_ends[:2], sorted(topo.graph.nodes)):
            assert level_rows(topo, ends) == _slow_rows(topo, ends)
