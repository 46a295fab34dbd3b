"""Mutations of the real captures (byte flips, dropped/duplicated lines, truncation, huge numbers, very
long lines) never make a benchparse parser raise anything but BenchParseError. Bounded: a few hundred
examples in all, seconds on 2 cores."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccdiag.benchparse import BenchParseError, detect, parse_any, parse_bandwidth_test, parse_nccl_tests
from ccdiag.benchparse import parse_nvbandwidth, parse_p2plat, parse_perftest

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = []
for sub, base in (("nvbandwidth", "corpus"), ("nccl-tests", "corpus"), ("perftest", "corpus"),
                  ("nvbandwidth", "synth"), ("nccl-tests", "synth"), ("perftest", "synth")):
    d = os.path.join(HERE, "fixtures", base, sub)
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), encoding="utf-8") as f:
            SEEDS.append(f.read())
# the real outputs the newer readers were written for: bandwidthTest, multi-node nvbandwidth, header-less
# nccl-tests tails, perftest's BW min column (the "#ccdiag-" provenance lines kept: they are input too)
REAL = os.path.join(HERE, "fixtures", "realcases")
for name in sorted(os.listdir(REAL)):
    if name.startswith("bandwidthTest-") or "multinode" in name or "headerless" in name or "bw-min" in name:
        with open(os.path.join(REAL, name), encoding="utf-8") as f:
            SEEDS.append(f.read())

PARSERS = (parse_nvbandwidth, parse_p2plat, parse_nccl_tests, parse_perftest, parse_bandwidth_test, parse_any, detect)


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(SEEDS))
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("flip", "drop", "dup", "truncate", "huge", "long", "splice", "swap")))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if not lines:
            lines = [""]
        if op == "flip":
            line = lines[i]
            if line:
                j = draw(st.integers(0, len(line) - 1))
                lines[i] = line[:j] + draw(st.characters(codec="utf-8")) + line[j + 1:]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "truncate":
            cut = "\n".join(lines)
            lines = cut[:draw(st.integers(0, len(cut)))].split("\n")
        elif op == "huge":
            toks = lines[i].split(" ")
            k = draw(st.integers(0, len(toks) - 1))
            toks[k] = draw(st.sampled_from(("9" * 25, "1e308", "1e999", "-0", "nan", "inf", "N/A", "9" * 5000)))
            lines[i] = " ".join(toks)
        elif op == "long":
            lines[i] = lines[i] + draw(st.sampled_from((" ", "\t", "0 ", "x", "["))) * draw(st.integers(100, 70000))
        elif op == "splice":
            lines[i] = lines[i][: len(lines[i]) // 2] + lines[(i + 1) % len(lines)][len(lines[(i + 1) % len(lines)]) // 2:]
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@settings(max_examples=int(os.environ.get("BENCHPARSE_FUZZ_EXAMPLES", 150)), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(text=mutated())
def test_only_benchparse_error_or_result(parser, text):
    try:
        result = parser(text)
    except BenchParseError as e:
        assert e.line_no >= 1 and str(e).startswith("line ")
        return
    assert result is not None


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(text=st.text(max_size=2000))
def test_arbitrary_text(text):
    for parser in PARSERS:
        try:
            parser(text)
        except BenchParseError:
            pass
