"""The fast loop's own rules (tests/fastloop.py): which modules it must reach, and that a module
no fast test imports is named."""

from __future__ import annotations

import sys

import fastloop


def test_every_module_covers_the_three_packages():
    names = fastloop.every_module()
    assert {"ccdiag.core.readings", "ccdiag.probes.smi_topo", "ccdiag.probes._smi_topo_repair",
            "ccdiag.exporters.daemon", "ccdiag.topology.fastrows"} <= names
    assert not any(n.endswith(".__init__") or ".probes.probes" in n for n in names)
    assert set(fastloop.NOT_IN_PROCESS) <= names


def test_a_module_no_test_imported_is_named(monkeypatch):
    import ccdiag.topology.fastrows  # noqa: F401 - make sure it is there to be taken away

    monkeypatch.delitem(sys.modules, "ccdiag.topology.fastrows")
    assert "ccdiag.topology.fastrows" in fastloop.unimported_modules()


def test_an_excuse_for_a_module_imported_after_all_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "ccdiag.__main__", object())
    assert "ccdiag.__main__" in fastloop.wrongly_excused()


def test_the_slow_list_names_only_files_that_exist():
    import pathlib

    here = pathlib.Path(__file__).parent
    assert all((here / f).exists() for f in (*fastloop.SLOW_TESTS, *fastloop.SLOW_FILES))
