"""The fabric checks on the bundled (synthesized) sample snapshots, replayed through the host door,
the probes and the topology exactly as `ccdiag check --replay` does."""

from __future__ import annotations

import pathlib

import pytest

import scenarios_fabric as S
from ccdiag.run.checkrun import evaluate
from ccdiag.checks.infiniband import gpudirect
from ccdiag.host.door import ReplayHost
from ccdiag.topology import build_topology

SAMPLES = pathlib.Path(__file__).resolve().parent.parent / "samples"
PREFIXES = ("pcie.", "ib.", "env.")


def _findings(name):
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{name} not built")
    return evaluate(ReplayHost(str(path)), only=PREFIXES, deadline_s=120).findings


def test_healthy_sample_has_no_fabric_warn_or_fail():
    findings = _findings("hgx-h100-8gpu-healthy.snap.tar.gz")
    assert [f for f in findings if f.status in ("warn", "fail", "unknown")] == []
    # the window recorded in the snapshot is used: counters are judged, not skipped
    assert any(f.check == "ib.counters" and f.status == "pass" for f in findings)
    assert any(f.check == "pcie.aer" and f.status == "pass" for f in findings)


def test_degraded_sample_fabric_faults_are_each_found_once():
    findings = _findings("hgx-h100-8gpu-degraded.snap.tar.gz")
    got = {(f.check, f.status, f.component.kind, f.component.bdf or f.component.name)
           for f in findings if f.status in ("warn", "fail")}
    assert got == {
        ("pcie.link_width", "fail", "pcie_link", "0000:5d:00.0"),   # GPU3 at x8
        ("pcie.acs", "fail", "bridge", "0000:29:00.0"),              # ACS above GPU1
        ("ib.port_state", "fail", "ib_port", "0000:9b:00.0"),        # mlx5_4 Polling
        ("ib.link_flaps", "warn", "ib_port", "0000:9b:00.0"),        # its Link DOWN line
        ("ib.counters", "fail", "ib_port", "0000:2b:00.0"),          # mlx5_1 symbol errors + recoveries
        ("ib.gpudirect", "fail", "module", "nvidia_peermem"),        # peermem not loaded
        ("ib.gpudirect", "warn", "gpu", "0000:9a:00.0"),             # GPU4's own NIC is down
    }


def test_checks_accept_the_real_topology_built_from_scenario_runs():
    topo = build_topology(S.healthy_runs())
    findings = gpudirect(S.make_ctx(topology=topo))
    assert {f.status for f in findings} == {"pass"}
    assert sorted(f.component.peer for f in findings if f.component.kind == "gpu") == [f"mlx5_{i}" for i in range(8)]
