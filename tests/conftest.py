"""Shared test set-up: golden-file refresh flag, paths to fixtures and samples, and the ``gpu``
marker read both ways: ``@pytest.mark.gpu`` needs an NVIDIA GPU, ``@pytest.mark.gpu(False)`` needs
a machine without one (a test of what ccdiag says where there is no driver)."""

from __future__ import annotations

import os
import pathlib

import pytest
from fastloop import check_every_module_imported, mark_real_components_slow

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from the current output instead of comparing")


def nvidia_present() -> bool:
    """An NVIDIA driver is loaded, or an NVIDIA display/3D controller is on the PCI bus."""
    if os.path.exists("/proc/driver/nvidia/version"):
        return True
    for dev in pathlib.Path("/sys/bus/pci/devices").glob("*"):
        try:
            vendor = (dev / "vendor").read_text().strip()
            klass = (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == "0x10de" and klass.startswith("0x03"):
            return True
    return False


def pytest_collection_modifyitems(config, items):
    mark_real_components_slow(items)
    present = nvidia_present()
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        wants = bool(marker.args[0]) if marker.args else True
        if wants and not present:
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU and driver"))
        elif not wants and present:
            item.add_marker(pytest.mark.skip(reason="describes a machine without an NVIDIA GPU/driver"))


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    """Tests never inherit NCCL/CUDA settings from the machine running them."""
    for key in list(os.environ):
        if key.startswith(("NCCL_", "CUDA_VISIBLE", "CCDIAG_")):
            monkeypatch.delenv(key, raising=False)


def pytest_sessionfinish(session, exitstatus):
    check_every_module_imported(session)
