"""Parse time of the text parsers against input size: is each one linear?

    python bench/bench_parsers.py [--max-bytes 1000000] [--repeat 3]

Why: every parser here reads text a user pasted or a script collected, so its time must grow linearly
with the input whatever the input is; a quadratic step hides until someone imports a 1 MB log. For
each parser an input is grown from a real corpus file (its table rows, testcase blocks, log lines or
matrix repeated, or a matrix widened with the file's own cell values) to sizes from ~10 KB to
``--max-bytes``; the best of ``--repeat`` timings per size is kept, and the least-squares slope of
log(time) over log(bytes) is reported: ~1.0 is linear, ~2.0 quadratic. Writes
bench/results/parsers.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ccdiag.benchparse import parse_bandwidth_test, parse_nccl_tests, parse_nvbandwidth, parse_p2plat  # noqa: E402
from ccdiag.benchparse import parse_perftest  # noqa: E402
from ccdiag.nccl.logread import parse_nccl_log  # noqa: E402
from ccdiag.probes.smi_topo import parse_topo_matrix, parse_topo_p2p  # noqa: E402

CORPUS = os.path.join(REPO, "tests", "fixtures", "corpus")
REAL = os.path.join(REPO, "tests", "fixtures", "realcases")
RESULTS = os.path.join(REPO, "bench", "results", "parsers.json")


def read(rel: str, base: str = CORPUS) -> str:
    with open(os.path.join(base, rel), encoding="utf-8") as f:
        return f.read()


def body(text: str) -> list[str]:
    return [l for l in text.split("\n") if not l.startswith("#ccdiag-")]


def grow_repeat_lines(head: list[str], unit: list[str], tail: list[str], size: int, renumber=None) -> str:
    """head + unit repeated until ``size`` bytes + tail; ``renumber(unit, k)`` varies each copy."""
    out, n, k = list(head), sum(len(l) + 1 for l in head + tail), 0
    while n < size:
        u = renumber(unit, k) if renumber else unit
        out.extend(u)
        n += sum(len(l) + 1 for l in u)
        k += 1
    return "\n".join(out + tail) + "\n"


def nccl_tests_input(size: int) -> str:
    lines = body(read("nccl-tests/all_reduce_perf-2node-16x-h200-oci-rdma.txt"))
    first = next(i for i, l in enumerate(lines) if l.startswith("  1073741824"))
    last = next(i for i, l in enumerate(lines) if l.startswith("# Out of bounds"))
    return grow_repeat_lines(lines[:first], lines[first:last], lines[last:], size)


def nvbandwidth_input(size: int) -> str:
    lines = body(read("nvbandwidth/nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt"))
    start = next(i for i, l in enumerate(lines) if l.startswith("Running "))
    unit = lines[start:]

    def rename(u, k):
        return [l.replace("device_to_device_memcpy_read_ce", f"device_to_device_memcpy_read_ce_{k}") for l in u]

    return grow_repeat_lines(lines[:start], unit, [], size, rename)


def p2plat_input(size: int) -> str:
    lines = body(read("nvbandwidth/p2pBandwidthLatencyTest-h100-pcie-x2-nvlink-bridge.txt"))
    return grow_repeat_lines([], lines, [], size)


def perftest_input(size: int) -> str:
    lines = body(read("perftest/ib_write_bw-a-mlx5_0-hdr-ib-client-MBps-tabs-cpu-freq-warnings.txt"))
    first = next(i for i, l in enumerate(lines) if l.startswith("Conflicting"))
    last = len(lines) - 1 - next(i for i, l in enumerate(reversed(lines)) if l.startswith("-----"))
    return grow_repeat_lines(lines[:first], lines[first:last], lines[last:], size)


def bandwidth_test_input(size: int) -> str:
    """A shmoo-long host-to-device table: the real 2080 Ti output's row repeated with growing sizes."""
    lines = body(read("bandwidthTest-rtx2080ti-gbs-half-of-gen3-x16.txt", REAL))
    row = next(i for i, l in enumerate(lines) if l.strip().startswith("32000000"))

    def resize(u, k):
        return [f"   {1024 * (k + 1):<28} 7.8"]

    return grow_repeat_lines(lines[:row], [lines[row]], lines[row + 1:], size, resize)


def nccl_tests_headerless_input(size: int) -> str:
    """A header-less tail (kubectl logs --tail): the GB200 rows repeated, read from fixed columns."""
    lines = body(read("nccl-tests-headerless-tail-gb200-nvl-2tray-kubectl-logs-healthy.txt", REAL))
    rows = [l for l in lines if l[:12].strip().isdigit()]
    return grow_repeat_lines(lines[:1], rows, [], size)


def perftest_bw_min_input(size: int) -> str:
    """The RoCE GB200 client's table with perftest's BW min column, its row repeated."""
    lines = body(read("perftest-ib_write_bw-gb200-roce-bw-min-column-cuda-dmabuf-client.txt", REAL))
    head = next(i for i, l in enumerate(lines) if "BW min" in l)
    last = len(lines) - 1 - next(i for i, l in enumerate(reversed(lines)) if l.startswith("-----"))
    return grow_repeat_lines(lines[:head + 1], lines[head + 1:last], lines[last:], size)


