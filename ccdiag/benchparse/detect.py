"""Which tool wrote a file, so ``ccdiag bench import FILE`` takes any of them.

Each tool has lines no other prints (its banner, its table header, its JSON keys); the first such
marker decides. Linear: one pass over the lines, substring tests only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ccdiag.benchparse import _text
from ccdiag.benchparse.bandwidthtest import parse_bandwidth_test
from ccdiag.benchparse.errors import BenchParseError
from ccdiag.benchparse.nccltests import has_table_row, parse_nccl_tests
from ccdiag.benchparse.nvbandwidth import parse_nvbandwidth
from ccdiag.benchparse.p2plat import parse_p2plat
from ccdiag.benchparse.perftest import parse_perftest

KINDS = ("nvbandwidth", "p2plat", "nccl-tests", "perftest", "bandwidthTest")

#: (marker, kind), tried on each line in this order; text markers
_TEXT_MARKERS = (
    ("nvbandwidth Version:", "nvbandwidth"),
    ("Bandwidth Test] - Starting...", "bandwidthTest"),
    ("Transfer Size (Bytes)", "bandwidthTest"),
    ("bandwidthTest-H2D", "bandwidthTest"),
    ("bandwidthTest-D2H", "bandwidthTest"),
    ("bandwidthTest-D2D", "bandwidthTest"),
    ("[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]", "p2plat"),
    ("P2P Connectivity Matrix", "p2plat"),
    ("P2P=Disabled Bandwidth", "p2plat"),
    ("P2P=Enabled Bandwidth", "p2plat"),  # a paste of one matrix only
    ("# nThread ", "nccl-tests"),
    ("# Collective test starting:", "nccl-tests"),
    ("# Avg bus bandwidth", "nccl-tests"),
    ("#bytes", "perftest"),
    ("* Waiting for client to connect... *", "perftest"),
    ("# nccl-tests version", "nccl-tests"),
    ("Out of bounds values :", "nccl-tests"),
    ("BW Test", "perftest"),
    ("Latency Test", "perftest"),
    ("(GB/s)", "nvbandwidth"),  # "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
)
#: JSON documents: a key only that tool writes
_JSON_MARKERS = (('"nvbandwidth"', "nvbandwidth"), ('"test_info"', "perftest"), ('"nccl_version"', "nccl-tests"),
                 ('"average_bus_bandwidth"', "nccl-tests"), ('"results"', "nccl-tests"))
_PARSERS: dict[str, Callable[[str], object]] = {
    "nvbandwidth": parse_nvbandwidth, "p2plat": parse_p2plat, "nccl-tests": parse_nccl_tests,
    "perftest": parse_perftest, "bandwidthTest": parse_bandwidth_test}
#: a multi-node nvbandwidth's device lines: "Process 0 (host): device 0: NAME"
_PROCESS = re.compile(r"^\s*Process +[0-9]{1,6} \(.{1,300}\): device [0-9]{1,5}: ")


def detect(text: str) -> str:
    """One of :data:`KINDS`; :class:`BenchParseError` (naming the first line) when no tool's marker is there."""
    numbered = _text.lines(text)
    if _text.looks_like_json(numbered):
        for marker, kind in _JSON_MARKERS:
            for _, line in numbered:
                if marker in line:
                    return kind
        if any(line.strip().startswith("test_info:") for _, line in numbered[:4]):
            return "perftest"  # --out_json of perftest v4.5-0.11 to 23.10 (keys without quotes)
    else:
        for _, line in numbered:
            if "(row)" in line and "(GB/s)" in line or _PROCESS.match(line):
                return "nvbandwidth"
            for marker, kind in _TEXT_MARKERS:
                if marker in line:
                    if kind == "nvbandwidth" and marker == "(GB/s)" and "(row)" not in line and "(column)" not in line:
                        continue
                    return kind
        if has_table_row(numbered):
            return "nccl-tests"  # a tail of its table without the header (its columns are fixed)
    n, line = _text.first_line(numbered)
    raise BenchParseError("not the output of nvbandwidth, p2pBandwidthLatencyTest, nccl-tests, perftest or "
                          "bandwidthTest (none of their banners, table headers, JSON keys or rows)", n, line)


def parse_any(text: str) -> object:
    """The result of the parser :func:`detect` picks (``NvbResult``, ``P2PLatResult``, ``NcclTestsResult``,
    ``PerftestResult`` or ``BandwidthTestResult``)."""
    return _PARSERS[detect(text)](text)
