"""Parsers for benchmark outputs users already have: nvbandwidth, p2pBandwidthLatencyTest, nccl-tests,
perftest. Each is a pure function of text returning a frozen dataclass, or raising
:class:`BenchParseError` naming the line; :func:`detect` / :func:`parse_any` pick the parser."""

from ccdiag.benchparse.errors import BenchParseError

__all__ = ["BenchParseError"]
