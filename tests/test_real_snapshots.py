"""Replays of snapshots recorded on real GPU nodes (tests/fixtures/real).

These are the project's evidence that the NVML and sysfs paths read real hardware correctly; each
snapshot must replay to a usable NVML observation, a topology and a check verdict without internal
errors, and re-recording its replay must change nothing.
"""

from __future__ import annotations

import pathlib

import pytest

from ccdiag.run.checkrun import evaluate
from ccdiag.core.exitcodes import ExitCode
from ccdiag.host.door import ReplayHost
from ccdiag.core.readings import to_jsonable
from ccdiag.probes.registry import ALL_PROBES, run_probes
from ccdiag.host.snapshot import SnapshotData

REAL = sorted((pathlib.Path(__file__).resolve().parent / "fixtures" / "real").glob("*.snap.tar.gz"))


@pytest.mark.skipif(not REAL, reason="no snapshot from real GPU hardware recorded yet (see tests/fixtures/real)")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_snapshot_replays_completely(path):
    host = ReplayHost(str(path))
    assert host.meta().get("source") == "recorded"
    runs = run_probes(host, ALL_PROBES)
    nvml = runs["nvml"]
    assert nvml.usable and nvml.data.gpus, nvml.error
    assert all(g.uuid and g.bus_id for g in nvml.data.gpus if not g.failed)
    result = evaluate(ReplayHost(str(path)))
    assert result.exit_code != ExitCode.INTERNAL
    assert not [f for f in result.findings if "ccdiag bug" in (f.remedy or "")]
    again = ReplayHost(SnapshotData.from_bytes(host.snap.to_bytes()))
    assert {n: to_jsonable(r.data) for n, r in run_probes(again, ALL_PROBES).items()} == \
        {n: to_jsonable(r.data) for n, r in runs.items()}
