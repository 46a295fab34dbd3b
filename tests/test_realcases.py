"""Real benchmark outputs that users pasted into public threads, docs and blogs
(tests/fixtures/realcases, each with its source, hardware and the cause the thread established; plus
the bench outputs of tests/fixtures/corpus), judged by `ccdiag bench import` with no snapshot of the
node they ran on: the verdict names the cause, stays quiet on healthy runs, or says UNKNOWN with its
reason. A sweep runs every file through every way of judging it and fails on an OK (exit 0) with no
figure judged. The table of these cases, with main's verdict before, is docs/realcases-bench-import.md."""

from __future__ import annotations

import json
import pathlib
import re

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
    # bandwidthTest: host copies held to the GPU's PCIe link; NUMA from the runs' numactl bindings
    "realcases/bandwidthTest-gearshifft82-p100-pcie-numa-remote-node-3x-slower.txt":
        (1, ("bench.h2d.numa", "NUMA node 1"), ()),
    "realcases/bandwidthTest-v100-sxm2-16gb-install-guide-healthy-tabs.txt": (0, None, ()),
    "realcases/bandwidthTest-rtx2080ti-gbs-half-of-gen3-x16.txt": (1, ("bench.h2d.slow", "trained down"), ()),
    "realcases/bandwidthTest-gtx1080ti-windows-demo-suite-unknown-part.txt":
        (3, ("bench.import.unjudged", "GeForce GTX 1080 Ti"), ()),
    "realcases/bandwidthTest-tesla-k80-mbs-chinese-notes-healthy.txt": (3, ("bench.import.unjudged", "Tesla K80"), ()),
    "realcases/bandwidthTest-tesla-k20c-cuda8-install-notes-mbs.txt": (3, ("bench.import.unjudged", "Tesla K20c"), ()),
    "realcases/bandwidthTest-quadro-rtx5000-frontera-gbs-no-banner.txt":
        (3, ("bench.import.unjudged", "Quadro RTX 5000"), ()),
    "realcases/bandwidthTest-rtx3070ti-laptop-gbs-blog-tabs.txt":
        (3, ("bench.import.unjudged", "RTX 3070 Ti Laptop"), ()),
    # multi-node nvbandwidth named by its process lines
    "realcases/nvbandwidth-multinode-gb200-2tray-imex-dra-healthy.txt": (0, None, ()),
    "realcases/nvbandwidth-39-multinode-h200-single-node-cumemcreate-not-permitted.txt":
        (3, ("bench.nvbandwidth.error", "IMEX"), ()),
    # nccl-tests: a tail without its header, a job that was no job, a run that failed, DGX Spark's link
    "realcases/nccl-tests-headerless-tail-gb200-nvl-2tray-kubectl-logs-healthy.txt":
        (3, ("bench.import.unjudged", "several nodes"), ()),
    "realcases/nccl-tests-nccl644-v2-headerless-tail-mpirun-binding-5gbs.txt":
        (3, ("bench.import.unjudged", "names no GPU or rank"), ()),
    "realcases/nccl-tests-17-v1-two-hosts-both-rank0-not-built-with-mpi.txt":
        (1, ("bench.nccl.not_one_job", "did not join one job"), ()),
    "realcases/nccl-tests-287-one-rtx5090-single-rank-busbw-zero.txt": (3, ("bench.import.unjudged", "single GPU"), ()),
    "realcases/nccl-tests-287-two-rtx5090-shm-cuda-failure-before-first-row.txt":
        (1, ("bench.nccl.failed", "Test NCCL failure"), ()),
    "realcases/nccl-tests-dgx-spark-pair-all_gather-16g-healthy-near-200g.txt": (0, None, ()),
    # GeForce peer access: a generic name lists every cause that fits, a named one names the driver
    "realcases/p2plat-nccl-tests287-rtx5090-named-graphics-device-cannot-access-peer.txt":
        (0, ("bench.p2p.no_peer_access", "GeForce"), ()),
    "realcases/p2plat-nccl-tests117-rtx2080ti-x8-cannot-access-peer-lines-only.txt":
        (3, ("bench.p2p.no_peer_access", "RTX-2080-Ti"), ()),
    # RoCE perftest: the port rate is not in the file; BW min printed but never measured
    "realcases/perftest-ib_write_bw-gb200-roce-bw-min-column-cuda-dmabuf-client.txt":
        (3, ("bench.rdma.bw_min", "no window of --report-min-bw iterations was measured"), ()),
    "realcases/perftest-ib_write_bw-roce-rdma_cm-oci-oke-100g-4qp-client.txt": (3, ("bench.import.unjudged", "port rate"), ()),
}
#: real outputs refused as they should be: (file, words of the refusal)
REFUSED = {"realcases/perftest-ib_write_bw-roce-rdma_cm-oci-oke-server-waiting-no-results.txt": "import the client's output",
           "corpus/perftest/ib_read_lat-mlx4-fdr-ib-server-side-no-results.txt": "import the client's output"}


