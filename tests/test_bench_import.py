"""``ccdiag bench import``: every real benchmark output in the corpus (tests/fixtures/corpus:
nvbandwidth, p2pBandwidthLatencyTest, nccl-tests, perftest; each file keeps its source line) is
judged against a topology or refused with its line named; NVLS-inflated bus bandwidth is never
held to a link rate. Topologies come from the bundled samples (synthesized 8x H100 SXM nodes) or a
real pasted `nvidia-smi topo -m`."""

from __future__ import annotations

import json
import pathlib

import pytest

from cli_runner import run
from ccdiag.report.document import validate

TESTS = pathlib.Path(__file__).resolve().parent
CORPUS = TESTS / "fixtures" / "corpus"
HEALTHY = str(TESTS.parent / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz")
ALL = sorted(p for d in ("nvbandwidth", "nccl-tests", "perftest") for p in (CORPUS / d).glob("*.txt"))


def imported(path, *extra):
    code, out, err = run("bench", "import", str(path), "--json", *extra)
    doc = json.loads(out) if out.strip() else None
    return code, doc, err


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name[:60])
def test_every_corpus_file_is_judged_or_refused_with_its_line(path):
    code, doc, err = imported(path, "--replay", HEALTHY)
    assert code in (0, 1, 2, 3), err
    if code == 2:
        assert "line " in err and path.name in err
        return
    validate(doc)
    assert doc["kind"] == "bench" and doc["bench"]
    assert "Traceback" not in err


def test_nvbandwidth_h100_read_ce_is_82_percent_of_nv18_and_passes():
    code, doc, _ = imported(CORPUS / "nvbandwidth" / "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt",
                            "--replay", HEALTHY)
    ms = doc["bench"][0]["measurements"]
    assert code == 0 and len(ms) == 56
    cell = next(m for m in ms if m["src"] == "GPU2" and m["dst"] == "GPU0")
    assert cell["gbyte_s"] == pytest.approx(372.05)
    assert cell["expected"]["gbyte_s"] == 450.0 and cell["expected"]["bottleneck_desc"] == "18 x NVLink4"
    assert cell["ratio"] == pytest.approx(372.05 / 450, abs=1e-3) and cell["status"] == "pass"


def test_pasted_levels_add_to_the_catalogue_rates():
    """The H100 PCIe pair's own pasted matrix says NV12: 12 links x 25 GB/s from the catalogue."""
    code, doc, _ = imported(CORPUS / "nvbandwidth" / "p2pBandwidthLatencyTest-h100-pcie-x2-nvlink-bridge.txt",
                            "--from-smi", str(CORPUS / "topo-m" / "h100-pcie-x2-nvlink-bridge-nv12-indented.txt"))
    assert code == 0
    pair = next(m for m in doc["bench"][0]["measurements"] if m["src"] == "GPU0" and m["dst"] == "GPU1"
                and m["op"] == "write" and m["direction"] == "uni")
    assert pair["gbyte_s"] == pytest.approx(256.6, abs=0.05)
    assert pair["expected"]["gbyte_s"] == 300.0 and pair["expected"]["level"] == "NV12"
    assert pair["expected"]["kind"] == "nvlink" and pair["expected"]["source"].startswith("catalogue:")
    assert pair["status"] == "pass" and pair["ratio"] == pytest.approx(256.6 / 300, abs=1e-3)


def test_pair_that_cannot_access_its_peer_is_staged_and_said_so():
    code, doc, _ = imported(CORPUS / "nvbandwidth" / "p2pBandwidthLatencyTest-rtx2080ti-x2-cannot-access-peer.txt")
    enabled = [m for m in doc["bench"][0]["measurements"] if m["op"] == "write" and m["src"] != m["dst"]]
    assert enabled and all(m["extra"].get("peer_access") is False for m in enabled)
    assert all("CANNOT Access Peer" in m["note"] for m in enabled)
    assert all(m["expected"]["kind"] == "staged" for m in enabled if m["direction"] == "uni")
    f = next(f for f in doc["findings"] if f["check"] == "bench.p2p.no_peer_access")
    assert "GeForce" in f["summary"]


def test_a_file_from_other_hardware_is_said_so_and_not_judged_against_the_snapshot():
    code, doc, _ = imported(CORPUS / "nccl-tests" / "all_reduce_perf-1node-8x-a100-sxm4-40g-new-header-format.txt",
                            "--replay", HEALTHY)
    m = doc["bench"][0]["measurements"][0]
    assert m["expected"] is None and m["status"] == "unknown" and "not judged against the snapshot" in m["note"]
    assert code == 3 and any(f["check"] == "bench.import.other_node" for f in doc["findings"])
    code, doc, _ = imported(CORPUS / "nccl-tests" / "all_reduce_perf-2node-16x-h200-oci-rdma.txt", "--replay", HEALTHY)
    assert code == 3 and "not the node's" in doc["bench"][0]["measurements"][0]["note"]


def test_nvls_inflated_busbw_is_reported_never_judged():
    code, doc, _ = imported(CORPUS / "nccl-tests" / "all_reduce_perf-2node-16x-h200-oci-rdma.txt")
    m = doc["bench"][0]["measurements"][0]
    assert m["gbyte_s"] == pytest.approx(486.5, abs=0.1)  # the largest size's busbw (16 GiB)
    assert m["status"] == "unknown" and m["expected"] is None
    assert code == 3 and any(f["check"] == "bench.import.unjudged" for f in doc["findings"])


