"""The complexity gate (scripts/complexity.py, run by CI's lint stage): a function above the limit
fails unless the allow-list names it at its grade now, and an entry that no longer matches (grade
changed, function gone or within the limit) fails too, so the list can only shrink."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def _gate():
    spec = importlib.util.spec_from_file_location("complexity_gate", REPO / "scripts" / "complexity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


gate = _gate()
Block = gate.Block


@pytest.mark.parametrize("score, letter", [(1, "A"), (5, "A"), (6, "B"), (20, "C"), (21, "D"), (30, "D"),
                                           (31, "E"), (40, "E"), (41, "F")])
def test_grades_are_radons(score, letter):
    assert gate.grade(score) == letter


def test_a_function_above_the_limit_fails_unless_listed_at_its_grade():
    found = [Block("a.py", "ok", 1, 30), Block("a.py", "big", 9, 31), Block("b.py", "C.huge", 3, 41)]
    assert gate.problems(found, {("b.py", "C.huge"): "F"}) == [
        "a.py:9 big E (31): above 30; split it into functions with one job each"]
    assert gate.problems(found, {("a.py", "big"): "E", ("b.py", "C.huge"): "F"}) == []


@pytest.mark.parametrize("score, listed, words", [
    (41, "E", "grew from the allow-list's grade E; refactor it"),
    (35, "F", "dropped from the allow-list's grade F; list it as E"),
    (30, "E", "now within the limit; remove its entry from the allow-list"),
])
def test_an_entry_must_name_its_functions_grade_now(score, listed, words):
    found = [Block("a.py", "f", 7, score)]
    assert gate.problems(found, {("a.py", "f"): listed}) == [f"a.py:7 f {gate.grade(score)} ({score}): {words}"]


def test_an_entry_whose_function_is_gone_fails():
    assert gate.problems([], {("a.py", "gone"): "E"}) == [
        "a.py gone: listed in the allow-list but not found; remove its entry"]


def test_the_allow_list_reads_entries_and_refuses_a_malformed_or_repeated_line():
    text = "# comment\n\nccdiag/x.py  Cls.meth  E   # why\nccdiag/y.py f F\n"
    assert gate.read_allow(text, "allow") == {("ccdiag/x.py", "Cls.meth"): "E", ("ccdiag/y.py", "f"): "F"}
    with pytest.raises(ValueError, match="allow:1: expected"):
        gate.read_allow("ccdiag/x.py f G\n", "allow")
    with pytest.raises(ValueError, match="allow:2: ccdiag/x.py f is listed twice"):
        gate.read_allow("ccdiag/x.py f E\nccdiag/x.py f E\n", "allow")


def test_closures_and_methods_of_nested_classes_are_measured_by_their_qualified_names(tmp_path):
    pytest.importorskip("radon", reason="radon is a lint tool (scripts/lint-requirements.txt), not a test dependency")
    body = "".join(f"if x == {i}:\n    return {i}\n" for i in range(31))  # complexity 32
    src = tmp_path / "pkg" / "mod.py"
    src.parent.mkdir()
    src.write_text("class Outer:\n    class Inner:\n        def method(self, x):\n" + textwrap.indent(body, " " * 12)
                   + "def outer():\n    def closure(x):\n" + textwrap.indent(body, " " * 8) + "    return closure\n")
    got = {(b.name, b.score) for b in gate.blocks(tmp_path, ("pkg",))}
    assert got == {("Outer.Inner.method", 32), ("outer", 1), ("outer.closure", 32)}
