"""The link load that lets ``ccdiag check`` judge PCIe speed under load, at its boundary: a fake of
CuPy's API (SYNTHESIZED; no GPU here), no CuPy at all, a copy that fails, and a replay."""

from __future__ import annotations

import sys
import threading
import types

import pytest

import scenarios_fabric as S
from ccdiag.checks import run_checks
from ccdiag.host.busy_pcie_links import LinkLoad


def fake_cupy(devices=2, fail_on=None):
    """Just the calls ccdiag.host.busy_pcie_links makes, counting host-to-device copies per device."""
    copies = {}
    current = threading.local()
    cp = types.ModuleType("cupy")
    cp.uint8 = "uint8"

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            current.index = self.index
            return self

        def __exit__(self, *exc):
            return False

    class Mem:
        def copy_from_host(self, ptr, nbytes):
            i = current.index
            if fail_on is not None and i == fail_on:
                raise MemoryError("cudaErrorMemoryAllocation: out of memory (synthesized)")
            copies[i] = copies.get(i, 0) + 1

    class Array:
        data = Mem()

    cp.cuda = types.SimpleNamespace(
        Device=Device,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: devices),
        alloc_pinned_memory=lambda n: types.SimpleNamespace(ptr=0x1000),
        Stream=types.SimpleNamespace(null=types.SimpleNamespace(synchronize=lambda: None)))
    cp.empty = lambda n, dtype=None: Array()
    return cp, copies


def test_every_gpu_is_loaded_and_the_load_stops(monkeypatch):
    cp, copies = fake_cupy(devices=2)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    load = LinkLoad(max_s=5.0)
    load.start(live=True)
    state = load.stop()
    assert state.loaded == [0, 1] and state.skipped is None
    assert all(copies[i] > 0 for i in (0, 1)) and state.copies == copies
    n = dict(copies)
    threading.Event().wait(0.05)
    assert copies == n  # nothing copies after stop


def test_a_failing_gpu_is_named_and_the_others_still_load(monkeypatch):
    cp, copies = fake_cupy(devices=2, fail_on=1)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    load = LinkLoad(max_s=5.0)
    load.start(live=True)
    state = load.stop()
    assert state.loaded == [0] and "out of memory" in state.errors[1]


def test_without_cupy_or_on_a_replay_it_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import fails as if not installed
    state = LinkLoad().start(live=True)
    assert state.skipped.startswith("CuPy not available")
    assert LinkLoad().start(live=False).skipped.startswith("a replayed snapshot")


def test_a_gpu_loaded_while_read_has_its_low_speed_judged():
    """An idle GPU's Gen1 link is a power state; the same link while ccdiag loads it is a fault."""
    runs = S.healthy_runs()  # GPUs idle at 2.5 GT/s
    idle = [f for f in run_checks(S.make_ctx(runs), only=["pcie.link_speed"]) if f.status != "pass"]
    assert idle == []
    ctx = S.make_ctx(runs)
    loaded_ctx = type(ctx)(**{**ctx.__dict__, "meta": {"link_load": {"loaded": [3], "skipped": None,
                                                                      "copies": {"3": 40}, "seconds": 0.4}}})
    problems = [f for f in run_checks(loaded_ctx, only=["pcie.link_speed"]) if f.status != "pass"]
    assert [(f.status, f.component.gpu) for f in problems] == [("fail", 3)]  # under ccdiag's own load a low link is a fault
    assert any("link load" in e.source for e in problems[0].evidence)
    info = run_checks(loaded_ctx, only=["pcie.link_load"])
    assert [f.status for f in info] == ["pass"] and "GPU3" in info[0].summary


@pytest.mark.parametrize("meta,status", [({}, "skip"), ({"link_load": {"skipped": "no GPU for CUDA"}}, "skip")])
def test_the_load_finding_says_why_speed_was_not_judged_under_load(meta, status):
    ctx = S.make_ctx(S.healthy_runs())
    ctx = type(ctx)(**{**ctx.__dict__, "meta": meta})
    f = run_checks(ctx, only=["pcie.link_load"])[0]
    assert f.status == status and "NVML shows busy" in f.summary
