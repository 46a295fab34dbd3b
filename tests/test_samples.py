"""The bundled SYNTHESIZED samples: healthy reproduces the corpus matrix, degraded shows its faults."""

from __future__ import annotations

import importlib.util
import sys
import json

import pytest

from conftest import FIXTURES, REPO

from ccdiag.commands.topo import gather
from ccdiag.host.door import ReplayHost
from ccdiag.probes.smi_topo import cells_equal, parse_topo_matrix
from ccdiag.probes.registry import run_probes
from ccdiag.host.snapshot import SnapshotData
from ccdiag.topology.matrix import to_topo_matrix

SAMPLES = REPO / "samples"
HEALTHY = SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = SAMPLES / "hgx-h100-8gpu-degraded.snap.tar.gz"
CORPUS_H100 = FIXTURES / "corpus" / "topo-m" / "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"


@pytest.fixture(scope="module")
def healthy():
    return gather(ReplayHost(str(HEALTHY)))


@pytest.fixture(scope="module")
def degraded():
    return gather(ReplayHost(str(DEGRADED)))


def _generator():
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_samples", mod)  # its dataclasses resolve their annotations there
    spec.loader.exec_module(sys.modules["make_samples"])
    return sys.modules["make_samples"]


@pytest.mark.parametrize("path", [HEALTHY, DEGRADED])
def test_samples_say_they_are_synthesized(path):
    meta = SnapshotData.load(str(path)).meta
    assert meta["source"] == "synthesized" and meta["synthesized"] is True
    assert "SYNTHESIZED" in meta["description"]
    assert any("h100-sxm-hbm3-x8-nv18-8nic" in s for s in meta["sources"])
    assert meta["window_s"] == 10.0 and meta["epochs"] == 2


@pytest.mark.parametrize("degraded_", [False, True])
def test_committed_samples_match_the_generator(degraded_):
    fresh = _generator().build(degraded_)
    saved = SnapshotData.load(str(DEGRADED if degraded_ else HEALTHY))
    fresh = SnapshotData.from_bytes(fresh.to_bytes())
    assert fresh.files == saved.files
    assert fresh.links == saved.links
    assert fresh.nvml == saved.nvml
    assert fresh.commands == saved.commands
    assert fresh.kmsg == saved.kmsg
    # the committed samples stay in snapshot format 1 (the tar-of-members layout; a fresh one is
    # format 2): they are what proves that older snapshots still replay
    volatile = ("tool_version", "format_version")
    assert {k: v for k, v in fresh.meta.items() if k not in volatile} == \
        {k: v for k, v in saved.meta.items() if k not in volatile}
    assert saved.meta["format_version"] == 1 and fresh.meta["format_version"] == 2


def test_healthy_reproduces_the_corpus_matrix_exactly(healthy):
    runs, topo, smi, diffs = healthy
    corpus = parse_topo_matrix(CORPUS_H100.read_text())
    mine = to_topo_matrix(topo)
    assert mine.devices == corpus.devices
    for a in corpus.devices:
        for b in corpus.devices:
            assert mine.raw_level(a, b) == corpus.raw_level(a, b), (a, b)
        assert mine.cpu_affinity[a] == corpus.cpu_affinity[a]
        assert mine.numa_affinity[a] == corpus.numa_affinity[a]
        assert mine.gpu_numa_id[a] == corpus.gpu_numa_id[a]
    assert mine.nic_legend == corpus.nic_legend
    assert cells_equal(corpus, mine) == []
    # the recorded nvidia-smi topo -m says the same, cell by cell
    assert smi is not None and cells_equal(smi, corpus) == []
    assert diffs == []


def test_healthy_facts(healthy):
    runs, topo, _, _ = healthy
    assert all(r.status == "ok" for r in runs.values()), {n: (r.status, r.error) for n, r in runs.items()}
    assert topo.driver_version == "570.133.20"
    assert [n.label for n in topo.nics()] == [f"mlx5_{i}" for i in range(8)]
    assert all(n.rate_gbit_s == 400.0 and n.link_layer == "InfiniBand" for n in topo.nics())
    ib = runs["infiniband"].data.devices
    assert {d.fw_ver for d in ib} == {"28.41.1000"} and ib[0].ports[0].rate_raw == "400 Gb/sec (4X NDR)"
    assert all(l.gen_current == 5 and l.width_current == 16 for l in topo.links()
               if l.kind == "pcie" and l.name.startswith("GPU"))
    assert {topo.expected_nvlinks(g.label) for g in topo.gpus()} == {18}
    assert topo.expected_p2p("GPU0", "GPU7").gbyte_s == 450.0
    assert topo.expected_h2d("GPU4").gbyte_s == pytest.approx(63.0, abs=0.1)
    system = runs["system"].data
    assert "nvidia_peermem" in system.modules and system.fabric_manager == "active"
    assert system.memlock_unlimited is True and system.shm_bytes >= 1 << 39
    names = {i.name for i in runs["netdev"].data.interfaces}
    assert {f"ib{i}" for i in range(8)} | {"eno1"} <= names


def test_degraded_shows_each_fault(degraded):
    runs, topo, smi, diffs = degraded
    gpu3 = next(l for l in topo.links() if l.kind == "pcie" and l.name.startswith("GPU3 "))
    assert (gpu3.width_current, gpu3.width_max, gpu3.degraded) == (8, 16, True)
    assert topo.level("GPU5", "GPU0") == "NV17" and topo.expected_nvlinks("GPU5") == 18
    port = next(l for l in topo.links() if l.name == "mlx5_4 port 1")
    assert port.state == "DOWN" and port.current_gbyte_s == 0.0
    gpus = {g.label: g for g in topo.gpus()}
    assert gpus["GPU6"].failed == "gpu_lost" and gpus["GPU6"].bdf == "0000:ba:00.0"
    nv = runs["nvml"].data
    assert nv.gpus[2].remapped_rows_pending is True
    assert "nvidia_peermem" not in runs["system"].data.modules
    acs = [d.bdf for d in runs["pcie"].data.devices if d.acs_enabled]
    assert acs == ["0000:29:00.0"]
    assert smi is None and diffs is None


def test_degraded_kernel_log_and_counter_window():
    host = ReplayHost(str(DEGRADED))
    first = run_probes(host, ["kmsg", "infiniband"])
    xids = [e for e in first["kmsg"].data.events if e.kind == "xid"]
    assert [(e.code, e.bdf) for e in xids] == [(79, "0000:ba:00.0")]
    sym0 = next(d for d in first["infiniband"].data.devices if d.name == "mlx5_1").ports[0].counters["symbol_error"]
    host.next_epoch(10.0)
    second = run_probes(host, ["infiniband"])
    sym1 = next(d for d in second["infiniband"].data.devices if d.name == "mlx5_1").ports[0].counters["symbol_error"]
    assert sym1 > sym0
    other0 = next(d for d in first["infiniband"].data.devices if d.name == "mlx5_0").ports[0].counters
    other1 = next(d for d in second["infiniband"].data.devices if d.name == "mlx5_0").ports[0].counters
    assert other1["symbol_error"] == other0["symbol_error"] == 0
    assert other1["port_xmit_data"] > other0["port_xmit_data"]


def test_healthy_recorded_commands_are_marked_synthesized():
    snap = SnapshotData.load(str(HEALTHY))
    smi = [c for c in snap.commands if c["argv"][0] == "nvidia-smi"]
    assert [c["argv"][-1] for c in smi] == ["-m", "r", "w", "n", "a"]
    assert all("SYNTHESIZED" in c["note"] for c in smi)
    assert "\t" in smi[0]["stdout"]
    json.dumps(snap.commands)
