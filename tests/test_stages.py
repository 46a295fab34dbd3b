"""Stages with their own share of the deadline: probing cannot eat the judge's reserve, and a stage
that raises is exit 4 naming the stage (never "deadline reached"). Hangs are synthesized: a probe
module that blocks in a sleep, and a check that takes its time."""

from __future__ import annotations

import pathlib
import sys
import threading
import time
import types

import pytest

from ccdiag.run.checkrun import evaluate
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, PASS, Component, Finding
from ccdiag.host.door import LiveHost
from ccdiag.run.stages import JUDGE_MAX_S, JUDGE_MIN_S, Budget, StageError, StageTimeout, run_stage

from cli_runner import run


@pytest.mark.parametrize("deadline,probe_s,judge_s", [(30.0, 27.0, 3.0), (100.0, 95.0, JUDGE_MAX_S),
                                                      (3.0, 2.0, JUDGE_MIN_S), (0.5, 0.0, 0.5)])
def test_the_judge_keeps_its_reserve(deadline, probe_s, judge_s):
    b = Budget.plan(deadline, start=100.0)
    assert (b.probe_end - 100.0, b.judge_end - b.probe_end) == pytest.approx((probe_s, judge_s))
    assert b.bench_end == b.deadline == 100.0 + deadline


def test_a_bench_share_comes_after_judging_and_never_starves_it():
    b = Budget.plan(30.0, bench_s=10.0, start=0.0)
    assert (b.probe_end, b.judge_end, b.bench_end) == pytest.approx((17.0, 20.0, 30.0))
    tight = Budget.plan(4.0, bench_s=60.0, start=0.0)
    assert tight.judge_end - tight.probe_end == pytest.approx(JUDGE_MIN_S)
    assert tight.bench_end - tight.judge_end <= tight.probe_end  # at most half of what is left


def test_run_stage_returns_raises_with_the_stage_name_or_times_out():
    end = time.monotonic() + 5
    assert run_stage("judge", lambda: 42, end) == 42
    with pytest.raises(StageError, match=r"stage judge failed: ZeroDivisionError"):
        run_stage("judge", lambda: 1 / 0, end)
    release = threading.Event()
    with pytest.raises(StageTimeout):
        run_stage("judge", release.wait, time.monotonic() + 0.1, grace_s=0.1)
    release.set()


@pytest.fixture
def sleepy_probe(monkeypatch):
    """A probe that blocks far past any deadline (as a wedged device read does)."""
    release = threading.Event()
    mod = types.ModuleType("ccdiag.probes.sleepy")
    mod.NAME, mod.TIMEOUT_S = "sleepy", 600.0
    mod.collect = lambda host: release.wait(600)
    monkeypatch.setitem(sys.modules, "ccdiag.probes.sleepy", mod)
    yield "sleepy"
    release.set()


def _register(monkeypatch, name, func):
    from ccdiag import checks

    checks.load_all()
    monkeypatch.setitem(checks.REGISTRY, name, checks.CheckSpec(name, func, (), "synthesized"))


def test_a_hung_probe_leaves_the_judge_its_reserve(tmp_path, sleepy_probe, monkeypatch):
    """Judging that needs 0.8 s still finishes after a probe used the whole probing share (the old
    scheme gave the checks 0.5 s past the deadline), and the failure it finds is the verdict."""

    def slow_but_sure(ctx):
        time.sleep(0.8)
        yield Finding("test.slow_fail", FAIL, Component("node", "n"), "synthesized failure found slowly")

    _register(monkeypatch, "test.slow_fail", slow_but_sure)
    t0 = time.monotonic()
    result = evaluate(LiveHost(str(tmp_path)), deadline_s=3.0, probes=[sleepy_probe], only=["test.slow"])
    elapsed = time.monotonic() - t0
    assert elapsed < 3.0 + 4.0, elapsed  # the probe blocks 600 s; the slack is for a loaded machine
    assert result.exit_code == ExitCode.FAIL
    assert [f.check for f in result.findings if f.status == FAIL] == ["test.slow_fail"]
    assert not any(f.check == "check.deadline" for f in result.findings)
    assert result.run_info()["stages"] == {"deadline_s": 3.0, "probe_s": 2.0, "judge_reserve_s": 1.0,
                                           "bench_s": 0.0}


def test_a_check_that_raises_is_isolated_but_a_judge_stage_that_raises_is_exit_4(tmp_path, monkeypatch):
    from ccdiag.topology import builder

    def broken(self):
        raise RuntimeError("synthesized bug in the topology builder")

    monkeypatch.setattr(builder.Builder, "build", broken)
    with pytest.raises(StageError, match="stage judge failed: RuntimeError: synthesized bug"):
        evaluate(LiveHost(str(tmp_path)), deadline_s=5.0, probes=["system"])
    code, out, err = run("check", "--root", str(tmp_path), "--timeout", "5", "--window", "0")
    assert code == ExitCode.INTERNAL
    assert err.strip().splitlines() == [
        "ccdiag: internal error in the judge stage: RuntimeError: synthesized bug in the topology builder "
        "(set CCDIAG_DEBUG=1 for a traceback, and please report it)"]
    assert "deadline" not in err


def test_a_check_that_never_returns_is_the_deadline_not_a_hang(tmp_path, monkeypatch):
    release = threading.Event()

    def stuck(ctx):
        release.wait(600)
        yield Finding("test.stuck", PASS, Component("node", "n"), "never")

    _register(monkeypatch, "test.stuck", stuck)
    try:
        t0 = time.monotonic()
        result = evaluate(LiveHost(str(tmp_path)), deadline_s=2.0, probes=["system"], only=["test.stuck"])
        assert time.monotonic() - t0 < 2.0 + 5.0  # the check blocks 600 s
    finally:
        release.set()
    assert result.exit_code == ExitCode.UNEVALUATED and result.timed_out
    assert [f.check for f in result.findings] == ["check.deadline"]


def test_a_source_tree_without_the_package_mapping_says_ccdiag_is_not_installed(tmp_path):
    """``python -m ccdiag`` inside a checkout that was never installed: Python finds ``ccdiag/``
    but not ``ccdiag.probes`` (``probes/`` is mapped in only by an install)."""
    import shutil
    import subprocess

    import ccdiag

    src = tmp_path / "checkout"
    shutil.copytree(pathlib.Path(ccdiag.__file__).parent, src / "ccdiag",
                    ignore=shutil.ignore_patterns("__pycache__", "probes", "exporters"))
    sample = pathlib.Path(__file__).resolve().parent.parent / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
    # drop any finder that maps an installed ccdiag in (an editable install's), keep site-packages
    boot = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
            "sys.path.insert(0, sys.argv.pop(1)); from ccdiag.commands.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", boot, str(src), "check", "--replay", str(sample)],
                          capture_output=True, text=True, timeout=120, cwd=str(src))
    assert proc.returncode == ExitCode.INTERNAL, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "ccdiag: ccdiag is not installed here: ccdiag.probes is missing (run ccdiag from an installed "
        "package: `pip install .` in the source tree, or `pip install -e .`)"]