def imported(path, *extra):
    code, out, err = run("bench", "import", str(path), "--json", *extra)
    assert "Traceback" not in err and code != 4, err
    return code, (json.loads(out) if out.strip() else None), err


def test_at_least_fifty_real_outputs_each_with_source_cause_and_verdict():
    files = sorted(REAL.glob("*.txt"))
    corpus = [p for d in ("nvbandwidth", "nccl-tests", "perftest") for p in (CORPUS / d).glob("*.txt")]
    assert len(files) + len(corpus) >= 50
    asserted = {name.split("/", 1)[1] for name in list(CASES) + list(REFUSED) if name.startswith("realcases/")}
    assert {f.name for f in files} <= asserted, "a real case without its asserted verdict"
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
    hits = [f for f in findings if f["check"] == check and words in (f["summary"] + (f.get("remedy") or "")
                                                                      + json.dumps(f["details"]))]
    assert hits, [(f["check"], f["summary"]) for f in findings]


@pytest.mark.parametrize("name", sorted(REFUSED), ids=lambda n: n.split("/")[-1][:50])
def test_real_outputs_without_results_are_refused_naming_the_line(name):
    code, out, err = run("bench", "import", str(TESTS / "fixtures" / name))
    assert code == 2 and "line " in err and REFUSED[name] in err, err


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


def _edited(tmp_path, name, old, new, label):
    """A real output with one figure edited (SYNTHESIZED from real data: the edit is the point)."""
    text = (REAL / name).read_text()
    assert old in text
    f = tmp_path / f"{label}-SYNTHESIZED-from-{name}"
    f.write_text(text.replace(old, new))
    return f


def test_multinode_nvbandwidth_is_held_to_the_gpus_its_process_lines_name(tmp_path):
    """The GB200 trays' process lines name the GPUs: 798 GB/s passes at 89 % of 18 NVLink5 links, and the
    same file with every figure halved fails, although its pairs still agree with each other."""
    name = "nvbandwidth-multinode-gb200-2tray-imex-dra-healthy.txt"
    _, doc, _ = imported(REAL / name)
    ms = doc["bench"][0]["measurements"]
    assert len(ms) == 56 and all(m["expected"]["gbyte_s"] == 900.0 and m["status"] == "pass" for m in ms)
    assert "multi-node" in doc["bench"][0]["params"]["read_as"]
    text = (REAL / name).read_text()
    halved = re.sub(r"\b(79[78]\.[0-9]{2})\b", lambda m: f"{float(m.group(1)) / 2:.2f}", text)
    f = tmp_path / "halved-SYNTHESIZED.txt"
    f.write_text(halved)
    code, doc, _ = imported(f)
    assert code == 1 and all(m["status"] == "fail" for m in doc["bench"][0]["measurements"])


def test_dgx_spark_pair_is_held_to_its_connectx7_link(tmp_path):
    """Two DGX Sparks: all_gather busbw near 21 GB/s passes against the 25 GB/s of the built-in 200 Gb/s
    ConnectX-7; the same run at 2.8 GB/s (the ~3 GB/s plateau of NVIDIA/dgx-spark-playbooks#102, whose
    paste is not at hand: SYNTHESIZED by editing the healthy figure) fails naming the link and the causes
    that thread and its pull request established (one of the port's two x4 halves carrying the data,
    the NCCL build, the MTU), then a marginal cable."""
    name = "nccl-tests-dgx-spark-pair-all_gather-16g-healthy-near-200g.txt"
    code, doc, _ = imported(REAL / name)
    m = doc["bench"][0]["measurements"][0]
    assert code == 0 and m["expected"]["gbyte_s"] == 25.0 and "DGX-Spark" in m["expected"]["source"]
    bad = _edited(tmp_path, name, "37.87   18.94       0   410049   41.90   20.95",
                  "37.87    2.80       0   410049   41.90    2.81", "cable")
    code, doc, _ = imported(bad)
    f = next(f for f in doc["findings"] if f["check"] == "bench.nccl")
    assert code == 1 and f["status"] == "fail" and "ConnectX-7 200 Gb/s" in f["summary"]
    for cause in ("NCCL_IB_HCA", "dgx-spark-playbooks#102", "3.04 GB/s", "MTU", "FEC"):
        assert cause in f["remedy"], cause
    assert f["remedy"].index("NCCL_IB_HCA") < f["remedy"].index("FEC")


