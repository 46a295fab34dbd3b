"""Real benchmark outputs that users pasted into public threads, docs and blogs
(tests/fixtures/realcases, each with its source, hardware and the cause the thread established; plus
the bench outputs of tests/fixtures/corpus), judged by `ccdiag bench import` with no snapshot of the
node they ran on: the verdict names the cause, stays quiet on healthy runs, or says UNKNOWN with its
reason. A sweep runs every file through every way of judging it and fails on an OK (exit 0) with no
figure judged. The table of these cases, with main's verdict before, is docs/realcases-bench-import.md."""

from __future__ import annotations

import json
import pathlib

import pytest
from cli_runner import run

from ccdiag.report.document import validate

TESTS = pathlib.Path(__file__).resolve().parent
REAL = TESTS / "fixtures" / "realcases"
CORPUS = TESTS / "fixtures" / "corpus"
SAMPLES = TESTS.parent / "samples"
HEALTHY = str(SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz")
DEGRADED = str(SAMPLES / "hgx-h100-8gpu-degraded.snap.tar.gz")
BAD = ("warn", "fail")

#: file -> (exit code, the finding that names the cause (check id, words in its summary) or None for
#: a healthy run that must stay quiet, extra arguments)
CASES = {
    # GeForce / TITAN boards: no peer access over PCIe
    "realcases/p2plat-rtx4090-x2-geforce-cannot-access-peer.txt": (0, ("bench.p2p.no_peer_access", "RTX-4090"), ()),
    "realcases/p2plat-titan-rtx-x8-cannot-access-peer.txt": (0, ("bench.p2p.no_peer_access", "TITAN-RTX"), ()),
    "realcases/nvbandwidth-13-rtx2080ti-x2-d2d-waived-no-peer-mapping.txt":
        (3, ("bench.p2p.no_peer_access", "waived"), ()),
    "realcases/nccl-tests-autodl-rtx2080ti-x2-all-reduce-no-p2p.txt":
        (0, ("bench.nccl.no_peer_access", "staged through host memory"), ()),
    "corpus/nvbandwidth/p2pBandwidthLatencyTest-rtx2080ti-x2-cannot-access-peer.txt":
        (0, ("bench.p2p.no_peer_access", "RTX-2080-Ti"), ()),
    # ACS / IOMMU redirect
    "realcases/p2plat-nccl814-p2p-enabled-half-of-disabled-6gpu.txt": (1, ("bench.p2p.redirected", "ACS"), ()),
    # a GPU whose link trained down; a slow PCIe path
    "realcases/p2plat-tinygrad6-rtx4090-x7-one-gpu-link-downgraded.txt": (1, ("bench.p2p.peer_gpu", "GPU6"), ()),
    "realcases/p2plat-tinygrad44-rtx4090-x2-patched-p2p-slow-path.txt": (1, ("bench.p2p", "21% of 31.5 GB/s"), ()),
    # RoCE bidirectional: both directions summed, halved per direction, port rate not in the file
    "realcases/perftest-ib_write_bw-b-roce-100gbe-sum-of-both-directions.txt":
        (3, ("bench.import.unjudged", "port rate"), ()),
    # bridged NVLink: levels from the pasted matrix
    "corpus/nvbandwidth/p2pBandwidthLatencyTest-h100-pcie-x2-nvlink-bridge.txt":
        (0, None, ("--from-smi", str(CORPUS / "topo-m" / "h100-pcie-x2-nvlink-bridge-nv12-indented.txt"))),
    # healthy runs of each family
    "realcases/nvbandwidth-readme-x8-nvlink-write-ce-healthy.txt": (0, None, ()),
    "realcases/nvbandwidth-15-rtx4090-x8-h2d-d2h-healthy-gen4.txt": (0, None, ()),
    "realcases/nvbandwidth-50-a6000-x6-d2d-read-pcie-no-nvlink.txt": (0, None, ()),
    "realcases/nvbandwidth-v0.10-b300-x7-full-run-healthy-dell-xe9780.txt": (0, None, ()),
    "corpus/nvbandwidth/nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt": (0, None, ()),
    "realcases/p2plat-h100-sxm-x8-healthy-bidir-nccl1264.txt": (0, None, ()),
    "realcases/p2plat-a100-sxm4-80gb-x8-nvswitch-healthy-nvmlc.txt": (0, None, ()),
    "realcases/p2plat-a100-sxm4-80gb-x8-nv12-healthy-issue-mirror.txt": (0, None, ()),
    "realcases/p2plat-rtx-pro-6000-x4-rtx5090-x2-cross-numa-gpu3.txt": (0, None, ()),
    "corpus/nccl-tests/all_reduce_perf-1node-8x-a100-sxm4-40g-new-header-format.txt": (0, None, ()),
    # nothing in the file to hold the figures to: UNKNOWN with the reason
    "realcases/p2plat-nccl1264-h100-sxm-x8-p2p-disabled-staged-healthy.txt":
        (3, ("bench.import.unjudged", "P2P disabled"), ()),
    "realcases/nccl-tests-gcp-a3mega-2node-16x-h100-all-reduce.txt": (3, ("bench.import.unjudged", "NICs"), ()),
    "corpus/nccl-tests/all_reduce_perf-2node-16x-a100-sxm4-40g-oci-roce-10G.txt":
        (3, ("bench.import.unjudged", "NICs"), ()),
    "corpus/nccl-tests/all_reduce_perf-2node-16x-h200-oci-rdma.txt": (3, ("bench.import.unjudged", "NICs"), ()),
    "corpus/nccl-tests/alltoall_perf-2node-4x-h20-3e-vm-roce-bond-tencent-rdma-plugin-interleaved-nccl-info.txt":
        (3, ("bench.import.unjudged", "NICs"), ()),
    "corpus/perftest/ib_write_bw-a-mlx5_0-hdr-ib-client-MBps-tabs-cpu-freq-warnings.txt":
        (3, ("bench.import.unjudged", "port rate"), ()),
    "corpus/perftest/ib_write_bw-use_cuda-t4-roce-sriov-client.txt": (3, ("bench.import.unjudged", "port rate"), ()),
    "corpus/perftest/ib_write_bw-use_cuda-t4-roce-sriov-server.txt": (3, ("bench.import.unjudged", "port rate"), ()),
    "corpus/perftest/ib_write_lat-a-mlx5_0-hdr-ib-client-all-sizes-tabs-cpu-freq-warnings.txt":
        (3, ("bench.import.unjudged", "latency"), ()),
}


def imported(path, *extra):
    code, out, err = run("bench", "import", str(path), "--json", *extra)
    assert "Traceback" not in err and code != 4, err
    return code, (json.loads(out) if out.strip() else None), err


def test_at_least_thirty_real_outputs_each_with_source_and_cause():
    files = sorted(REAL.glob("*.txt"))
    corpus = [p for d in ("nvbandwidth", "nccl-tests", "perftest") for p in (CORPUS / d).glob("*.txt")]
    assert len(files) + len(corpus) >= 30
    for f in files:
        head = f.read_text().split("\n", 4)
        assert head[0].startswith("#ccdiag-source: ") and head[1].startswith("#ccdiag-hw: ")
        assert head[2].startswith("#ccdiag-cause: ") and head[3].startswith("#ccdiag-notes: ")


@pytest.mark.parametrize("name", sorted(CASES), ids=lambda n: n.split("/")[-1][:50])
def test_the_verdict_names_the_cause_or_stays_quiet(name):
    code, cause, extra = CASES[name]
    got, doc, err = imported(TESTS / "fixtures" / name, *extra)
    assert got == code, (got, err)
    findings = doc["findings"]
    if cause is None:
        assert not [f for f in findings if f["status"] in BAD], [f["summary"] for f in findings]
        assert any(f["status"] == "pass" for f in findings)
        return
    check, words = cause
    hits = [f for f in findings if f["check"] == check and words in (f["summary"] + json.dumps(f["details"]))]
    assert hits, [(f["check"], f["summary"]) for f in findings]


def test_the_redirect_finding_says_which_facts_tell_acs_from_iommu():
    _, doc, _ = imported(REAL / "p2plat-nccl814-p2p-enabled-half-of-disabled-6gpu.txt")
    f = next(f for f in doc["findings"] if f["check"] == "bench.p2p.redirected")
    assert "ACSCtl" in f["remedy"] and "iommu=pt" in f["remedy"] and f["status"] == "fail"


def test_a_pass_below_the_typical_range_says_it_is_above_the_floor_only():
    """The staged GeForce ring passes at 25 % of its PCIe link, under the typical 35-45 %: the pass
    says so instead of printing the typical range beside a figure outside it."""
    _, doc, _ = imported(REAL / "nccl-tests-autodl-rtx2080ti-x2-all-reduce-no-p2p.txt")
    (f,) = [f for f in doc["findings"] if f["check"] == "bench.nccl"]
    assert f["status"] == "pass" and "25%" in f["summary"]
    assert "below the typical 35%-45%, above the 25% warn floor" in f["summary"], f["summary"]


def test_roce_bidirectional_is_halved_and_labelled_per_direction():
    _, doc, _ = imported(REAL / "perftest-ib_write_bw-b-roce-100gbe-sum-of-both-directions.txt")
    m = doc["bench"][0]["measurements"][0]
    assert m["direction"] == "bidir" and m["gbyte_s"] == pytest.approx(98.02 / 8 / 2, abs=0.01)
    assert m["extra"]["bidir_total_gbyte_s"] == pytest.approx(98.02 / 8, abs=0.01)
    assert "each way" in m["note"]


def test_expected_values_from_the_catalogue_say_so():
    _, doc, _ = imported(CORPUS / "nvbandwidth" / "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt")
    m = doc["bench"][0]["measurements"][0]
    assert m["expected"]["gbyte_s"] == 450.0 and m["expected"]["source"].startswith("catalogue: H100-SXM5")


def _bench_files():
    files = sorted(REAL.glob("*.txt"))
    files += sorted(p for d in ("nvbandwidth", "nccl-tests", "perftest") for p in (CORPUS / d).glob("*.txt"))
    return files


WAYS = {"catalogue": (), "healthy-snapshot": ("--replay", HEALTHY), "degraded-snapshot": ("--replay", DEGRADED),
        "pasted-matrix": ("--from-smi", str(CORPUS / "topo-m" / "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"))}


@pytest.mark.parametrize("way", sorted(WAYS))
def test_no_ok_with_nothing_judged_on_any_file(way):
    """Every corpus and real-case file through every way `bench import` judges: exit 0 only with at
    least one figure judged, UNKNOWN (3) names its reason, never an internal error."""
    for path in _bench_files():
        code, doc, err = imported(path, *WAYS[way])
        assert code in (0, 1, 2, 3), (path.name, code, err)
        if code == 2:
            assert "line " in err, (path.name, err)
            continue
        validate(doc)
        judged = [m for r in doc["bench"] for m in r["measurements"] if m["status"] in ("pass", "warn", "fail")]
        if code == 0:
            assert judged, f"{path.name}: OK with 0 figures judged ({way})"
        if not judged and code == 3:
            assert any(f["status"] == "unknown" or f["status"] in BAD for f in doc["findings"]), path.name


def test_bench_and_check_bench_never_ok_with_nothing_measured():
    code, out, _ = run("bench", "--replay", HEALTHY)
    assert code == 3 and "NOT MEASURED" in out
    code, out, _ = run("check", "--bench", "quick", "--replay", HEALTHY)
    assert "benchmarks: none ran here" in out and "replayed snapshot cannot be measured" in out


def test_compare_with_no_fact_in_common_is_unknown(tmp_path):
    paths = []
    for i in range(3):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps({"schema_version": 1, "kind": "check", "host": {"hostname": f"h{i}"}, "findings": []}))
        paths.append(str(p))
    code, out, err = run("compare", *paths)
    # documents this bare are not check reports by the published schema (no tool, no run, a
    # number for schema_version): each is refused by name, and the comparison is never OK
    assert code == 2 and all(f"r{i}.json" in out + err for i in range(3)) and "not a valid ccdiag report" in out + err
