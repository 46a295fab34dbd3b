"""Shared test set-up: golden-file refresh flag and paths to fixtures and samples."""

from __future__ import annotations

import os
import pathlib

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from the current output instead of comparing")


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    """Tests never inherit NCCL/CUDA settings from the machine running them."""
    for key in list(os.environ):
        if key.startswith(("NCCL_", "CUDA_VISIBLE", "CCDIAG_")):
            monkeypatch.delenv(key, raising=False)
