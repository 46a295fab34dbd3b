"""ccdiag.benchparse: every real capture in tests/fixtures/corpus/{nvbandwidth,nccl-tests,perftest}
parses (exact values read from the file) or is refused naming its line; synthesized JSON (see
tests/fixtures/synth/README.md); damaged inputs refused with BenchParseError only."""

from __future__ import annotations

import os

import pytest

from ccdiag.benchparse import (BenchParseError, detect, parse_any, parse_nccl_tests, parse_nvbandwidth, parse_p2plat,
                               parse_perftest)
from ccdiag.benchparse.errors import MAX_BYTES, MAX_LINE

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "fixtures", "corpus")
SYNTH = os.path.join(HERE, "fixtures", "synth")


def read(*parts: str) -> str:
    with open(os.path.join(*parts), encoding="utf-8") as f:
        return f.read()


# every file of the three corpus directories: (subdir, file, kind, outcome) - outcome "ok" or the refusal's line
CORPUS_FILES = [
    ("nvbandwidth", "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt", "nvbandwidth", "ok"),
    ("nvbandwidth", "p2pBandwidthLatencyTest-h100-pcie-x2-nvlink-bridge.txt", "p2plat", "ok"),
    ("nvbandwidth", "p2pBandwidthLatencyTest-rtx2080ti-x2-cannot-access-peer.txt", "p2plat", "ok"),
    ("nccl-tests", "all_reduce_perf-1node-8x-a100-sxm4-40g-new-header-format.txt", "nccl-tests", "ok"),
    ("nccl-tests", "all_reduce_perf-2node-16x-a100-sxm4-40g-oci-roce-10G.txt", "nccl-tests", "ok"),
    ("nccl-tests", "all_reduce_perf-2node-16x-h200-oci-rdma.txt", "nccl-tests", "ok"),
    ("nccl-tests", "alltoall_perf-2node-4x-h20-3e-vm-roce-bond-tencent-rdma-plugin-interleaved-nccl-info.txt",
     "nccl-tests", "ok"),
    ("perftest", "ib_read_lat-mlx4-fdr-ib-server-side-no-results.txt", "perftest", 6),
    ("perftest", "ib_write_bw-a-mlx5_0-hdr-ib-client-MBps-tabs-cpu-freq-warnings.txt", "perftest", "ok"),
    ("perftest", "ib_write_bw-use_cuda-t4-roce-sriov-client.txt", "perftest", "ok"),
    ("perftest", "ib_write_bw-use_cuda-t4-roce-sriov-server.txt", "perftest", "ok"),
    ("perftest", "ib_write_lat-a-mlx5_0-hdr-ib-client-all-sizes-tabs-cpu-freq-warnings.txt", "perftest", "ok"),
]


def test_table_covers_every_corpus_file():
    listed = {(d, f) for d, f, _, _ in CORPUS_FILES}
    present = {(d, f) for d in ("nvbandwidth", "nccl-tests", "perftest") for f in os.listdir(os.path.join(CORPUS, d))}
    assert listed == present


@pytest.mark.parametrize("subdir,name,kind,outcome", CORPUS_FILES)
def test_corpus_file_parses_or_is_refused(subdir, name, kind, outcome):
    text = read(CORPUS, subdir, name)
    assert detect(text) == kind
    if outcome == "ok":
        assert parse_any(text) is not None
    else:
        with pytest.raises(BenchParseError) as e:
            parse_any(text)
        assert e.value.line_no == outcome
        assert f"line {outcome}:" in str(e.value)


# ---- nvbandwidth -------------------------------------------------------------------------------
def test_nvbandwidth_h100_values():
    r = parse_nvbandwidth(read(CORPUS, "nvbandwidth", "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt"))
    assert (r.version, r.git_version, r.driver_version) == ("v0.4", "v0.4.2-12-g8857188", "570.133.20")
    assert (r.cuda_runtime_version, r.cuda_driver_version) == (12020, 12080)
    assert r.devices == {i: "NVIDIA H100 80GB HBM3" for i in range(8)}
    t = r.testcases["device_to_device_memcpy_read_ce"]
    m = t.matrix
    assert t.status == "Passed" and t.sum_gbyte_s == 20785.58
    assert (m.row_device, m.column_device, m.direction) == ("GPU", "GPU", "row_to_column")
    assert m.column_labels == tuple(str(i) for i in range(8))
    assert m.cell(0, 0) is None and m.cell(2, 0) == 372.05 and m.cell(7, 6) == 370.90
    assert m.latency_us is None and len(m.bandwidth_gbyte_s) == 8