def test_a_generically_named_gpu_gets_every_cause_then_geforce_first_with_its_pci_id():
    name = REAL / "p2plat-nccl-tests287-rtx5090-named-graphics-device-cannot-access-peer.txt"
    _, doc, _ = imported(name)
    f = next(f for f in doc["findings"] if f["check"] == "bench.p2p.no_peer_access")
    assert "NVIDIA Graphics Device" in f["summary"] and all(w in f["summary"] for w in ("GeForce", "ACS", "IOMMU", "VM"))
    assert "--gpu-pci-id" in f["remedy"]
    for given in ("0x2b85", "10de:2b85", "[10de:2b85]"):  # as typed, or as lspci -nn prints it
        _, doc, _ = imported(name, "--gpu-pci-id", given)
        f = next(f for f in doc["findings"] if f["check"] == "bench.p2p.no_peer_access")
        assert "RTX-5090" in f["summary"] and "(first cause)" in f["summary"], given


def test_bandwidthtest_numa_names_the_far_node_and_the_gpus_node():
    _, doc, _ = imported(REAL / "bandwidthTest-gearshifft82-p100-pcie-numa-remote-node-3x-slower.txt")
    numa = [f for f in doc["findings"] if f["check"] == "bench.h2d.numa"]
    assert {f["summary"].split(" ")[1] for f in numa} == {"h2d", "d2h"}
    assert all("NUMA node 1" in f["summary"] and "on node 0" in f["summary"] for f in numa)
    assert "numactl --cpunodebind=0 --membind=0" in numa[0]["remedy"]
    ms = {m["extra"]["run"]: m for m in doc["bench"][0]["measurements"] if m["bench"] == "h2d"}
    assert ms[0]["status"] == "pass" and ms[1]["status"] == "fail"
    assert ms[0]["gbyte_s"] == pytest.approx(12150.7 * 2 ** 20 / 1e9, abs=1e-3)  # MB/s of old samples: MiB/s


def test_several_files_are_compared_with_each_other(tmp_path):
    """Three nodes' bandwidthTest files: the one far below the others is named, though the catalogue does
    not know the part (SYNTHESIZED from a real K80 output by editing its figures)."""
    name = "bandwidthTest-tesla-k80-mbs-chinese-notes-healthy.txt"
    files = [str(REAL / name), str(_edited(tmp_path, name, "11324.0", "11290.2", "node2")),
             str(_edited(tmp_path, name, "11324.0", "2901.5", "node3"))]
    code, out, err = run("bench", "import", *files, "--json")
    doc = json.loads(out)
    bad = [f for f in doc["findings"] if f["check"] == "bench.import.file_outlier"]
    assert code == 1 and len(bad) == 1 and "node3" in bad[0]["component"]["name"]


def test_a_headerless_tail_says_how_its_columns_were_read():
    _, doc, _ = imported(REAL / "nccl-tests-headerless-tail-gb200-nvl-2tray-kubectl-logs-healthy.txt")
    m = doc["bench"][0]["measurements"][0]
    assert "no table header: columns read as size count type redop root" in m["note"]
    assert m["gbyte_s"] == pytest.approx(847.42) and m["size_bytes"] == 34359738368
    assert "8 ranks" in m["src"] and "2 node(s)" in m["dst"]


def test_the_report_says_which_tool_version_and_format_it_read():
    code, out, _ = run("bench", "import", str(REAL / "perftest-ib_write_bw-gb200-roce-bw-min-column-cuda-dmabuf-client.txt"))
    assert "read as perftest pr214-report-min-bw, bandwidth table with a sixth column, BW min" in out


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
