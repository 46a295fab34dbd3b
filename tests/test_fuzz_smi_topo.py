"""Property-based fuzzing of the ``nvidia-smi topo`` parsers, seeded from the real corpus.

Why: the parsers read what strangers paste. Whatever the text, a parser returns a result or
refuses with :class:`TopoParseError`; any other exception is a bug. Example counts are bounded so
this file runs in well under 30 s on 2 cores; bench/bench_fuzz.py runs the long version.
"""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccdiag.probes import kmsg
from ccdiag.probes.smi_topo import (
    TopoParseError, parse_topo_cpu_query, parse_topo_matrix, parse_topo_p2p, render_matrix, rows_for_table,
)

CORPUS = pathlib.Path(__file__).parent / "fixtures" / "corpus"


def _seed(path: pathlib.Path) -> str:
    return "".join(ln for ln in path.read_text(errors="replace").splitlines(True) if not ln.startswith("#ccdiag-"))


MATRICES = [_seed(p) for p in sorted((CORPUS / "topo-m").glob("*.txt")) if "topo-c" not in p.name]
P2P = [_seed(p) for p in sorted((CORPUS / "topo-p2p").glob("*.txt"))]
QUERIES = [_seed(p) for p in sorted((CORPUS / "topo-m").glob("topo-c*.txt"))]
JUNK = st.sampled_from(["\t", " ", "\n", "X", "NV18", "PXB", "SYS", "GPU0", "NIC0", "=", ",", "9" * 30,
                        "\x1b[31m", ". . .", "CPU Affinity", "Legend:", "NIC Legend:", "\u00b2", "\r"])


@st.composite
def mutated(draw, seeds):
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        p = draw(st.integers(0, len(text)))
        op = draw(st.integers(0, 5))
        if op == 0:
            text = text[:p] + draw(st.characters(max_codepoint=0x2FF)) + text[p + 1:]
        elif op == 1:
            text = text[:p] + text[p + draw(st.integers(1, 30)):]
        elif op == 2:
            text = text[:p] + draw(JUNK) * draw(st.sampled_from([1, 3, 400])) + text[p:]
        elif op == 3:
            text = text[:p]
        elif op == 4:
            text = text.expandtabs(8)
        else:
            q = min(len(text), p + draw(st.integers(1, 120)))
            text = text[:q] + text[p:q] * draw(st.integers(1, 3)) + text[q:]
    return text


SETTINGS = settings(max_examples=250, deadline=2000, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(mutated(MATRICES))
def test_matrix_parser_returns_or_refuses(text):
    try:
        m = parse_topo_matrix(text)
    except TopoParseError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    rows_for_table(m)
    render_matrix(m)
    for a in m.devices:
        m.nvlinks(a, m.devices[0])


@SETTINGS
@given(mutated(P2P))
def test_p2p_parser_returns_or_refuses(text):
    try:
        parse_topo_p2p(text)
    except TopoParseError as exc:
        assert "\n" not in str(exc)


@SETTINGS
@given(mutated(QUERIES))
def test_cpu_query_parser_returns_or_refuses(text):
    try:
        out = parse_topo_cpu_query(text)
    except TopoParseError:
        return
    assert all(isinstance(k, int) and all(isinstance(g, int) for g in v) for k, v in out.items())


@settings(max_examples=150, deadline=2000, derandomize=True)
@given(st.text(alphabet=st.characters(max_codepoint=0x2FF), max_size=400))
def test_any_short_text_returns_or_refuses(text):
    for parse in (parse_topo_matrix, parse_topo_p2p, parse_topo_cpu_query):
        try:
            parse(text)
        except TopoParseError:
            pass


@settings(max_examples=150, deadline=2000, derandomize=True)
@given(st.lists(st.text(alphabet=st.sampled_from(list("NVRM: Xid(PCI:0000:18:00) 79,pid=9[]0.1mlx5_ portLinkdown AER error received")) | st.characters(max_codepoint=0x2FF), max_size=200), max_size=20))
def test_kmsg_lines_never_raise(lines):
    kmsg.parse_lines(lines)
    kmsg.lines_used(lines)


@pytest.mark.parametrize("seed", range(len(MATRICES)))
def test_the_corpus_seeds_themselves_parse_or_refuse(seed):
    try:
        parse_topo_matrix(MATRICES[seed])
    except TopoParseError:
        pass