def test_nvbandwidth_json_synth():
    r = parse_nvbandwidth(read(SYNTH, "nvbandwidth", "nvbandwidth-j-from-h100-capture.json"))
    assert r.format == "json" and r.version == "v0.4" and r.cuda_runtime_version == 12020
    m = r.testcases["device_to_device_memcpy_read_ce"].matrix
    assert m.cell(2, 0) == 372.05 and m.cell(3, 3) is None and m.sum_gbyte_s == 20785.58
    assert r.testcases["host_to_device_memcpy_sm"].status == "Waived"
    assert r.testcases["host_to_device_memcpy_sm"].matrix is None


def test_nvbandwidth_host_case_latency_and_waived():
    text = ("nvbandwidth Version: v0.8\nRunning host_to_device_memcpy_ce.\n"
            "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n           0         1\n 0     55.10     N/A\n\n"
            "SUM host_to_device_memcpy_ce 55.10\n\nRunning device_to_device_latency_sm.\n"
            "Device to Device Latency SM GPU(row) <-> GPU(column) (ns)\n           0         1\n"
            " 0       N/A   1500.00\n 1   1600.00       N/A\n\nSUM device_to_device_latency_sm 3100.00\n"
            "Running host_to_device_memcpy_sm.\nWaived: not supported\n")
    r = parse_nvbandwidth(text)
    h = r.testcases["host_to_device_memcpy_ce"].matrix
    assert (h.row_device, h.column_device, h.bandwidth_gbyte_s) == ("CPU", "GPU", ((55.10, None),))
    lat = r.testcases["device_to_device_latency_sm"].matrix
    assert lat.latency_us == ((None, 1.5), (1.6, None)) and lat.sum_latency_us == 3.1 and lat.direction == "both"
    assert r.testcases["host_to_device_memcpy_sm"].status == "Waived"


# ---- p2pBandwidthLatencyTest -------------------------------------------------------------------
def test_p2plat_h100_nvlink_bridge_values():
    r = parse_p2plat(read(CORPUS, "nvbandwidth", "p2pBandwidthLatencyTest-h100-pcie-x2-nvlink-bridge.txt"))
    assert [(d.index, d.name, d.pci_bus_id) for d in r.devices] == [(0, "NVIDIA H100 PCIe", "c2"),
                                                                    (1, "NVIDIA H100 PCIe", "d5")]
    assert r.peer_access == {(0, 1): True, (1, 0): True} and r.connectivity == ((1, 1), (1, 1))
    assert r.unidir_p2p_enabled_gbyte_s[0][1] == 256.62 and r.unidir_p2p_disabled_gbyte_s[1][0] == 25.00
    assert r.bidir_p2p_enabled_gbyte_s[0][1] == 509.35 and r.bidir_p2p_disabled_gbyte_s[1][1] == 1671.85
    assert r.gpu_latency_p2p_disabled_us[0][1] == 16.59 and r.cpu_latency_p2p_enabled_us[1][0] == 1.75
    assert r.p2p_mode == "P2P Writes"


def test_p2plat_rtx2080ti_cannot_access_peer():
    r = parse_p2plat(read(CORPUS, "nvbandwidth", "p2pBandwidthLatencyTest-rtx2080ti-x2-cannot-access-peer.txt"))
    assert r.pairs_without_peer_access() == ((0, 1), (1, 0))
    assert r.connectivity == ((1, 0), (0, 1))
    assert r.unidir_p2p_enabled_gbyte_s[0][1] == 5.72 and r.gpu_latency_p2p_enabled_us[1][0] == 13.63
    assert r.cpu_latency_p2p_disabled_us[0][0] == 3.55


