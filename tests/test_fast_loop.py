"""The fast loop's own rules (tests/fastloop.py): which modules it must reach, and that a module
no fast test imports is named."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import fastloop

HERE = pathlib.Path(__file__).resolve().parent


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


@pytest.mark.slow  # a pytest run in a child process
def test_a_test_reruns_by_its_id_in_a_file_that_lists_slow_tests():
    """``pytest file::name`` selects one test of a file whose other tests are in SLOW_TESTS: the
    guard must not take those, merely not selected, for names that do not exist."""
    target = "test_layers.py::test_every_folder_is_a_room_and_no_module_is_loose"
    assert "test_layers.py" in fastloop.SLOW_TESTS  # the file lists other tests of its own as slow
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target], cwd=HERE,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-1500:] + proc.stderr[-1500:]


def test_a_name_the_file_does_not_define_is_still_refused(tmp_path):
    test_file = tmp_path / "test_toy.py"
    test_file.write_text("def test_here():\n    pass\n\n\nclass TestGroup:\n    def test_in_a_class(self):\n        pass\n")
    assert fastloop.defined_tests(test_file) == {"test_here", "test_in_a_class"}
