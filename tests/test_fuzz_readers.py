"""Every reader of a file a user hands ccdiag, fuzzed with a fixed seed and budget: no input ends in
an internal error (exit 4) or takes longer than the harness's bound.

The harness is bench/bench_fuzz_readers.py (its docstring names the readers, their seeds and the
mutations); it runs 10,000 inputs per reader there. Here each reader gets a small budget, the same
every run, so a regression shows in CI."""

from __future__ import annotations

import random
import signal
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import bench_fuzz_readers as F  # noqa: E402 - the harness lives in bench/

pytestmark = pytest.mark.slow  # thousands of parses, some through replayed checks

SEED = 20261128
#: inputs per reader in CI (the snapshot reader replays a whole check per input)
BUDGET = {"snapshot": 30, "web_config": 120, "compare_report": 80}
DEFAULT_BUDGET = 200


@pytest.mark.parametrize("reader", F.READERS)
def test_no_input_ends_in_an_internal_error(reader, tmp_path):
    seeds = [s for s in F.seeds([reader])[reader] if s]
    assert seeds, f"no seed for {reader}"
    previous = signal.signal(signal.SIGALRM, F._alarm)
    try:
        got = F.fuzz(reader, seeds, BUDGET.get(reader, DEFAULT_BUDGET), random.Random(f"{SEED}-{reader}"), str(tmp_path))
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert got["internal"] == 0 and got["slow"] == 0 and got["probe_crash"] == 0, got["first_failures"]
    assert got["result"] + got["refused"] == got["inputs"]