# ---- nccl-tests --------------------------------------------------------------------------------
def test_nccl_tests_new_header_format():
    r = parse_nccl_tests(read(CORPUS, "nccl-tests", "all_reduce_perf-1node-8x-a100-sxm4-40g-new-header-format.txt"))
    run = r.run
    assert run.collective == "all_reduce_perf" and run.avg_bus_bandwidth_gbyte_s == 232.167 and run.complete
    assert (run.n_ranks, run.n_nodes) == (8, 1)
    assert run.devices[0].bus_id == "0000:0f:00" and run.devices[7].name == "NVIDIA A100-SXM4-40GB"
    row = run.row(10737418240)
    assert row.out_of_place.busbw_gbyte_s == 232.20 and row.in_place.time_us == 80948 and row.root == -1
    assert run.out_of_bounds == 0 and r.wrong_rows == ()


def test_nccl_tests_two_nodes_roce():
    run = parse_nccl_tests(read(CORPUS, "nccl-tests", "all_reduce_perf-2node-16x-a100-sxm4-40g-oci-roce-10G.txt")).run
    assert run.avg_bus_bandwidth_gbyte_s == 220.921 and (run.n_ranks, run.n_nodes) == (16, 2)
    assert run.row(10737418240).in_place.busbw_gbyte_s == 218.96 and run.devices[8].host == "inst-swgen-comp"


def test_nccl_tests_h200_values():
    run = parse_nccl_tests(read(CORPUS, "nccl-tests", "all_reduce_perf-2node-16x-h200-oci-rdma.txt")).run
    assert run.nccl_version == "2.27.5+cuda12.8" and run.collective == "all_reduce_perf"
    assert [r.size_bytes for r in run.rows] == [1 << 30, 1 << 31, 1 << 32, 1 << 33, 1 << 34]
    assert run.row(4294967296).out_of_place.busbw_gbyte_s == 480.61
    assert run.avg_bus_bandwidth_gbyte_s == 476.572 and (run.min_bytes, run.max_bytes) == (1 << 30, 1 << 34)


def test_nccl_tests_interleaved_info_lines():
    run = parse_nccl_tests(read(CORPUS, "nccl-tests",
                                "alltoall_perf-2node-4x-h20-3e-vm-roce-bond-tencent-rdma-plugin-interleaved-nccl-info.txt")).run
    assert len(run.rows) == 13 and run.rows[0].size_bytes == 1048576 and run.rows[-1].size_bytes == 4294967296
    assert run.row(16777216).out_of_place.busbw_gbyte_s == 43.69
    assert run.rows[0].redop == "none" and run.rows[0].in_place.wrong is None and run.rows[0].out_of_place.wrong == 0
    assert run.avg_bus_bandwidth_gbyte_s is None and not run.complete  # the capture stops at 4 GiB
    assert run.nccl_version == "2.26.5+cuda12.2" and (run.n_ranks, run.n_nodes) == (4, 2)


def test_nccl_tests_json_synth_and_wrong_flag():
    r = parse_nccl_tests(read(SYNTH, "nccl-tests", "all_reduce_perf-J-v3-from-h200-capture.json"))
    run = r.run
    assert r.format == "json" and run.collective == "all_reduce_perf" and run.nccl_version == "2.27.5"
    assert run.avg_bus_bandwidth_gbyte_s == 476.572 and (run.n_ranks, run.n_nodes) == (16, 2)
    assert run.row(4294967296).out_of_place.busbw_gbyte_s == 480.61
    assert [w.size_bytes for w in r.wrong_rows] == [4294967296] and run.row(4294967296).in_place.wrong == 12


def test_nccl_tests_wrong_rows_and_per_iteration_and_old_header():
    text = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor)\n"
            "#  size  count  type  redop  root  time  algbw  busbw  #wrong  i_min  i_max  i_p99  i_cv%  "
            "time  algbw  busbw  #wrong  i_min  i_max  i_p99  i_cv%\n"
            "8  2  float  sum  -1  10.0  0.00  0.00  0  9.0  11.0  11.0  3.1  10.5  0.00  0.00  1e+06  9.5  12.0  12.0  2.0\n"
            "# Avg bus bandwidth    : 0.001 FAILED\n"
            "#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error\n"
            "16  4  float  sum  12.0  0.00  0.00  0e+00  12.0  0.00  0.00  0e+00\n")
    r = parse_nccl_tests(text)
    a, b = r.runs
    assert a.rows[0].in_place.wrong == 1000000 and a.rows[0].in_place.iter_p99_us == 12.0 and a.rows[0].wrong
    assert a.avg_bus_bandwidth_ok is False and b.rows[0].root is None and not b.rows[0].wrong


