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