def test_a_plugin_probe_line_is_not_taken_for_collnet():
    from ccdiag.bench.imports import IN_NETWORK

    text = (CORPUS / "nccl-tests" /
            "alltoall_perf-2node-4x-h20-3e-vm-roce-bond-tencent-rdma-plugin-interleaved-nccl-info.txt").read_text()
    assert "ncclCollNetPlugin" in text and IN_NETWORK.search(text) is None


def test_ring_busbw_against_the_catalogue_nvlink_bottleneck():
    """An 8 x A100-SXM4 single-node allreduce with no snapshot: the catalogue's 12 NVLink3 (300 GB/s)
    on an 8-GPU NVSwitch board; 232 GB/s is 77 %, the typical ring figure (nccl-tests#149)."""
    code, doc, _ = imported(CORPUS / "nccl-tests" / "all_reduce_perf-1node-8x-a100-sxm4-40g-new-header-format.txt")
    m = doc["bench"][0]["measurements"][0]
    assert m["gbyte_s"] == pytest.approx(232.17, abs=0.05) or m["gbyte_s"] > 232
    assert m["status"] == "pass" and m["expected"]["gbyte_s"] == 300.0
    assert m["expected"]["source"].startswith("catalogue")
    assert code == 0 and any(f["check"] == "bench.nccl" and f["status"] == "pass" for f in doc["findings"])


def test_wrong_results_fail_whatever_the_bandwidth():
    code, doc, _ = imported(TESTS / "fixtures" / "synth" / "nccl-tests" / "all_reduce_perf-J-v3-from-h200-capture.json",
                            "--replay", HEALTHY)
    assert code == 1 and any(f["check"] == "bench.nccl.wrong" for f in doc["findings"])


def test_perftest_host_write_on_a_slow_port_blames_the_port():
    code, doc, _ = imported(CORPUS / "perftest" / "ib_write_bw-a-mlx5_0-hdr-ib-client-MBps-tabs-cpu-freq-warnings.txt",
                            "--replay", HEALTHY)
    f = next(f for f in doc["findings"] if f["check"].startswith("bench.ib_write"))
    assert f["check"] == "bench.ib_write.port" and f["component"]["device"] == "mlx5_0" and code == 1


def test_server_side_latency_output_is_refused_naming_the_line():
    code, out, err = run("bench", "import", str(CORPUS / "perftest" / "ib_read_lat-mlx4-fdr-ib-server-side-no-results.txt"))
    assert code == 2 and "line 6" in err and "client" in err


def test_perftest_json_unit_can_be_given():
    f = TESTS / "fixtures" / "synth" / "perftest" / "ib_write_bw-out_json-from-t4-roce-client.json"
    _, doc, _ = imported(f, "--replay", HEALTHY)
    assumed = doc["bench"][0]["measurements"][0]
    assert "does not record its unit" in assumed["note"]
    _, doc, _ = imported(f, "--replay", HEALTHY, "--perftest-unit", "Gb/sec")
    assert doc["bench"][0]["measurements"][0]["gbyte_s"] > assumed["gbyte_s"] * 100


def test_garbage_and_missing_files_are_usage_errors(tmp_path):
    bad = tmp_path / "x.txt"
    bad.write_text("hello\nthis is not a benchmark\n")
    code, _, err = run("bench", "import", str(bad))
    assert code == 2 and "x.txt" in err
    code, _, err = run("bench", "import", str(tmp_path / "missing.txt"))
    assert code == 2


def _pinned_h2d(gbyte_s: float, membind: int | None):
    from ccdiag.bench.result import Measurement

    m = Measurement("h2d", "host", "GPU0", gbyte_s=gbyte_s, status="pass", note="bwt.txt")
    m.extra.update(membind=membind, memory="pinned")
    return m


@pytest.mark.parametrize("runs, gpu_numa, far", [
    ([(12.2, 0), (3.8, 1)], None, [1]),  # two bindings in the file: the slow one is on the far node
    ([(12.2, 0), (11.9, 1)], None, []),  # as fast on both nodes: nothing to name
    ([(3.8, 1)], {"GPU0": 0}, [1]),  # one run, the snapshot says the GPU is on node 0
    ([(12.2, 0)], {"GPU0": 0}, []),  # one run on the GPU's own node
    ([(3.8, 1)], None, []),  # one run, the GPU's node unknown: not judged
])
def test_bandwidthtest_host_memory_on_the_far_numa_node(runs, gpu_numa, far):
    """SYNTHESIZED runs of one pinned host-to-device copy (figures as in gearshifft#82's paste) under
    numactl bindings: the runs whose memory is on the far node are named, and their notes say so."""
    from ccdiag.bench.import_bwt import numa_findings

    ms = [_pinned_h2d(g, node) for g, node in runs]
    found = numa_findings(ms, "bwt.txt", gpu_numa)
    assert [m.extra["membind"] for m in ms if "the GPU's node is" in (m.note or "")] == far
    assert len(found) == (1 if far else 0)
    if far:
        assert found[0].component.gpu == 0 and "NUMA node 1" in found[0].summary and "on node 0" in found[0].summary