# ---- perftest ----------------------------------------------------------------------------------
def test_perftest_write_bw_mb_per_sec_is_mib():
    r = parse_perftest(read(CORPUS, "perftest", "ib_write_bw-a-mlx5_0-hdr-ib-client-MBps-tabs-cpu-freq-warnings.txt"))
    assert (r.kind, r.role, r.device, r.link_type, r.mtu_bytes, r.tx_depth) == ("bw", "client", "mlx5_0", "IB", 4096, 128)
    assert r.bw_unit == "MB/sec" and len(r.bw_rows) == 23 and r.cpu_freq_warnings == 23
    last = r.bw_rows[-1]
    assert last.size_bytes == 8388608 and last.iterations == 5000 and last.msg_rate_mpps == 0.002915
    assert last.bw_average_gbyte_s == pytest.approx(23317.65 * 1048576 / 1e9)
    assert (r.local_lid, r.remote_lid, r.rdma_cm) == ("0x40", "0x6e", False)


def test_perftest_use_cuda_client_gbits():
    r = parse_perftest(read(CORPUS, "perftest", "ib_write_bw-use_cuda-t4-roce-sriov-client.txt"))
    assert (r.command, r.use_cuda, r.cuda_device, r.cuda_device_name) == ("ib_write_bw", True, 0, "Tesla T4")
    assert (r.link_type, r.gid_index, r.mtu_bytes, r.rdma_cm) == ("Ethernet", 3, 1024, True)
    assert r.bw_unit == "Gb/sec" and r.bw_rows[0].bw_average_gbyte_s == pytest.approx(10.50 / 8)
    assert r.remote_gid == "00:00:00:00:00:00:00:00:00:00:255:255:192:168:04:225"
    assert len(r.warnings) == 2


def test_perftest_bw_server_side_with_rows_parses_as_server():
    r = parse_perftest(read(CORPUS, "perftest", "ib_write_bw-use_cuda-t4-roce-sriov-server.txt"))
    assert r.role == "server" and r.tx_depth is None and r.bw_rows[0].bw_peak_gbyte_s == pytest.approx(10.68 / 8)


def test_perftest_latency_all_sizes():
    r = parse_perftest(read(CORPUS, "perftest", "ib_write_lat-a-mlx5_0-hdr-ib-client-all-sizes-tabs-cpu-freq-warnings.txt"))
    assert r.kind == "lat" and len(r.lat_rows) == 23 and r.cpu_freq_warnings == 46
    first, last = r.lat_rows[0], r.lat_rows[-1]
    assert (first.size_bytes, first.t_min_us, first.t_typical_us, first.p99_9_us) == (2, 1.79, 1.87, 5.41)
    assert (last.t_avg_us, last.t_stdev_us, last.p99_us) == (348.34, 15.93, 441.71)


def test_perftest_server_side_latency_refused():
    with pytest.raises(BenchParseError, match="server-side.*client") as e:
        parse_perftest(read(CORPUS, "perftest", "ib_read_lat-mlx4-fdr-ib-server-side-no-results.txt"))
    assert e.value.line_no == 6 and "Waiting for client" in e.value.line


def test_perftest_json_synth_unit():
    text = read(SYNTH, "perftest", "ib_write_bw-out_json-from-t4-roce-client.json")
    assumed = parse_perftest(text)
    assert assumed.bw_unit_assumed and assumed.bw_rows[0].bw_average_gbyte_s == pytest.approx(10.50 * 1048576 / 1e9)
    told = parse_perftest(text, json_bw_unit="Gb/sec")
    assert not told.bw_unit_assumed and told.bw_rows[0].bw_average_gbyte_s == pytest.approx(10.50 / 8)
    assert (told.device, told.gid_index, told.cuda_device, told.tx_depth) == ("mlx5_4", 3, 0, 128)


# ---- damaged inputs ----------------------------------------------------------------------------
PARSERS = [parse_nvbandwidth, parse_p2plat, parse_nccl_tests, parse_perftest]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("text", ["", "\n\n", "garbage\x00\xff line\n", "{", "{\"a\": [" * 3 + "\n", "[" * 100000,
                                  "{}", "null", "# just a comment\n"])
