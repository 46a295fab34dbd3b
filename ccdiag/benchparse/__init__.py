"""Parsers for benchmark outputs users already have: nvbandwidth, p2pBandwidthLatencyTest, nccl-tests,
perftest, bandwidthTest. Each is a pure function of text returning a frozen dataclass, or raising
:class:`BenchParseError` naming the line; :func:`detect` / :func:`parse_any` pick the parser. The
formats each reads, derived from the tools' print code, are listed in ``formats.json``
(:mod:`ccdiag.benchparse.formats`)."""

from ccdiag.benchparse.bandwidthtest import parse_bandwidth_test
from ccdiag.benchparse.detect import KINDS, detect, parse_any
from ccdiag.benchparse.errors import BenchParseError
from ccdiag.benchparse.nccltests import parse_nccl_tests
from ccdiag.benchparse.nvbandwidth import parse_nvbandwidth
from ccdiag.benchparse.p2plat import parse_p2plat
from ccdiag.benchparse.perftest import parse_perftest

__all__ = ["KINDS", "BenchParseError", "detect", "parse_any", "parse_bandwidth_test", "parse_nccl_tests",
           "parse_nvbandwidth", "parse_p2plat", "parse_perftest"]