def nvbandwidth_multinode_input(size: int) -> str:
    """Multi-node nvbandwidth (process lines): its testcase blocks repeated under new names."""
    lines = body(read("nvbandwidth-multinode-gb200-2tray-imex-dra-healthy.txt", REAL))
    start = next(i for i, l in enumerate(lines) if l.startswith("Running "))

    def rename(u, k):
        return [l.replace("multinode_", f"multinode{k}_") for l in u]

    return grow_repeat_lines(lines[:start], lines[start:], [], size, rename)


def logread_input(size: int) -> str:
    lines = body(read("nccl-log/2node-16rank-node2-trees-p2p-ipc-pxn-gdrdma-channels.txt"))
    return grow_repeat_lines([], lines, [], size)


def topo_m_input(size: int) -> str:
    """An N-GPU ``topo -m`` matrix (tab separated, as the real P100 capture) with N chosen for ``size``."""
    n = max(2, int(math.sqrt(size / 5)))
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"
    rows = ["GPU%d\t" % i + "\t".join(" X " if i == j else "NV2" for j in range(n)) + "\t0-11\t0" for i in range(n)]
    legend = body(read("topo-m/p100-sxm2-x2-nv2-rwth-c16g.txt"))
    start = next(i for i, l in enumerate(legend) if l.startswith("Legend"))
    return "\n".join([head] + rows + [""] + legend[start:]) + "\n"


def topo_p2p_input(size: int) -> str:
    n = max(2, int(math.sqrt(size / 8)))
    head = "        " + "".join(f"GPU{i}".ljust(8) for i in range(n))
    rows = [f" GPU{i}".ljust(8) + "".join(("X" if i == j else "CNS").ljust(8) for j in range(n)) for i in range(n)]
    return "\n".join(["$ nvidia-smi topo -p2p r", head] + rows) + "\n"


CASES = [
    ("benchparse.parse_nccl_tests", parse_nccl_tests, nccl_tests_input, "nccl-tests/all_reduce_perf-2node-16x-h200-oci-rdma.txt rows"),
    ("benchparse.parse_nvbandwidth", parse_nvbandwidth, nvbandwidth_input, "nvbandwidth-v0.4 H100 testcase block"),
    ("benchparse.parse_p2plat", parse_p2plat, p2plat_input, "p2pBandwidthLatencyTest H100 PCIe whole output"),
    ("benchparse.parse_perftest", parse_perftest, perftest_input, "ib_write_bw -a MB/sec rows"),
    ("benchparse.parse_bandwidth_test", parse_bandwidth_test, bandwidth_test_input, "bandwidthTest RTX 2080 Ti H2D rows"),
    ("benchparse.nccl_tests_headerless", parse_nccl_tests, nccl_tests_headerless_input, "GB200 header-less tail rows"),
    ("benchparse.perftest_bw_min", parse_perftest, perftest_bw_min_input, "ib_write_bw BW min (GB200 RoCE) rows"),
    ("benchparse.nvbandwidth_multinode", parse_nvbandwidth, nvbandwidth_multinode_input, "multi-node nvbandwidth GB200 testcases"),
    ("nccl.logread.parse_nccl_log", parse_nccl_log, logread_input, "nccl-log 2node-16rank log lines"),
    ("smi_topo.parse_topo_matrix", parse_topo_matrix, topo_m_input, "N-GPU topo -m built on the P100 capture's layout"),
    ("smi_topo.parse_topo_p2p", parse_topo_p2p, topo_p2p_input, "N-GPU topo -p2p r built on the L4 capture's layout"),
]


def slope(points: list[tuple[int, float]]) -> float:
    xs = [math.log(b) for b, _ in points]
    ys = [math.log(max(t, 1e-9)) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-bytes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--output", default=RESULTS)
    args = ap.parse_args()
    sizes = [int(10_000 * (args.max_bytes / 10_000) ** (k / 4)) for k in range(5)]
    out = []
    print(f"{'parser':32} {'bytes':>9} {'seconds':>9}   slope")
    for name, fn, grow, source in CASES:
        points = []
        for size in sizes:
            text = grow(size)
            best = math.inf
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fn(text)
                best = min(best, time.perf_counter() - t0)
            points.append((len(text.encode()), best))
        s = slope(points)
        for b, t in points:
            print(f"{name:32} {b:9d} {t:9.4f}")
        print(f"{name:32} {'':9} {'':9}   {s:.2f}{'  SUPER-LINEAR' if s > 1.3 else ''}")
        out.append({"parser": name, "grown_from": source, "loglog_slope": round(s, 3),
                    "sizes": [{"bytes": b, "seconds": round(t, 6)} for b, t in points]})
    result = {"benchmark": "parser_scaling", "repeat_best_of": args.repeat, "parsers": out,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    pathlib.Path(args.output).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