def test_garbage_refused_naming_a_line(parser, text):
    with pytest.raises(BenchParseError) as e:
        parser(text)
    assert e.value.line_no >= 1 and str(e.value).startswith(f"line {e.value.line_no}:")


def test_detect_refuses_unknown():
    with pytest.raises(BenchParseError, match="line 1: not the output"):
        detect("hello\nworld\n")


@pytest.mark.parametrize("parser", PARSERS)
def test_bounds_named(parser):
    with pytest.raises(BenchParseError, match="MAX_LINE") as e:
        parser("ok\n" + "x" * (MAX_LINE + 1) + "\n")
    assert e.value.line_no == 2 and e.value.limit == "MAX_LINE"
    with pytest.raises(BenchParseError, match="MAX_BYTES") as e:
        parser(("y" * 1000 + "\n") * (MAX_BYTES // 1000 + 1))
    assert e.value.limit == "MAX_BYTES" and e.value.line_no > 16000


def test_truncated_nvbandwidth_matrix_keeps_rows_without_sum():
    text = read(CORPUS, "nvbandwidth", "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt")
    cut = text[:text.index("4    370.38")]
    m = parse_nvbandwidth(cut).testcases["device_to_device_memcpy_read_ce"].matrix
    assert len(m.bandwidth_gbyte_s) == 4 and m.sum_gbyte_s is None


def test_cut_line_refused_with_line():
    text = read(CORPUS, "nvbandwidth", "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt")
    damaged = text.replace("3    370.90    372.05    372.05       N/A    371.79", "3    370.90    372.05")
    with pytest.raises(BenchParseError, match="matrix row has") as e:
        parse_nvbandwidth(damaged)
    assert e.value.line.startswith("3    370.90")


def test_p2plat_truncated_matrix_refused():
    text = read(CORPUS, "nvbandwidth", "p2pBandwidthLatencyTest-rtx2080ti-x2-cannot-access-peer.txt")
    cut = text[:text.index("     1   5.72 532.54")]
    with pytest.raises(BenchParseError, match="expected row 1 of the matrix"):
        parse_p2plat(cut)


def test_nccl_tests_damaged_row_and_missing_header():
    text = read(CORPUS, "nccl-tests", "all_reduce_perf-2node-16x-h200-oci-rdma.txt")
    damaged = text.replace("8538.8  251.50  471.56      0", "8538.8  251.50")
    with pytest.raises(BenchParseError, match="table row has") as e:
        parse_nccl_tests(damaged)
    assert "2147483648" in e.value.line
    no_header = "\n".join(l for l in text.splitlines() if "#wrong" not in l)
    recovered = parse_nccl_tests(no_header).run  # a tail without its header: read from the fixed columns
    assert recovered.header_inferred and "size count type redop root" in recovered.header_inferred
    assert "nccl-tests.headerless" in recovered.format_ids
    assert [r.size_bytes for r in recovered.rows] == [r.size_bytes for r in parse_nccl_tests(text).run.rows]
    with pytest.raises(BenchParseError, match="no row"):
        parse_nccl_tests("\n".join(l for l in no_header.splitlines() if not l.strip()[:1].isdigit()))
    huge = text.replace("  1073741824     268435456", "  1073741824" + "9" * 30 + "     268435456")
    with pytest.raises(BenchParseError, match="not an integer"):
        parse_nccl_tests(huge)
    with pytest.raises(BenchParseError, match="out of range"):
        parse_nccl_tests(text.replace("457.90", "9e999"))


def test_perftest_header_without_rows_refused():
    text = read(CORPUS, "perftest", "ib_write_bw-use_cuda-t4-roce-sriov-client.txt")
    cut = text[:text.index(" 65536      5000")]
    with pytest.raises(BenchParseError, match="without rows"):
        parse_perftest(cut)


def test_json_errors_name_the_line():
    text = read(SYNTH, "nccl-tests", "all_reduce_perf-J-v3-from-h200-capture.json")
    with pytest.raises(BenchParseError, match="not valid JSON") as e:
        parse_nccl_tests(text.replace('"okay": true', '"okay": tru'))
    assert "tru" in e.value.line
    with pytest.raises(BenchParseError, match="not valid JSON"):
        parse_nccl_tests(text.replace("476.572", "NaN"))
