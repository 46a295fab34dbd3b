"""The GPU, XID and NVLink checks on the bundled (SYNTHESIZED) sample snapshots, through the real
pipeline: ReplayHost -> probes (both epochs) -> topology -> checks."""

from __future__ import annotations

import pathlib

import pytest

from ccdiag.run.checkrun import evaluate
from ccdiag.host.door import ReplayHost

SAMPLES = pathlib.Path(__file__).resolve().parent.parent / "samples"
MINE = ("gpu.", "xid.", "nvlink.", "probe.")


def findings_of(name):
    path = SAMPLES / f"hgx-h100-8gpu-{name}.snap.tar.gz"
    if not path.exists():
        pytest.skip(f"sample {path.name} not built")
    result = evaluate(ReplayHost(str(path)), only=MINE)
    assert result.window_s > 0  # both epochs replayed, so counters were judged
    return [f for f in result.findings if f.check.startswith(MINE)]


def test_healthy_sample_has_no_gpu_warn_fail_or_unknown():
    findings = findings_of("healthy")
    assert [(f.check, f.status, f.summary) for f in findings if f.status in ("warn", "fail", "unknown")] == []
    errors = [f for f in findings if f.check == "nvlink.errors"]
    assert len(errors) == 8 and {f.status for f in errors} == {"pass"}


def test_degraded_sample_names_each_gpu_fault():
    findings = findings_of("degraded")
    fails = {(f.check, f.component.name, f.component.gpu, f.component.bdf, f.component.link)
             for f in findings if f.status == "fail"}
    assert fails == {
        ("gpu.lost", "GPU6", 6, "0000:ba:00.0", None),
        ("gpu.count", "node", None, None, None),
        ("xid.recent", "GPU6", 6, "0000:ba:00.0", None),
        ("gpu.remapped_rows", "GPU2", 2, "0000:3a:00.0", None),
        ("nvlink.down", "GPU5 NVLink 7", 5, "0000:ab:00.0", 7),
    }
    xid = next(f for f in findings if f.check == "xid.recent" and f.status == "fail")
    assert xid.details["xid"] == 79
    assert not [f for f in findings if f.status == "warn"]
    # the lost GPU's other checks could not be judged, and say so
    others = {f.status for f in findings if f.component.gpu == 6 and f.check not in ("gpu.lost", "xid.recent")}
    assert others == {"unknown"}
