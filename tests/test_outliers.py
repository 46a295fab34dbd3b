"""ccdiag.core.outliers: slow member vs slow pair, on figures shaped like the real matrices in
tests/fixtures/realcases (one GPU slow with every peer; one pair slow; a whole matrix uniformly slow,
which singles nobody out)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from ccdiag.core import outliers
from ccdiag.core.outliers import classify, classify_flags


def matrix(n, value=20.0, **over):
    figs = {(f"GPU{a}", f"GPU{b}"): value for a in range(n) for b in range(n) if a != b}
    for k, v in over.items():
        a, b = k.split("_")
        figs[(f"GPU{a}", f"GPU{b}")] = v
    return figs


def test_one_member_slow_with_every_peer_is_named_once():
    figs = matrix(4)
    for other in (0, 1, 3):
        figs[("GPU2", f"GPU{other}")] = figs[(f"GPU{other}", "GPU2")] = 9.0
    c = classify(figs, fraction=0.7)
    assert c.slow_members == ("GPU2",) and c.slow_pairs == ()
    assert c.reference == 20.0 and c.floor == pytest.approx(14.0)


def test_one_slow_pair_is_a_pair_not_a_member():
    c = classify(matrix(4, **{"0_1": 5.0}), fraction=0.7)
    assert c.slow_members == () and c.slow_pairs == (("GPU0", "GPU1"),)
    assert c.ratios[("GPU0", "GPU1")] == pytest.approx(0.25)


def test_symmetric_merges_both_directions_to_the_lower():
    c = classify(matrix(3, **{"1_0": 4.0}), fraction=0.7, symmetric=True)
    assert c.slow_pairs == (("GPU0", "GPU1"),)


def test_uniformly_slow_matrix_singles_nobody_out():
    c = classify(matrix(4, value=3.0), fraction=0.7)
    assert c.judged and c.slow_members == () and c.slow_pairs == ()


def test_two_members_cannot_be_told_apart():
    c = classify(matrix(2, **{"0_1": 1.0}), fraction=0.7)
    assert not c.judged and c.slow_members == ()


def test_flags_from_the_callers_own_rule():
    flags = {("a", "b"): True, ("a", "c"): True, ("b", "c"): False}
    c = classify_flags(flags)
    assert c.slow_members == ("a",) and c.slow_pairs == ()
    assert classify_flags({("a", "b"): True, ("a", "c"): True, ("b", "c"): True}).slow_members == ()


def test_bad_fraction_is_refused():
    with pytest.raises(ValueError):
        classify(matrix(3), fraction=0.0)


def test_pure_logic_standard_library_only():
    tree = ast.parse(pathlib.Path(outliers.__file__).read_text())
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert mods <= {"__future__", "statistics", "dataclasses", "typing", "collections.abc"}
