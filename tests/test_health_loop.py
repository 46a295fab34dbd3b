"""The idle-time loop with stand-in GPU processes: a real process holding a stand-in GPU device node
open makes the node busy, a check in progress yields at once when one appears (or when a prolog says
``ccdiag health yield``), a turn that runs the real ``ccdiag check`` on a replayed snapshot records its
verdict and validity window, the pre-job check reuses a valid pass, and ``nvidia-bug-report.sh`` runs
within its bounds. The stand-ins (a "GPU process", a slow "check", a bug-report script) are
SYNTHESIZED programs written by the tests; nothing here resets or reboots anything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ccdiag.health.config import EvidenceConfig, HealthConfig
from ccdiag.health.evidence import prune, run_bug_report
from ccdiag.health.idle import IdleWatch, gpu_processes
from ccdiag.health.runner import Runner
from ccdiag.health.state import load_state
from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"


@pytest.fixture
def devices(tmp_path):
    """A stand-in /dev with one GPU device node (a plain file: what matters is who holds it open)."""
    d = tmp_path / "dev"
    d.mkdir()
    (d / "nvidia0").write_bytes(b"")
    (d / "nvidiactl").write_bytes(b"")
    return d


class GpuProcess:
    """A real process that holds a stand-in GPU device node open, as a CUDA job holds /dev/nvidia0."""

    def __init__(self, device, name: str = "python3"):
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            f = open({str(device)!r}, "rb")
            sys.stdout.write("open\\n"); sys.stdout.flush()
            time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "open"

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


# -- who holds a GPU ------------------------------------------------------------------------------------
@pytest.mark.slow  # starts a process
def test_a_process_holding_a_gpu_device_is_found_and_our_own_tree_is_not(devices):
    pattern = (str(devices / "nvidia[0-9]*"),)
    assert gpu_processes(pattern) == []
    job = GpuProcess(devices / "nvidia0")
    try:
        found = gpu_processes(pattern)
        assert [(pid, dev) for pid, _, dev in found] == [(job.proc.pid, str(devices / "nvidia0"))]
        # the same process as a descendant of the running check is the check's own worker: not a job
        assert gpu_processes(pattern, exclude_tree=os.getpid()) == []
        assert gpu_processes(pattern, exclude_tree=job.proc.pid) == []
        # a device-holding service (the persistence daemon...) is not a job either
        comm = found[0][1]
        assert gpu_processes(pattern, ignore=(comm,)) == []
        # nvidiactl is not a GPU: a process holding only it is no job
        assert gpu_processes((str(devices / "nvidiactl"),)) == []
        busy = IdleWatch(patterns=pattern).busy()
        assert busy is not None and busy.source == "gpu_process" and str(job.proc.pid) in busy.detail
    finally:
        job.stop()
    assert IdleWatch(patterns=pattern).busy() is None


# -- a turn, with a stand-in check ---------------------------------------------------------------------
STAND_IN_CHECK = textwrap.dedent("""
    import json, os, signal, sys, time
    marks = os.environ["STANDIN_MARKS"]
    def mark(what):
        with open(marks, "a") as fh:
            fh.write(what + "\\n")
    def stopped(signum, frame):
        mark("terminated")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stopped)
    mark("started " + " ".join(sys.argv[1:]))
    time.sleep(float(os.environ.get("STANDIN_SLEEP", "60")))
    out = sys.argv[sys.argv.index("--output") + 1]
    with open(out, "w") as fh:
        json.dump({"verdict": {"status": "pass", "counts": {}, "reason": None, "action": "none"}}, fh)
    mark("finished")
""")


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    script = tmp_path / "standin_check.py"
    script.write_text(STAND_IN_CHECK)
    marks = tmp_path / "marks"
    monkeypatch.setenv("STANDIN_MARKS", str(marks))
    return [sys.executable, str(script)], marks


def _samples(path) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name: s.value for fam in text_string_to_metric_families(path.read_text()) for s in fam.samples
            if not s.labels}


def _marks(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait_for(predicate, what: str, limit_s: float = 60.0) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def _cfg(tmp_path, devices, **kw) -> HealthConfig:
    values = dict(state_dir=str(tmp_path / "state"), gpu_devices=(str(devices / "nvidia[0-9]*"),), poll_s=0.2,
                  bench=False, cadence_s=3600.0, validity_s=600.0)
    values.update(kw)
    return HealthConfig(**values)


@pytest.mark.slow  # starts processes
def test_a_busy_node_is_not_checked(tmp_path, devices, stand_in):
    argv, marks = stand_in
    job = GpuProcess(devices / "nvidia0")
    try:
        result = Runner(_cfg(tmp_path, devices), ccdiag=argv).turn()
    finally:
        job.stop()
    assert result.outcome == "busy" and f"process {job.proc.pid}" in result.detail
    assert _marks(marks) == []  # no check was started
    st = load_state(str(tmp_path / "state" / "health.json"))
    assert st.runs == {"busy": 1} and st.verdict == {}


@pytest.mark.slow  # starts processes
def test_a_check_yields_at_once_when_a_gpu_process_appears(tmp_path, devices, stand_in):
    argv, marks = stand_in
    cfg = _cfg(tmp_path, devices, textfile_dir=str(tmp_path))
    # an earlier pass, which must stand after the yield
    os.environ["STANDIN_SLEEP"] = "0"
    try:
        first = Runner(cfg, ccdiag=argv).turn()
    finally:
        del os.environ["STANDIN_SLEEP"]
    assert first.outcome == "pass"
    before = load_state(cfg.state_path)
    runner = Runner(cfg, ccdiag=argv)
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", runner.turn(force=True)))
    thread.start()
    _wait_for(lambda: sum(m.startswith("started") for m in _marks(marks)) == 2, "the stand-in check started")
    job = GpuProcess(devices / "nvidia0")
    try:
        thread.join(60)
    finally:
        job.stop()
    assert not thread.is_alive()
    result = out["r"]
    assert result.outcome == "yielded" and f"process {job.proc.pid}" in result.detail
    assert _marks(marks)[-1] == "terminated"  # told to stop (SIGTERM), not left running
    st = load_state(cfg.state_path)
    assert st.last_pass == before.last_pass and st.valid_until == before.valid_until  # the pass stands
    assert st.runs["yielded"] == 1 and st.last_run["outcome"] == "yielded"
    prom = (tmp_path / "ccdiag-health.prom").read_text()
    assert 'ccdiag_health_last_run_outcome{outcome="yielded"} 1.0' in prom
    assert "ccdiag_last_pass_timestamp_seconds" in prom and "ccdiag_verdict_valid_until_seconds" in prom


@pytest.mark.slow  # starts processes
def test_a_prolog_saying_yield_stops_a_running_turn(tmp_path, devices, stand_in):
    """``ccdiag health yield`` (what the Slurm prolog runs) signals the turn's process, found by its
    pid file and command line, and the turn stops its check at once."""
    argv, marks = stand_in
    cfg_path = tmp_path / "health.toml"
    cfg_path.write_text(f'state_dir = "{tmp_path / "state"}"\ngpu_devices = ["{devices}/nvidia[0-9]*"]\n'
                        f"poll = 0.2\nbench = false\n")
    driver = textwrap.dedent(f"""
        import json, sys
        from ccdiag.health.config import load_health_config
        from ccdiag.health.runner import Runner, install_yield_handler
        runner = Runner(load_health_config({str(cfg_path)!r}), ccdiag={argv!r})
        install_yield_handler(runner)
        r = runner.turn(force=True)
        print(json.dumps({{"outcome": r.outcome, "detail": r.detail}}))
    """)
    turn = subprocess.Popen([sys.executable, "-c", driver, "ccdiag", "health", "run"], stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: any(m.startswith("started") for m in _marks(marks)), "the stand-in check started")
        said = subprocess.run([sys.executable, "-m", "ccdiag", "health", "yield", "--config", str(cfg_path)],
                              capture_output=True, text=True, timeout=60)
        assert said.returncode == 0 and f"(pid {turn.pid}) to yield" in said.stdout, said.stdout + said.stderr
        out, _ = turn.communicate(timeout=60)
    finally:
        if turn.poll() is None:
            turn.kill()
    result = json.loads(out)
    assert result["outcome"] == "yielded" and "SIGUSR1" in result["detail"]
    assert _marks(marks)[-1] == "terminated"
    assert not (tmp_path / "state" / "health.pid").exists()
    again = subprocess.run([sys.executable, "-m", "ccdiag", "health", "yield", "--config", str(cfg_path)],
                           capture_output=True, text=True, timeout=60)
    assert "no health check is running" in again.stdout


def test_a_pid_file_naming_another_program_is_never_signalled(tmp_path):
    from ccdiag.health.runner import signal_running

    pid_file = tmp_path / "health.pid"
    pid_file.write_text(f"{os.getpid()}\n")  # pytest: not a ccdiag health turn
    handler = signal.signal(signal.SIGUSR1, lambda *a: pytest.fail("signalled"))
    try:
        said = signal_running(str(pid_file))
    finally:
        signal.signal(signal.SIGUSR1, handler)
    assert "not signalled" in said or "not a ccdiag health turn" in said


def test_a_turn_is_not_due_before_its_cadence(tmp_path, devices):
    cfg = _cfg(tmp_path, devices)
    runner = Runner(cfg, ccdiag=["/nonexistent"], clock=lambda: 10_000.0)
    st = load_state(cfg.state_path)
    st.verdict = {"at": 9_000.0, "status": "pass"}
    assert runner.due(st, 10_000.0) == (False, "the last verdict is 1000s old, the cadence is 3600s")
    assert runner.due(st, 12_601.0)[0]


# -- a turn with the real check on replayed snapshots, and the pre-job reuse ---------------------------------
@pytest.mark.slow  # runs ccdiag check twice as a child, then in-process
def test_a_pass_opens_the_window_a_failure_closes_it_and_the_prolog_reuses_it(tmp_path, devices):
    from cli_runner import run

    cfg = _cfg(tmp_path, devices, check_args=("--replay", str(HEALTHY)), textfile_dir=str(tmp_path), validity_s=900.0)
    result = Runner(cfg).turn()
    assert result.outcome == "pass", result.detail
    st = load_state(cfg.state_path)
    assert st.valid_until == pytest.approx(st.last_pass + 900.0) and st.last_pass_mode == "check"
    assert _samples(tmp_path / "ccdiag-health.prom")["ccdiag_verdict_valid_until_seconds"] == pytest.approx(st.valid_until)
    # the pre-job check leans on it, says so, and still judges every probe
    report = tmp_path / "prolog.json"
    code, out, err = run("check", "--replay", str(HEALTHY), "--reuse-pass", cfg.state_path, "--output", str(report), "-q")
    assert code == 0 and "reusing the health loop's pass" in err
    doc = json.loads(report.read_text())
    assert doc["reused_pass"]["reused"] is True and doc["verdict"]["status"] == "pass" and len(doc["findings"]) > 20
    # under another policy the pass is not reused
    policy = tmp_path / "fleet.toml"
    policy.write_text("expected_gpu_count = 8\n")
    code, out, err = run("check", "--replay", str(HEALTHY), "--reuse-pass", cfg.state_path, "--policy", str(policy), "-q")
    assert "no pass to reuse (the last pass was judged under other check arguments or another policy)" in err
    # a failure ends the window and keeps the evidence
    failing = _cfg(tmp_path, devices, check_args=("--replay", str(DEGRADED)), textfile_dir=str(tmp_path))
    result = Runner(failing).turn(force=True)
    assert result.outcome == "fail" and result.evidence_dir
    kept = json.loads((tmp_path / "state" / "evidence" / os.path.basename(result.evidence_dir) / "report.json").read_text())
    assert kept["verdict"]["status"] == "fail"
    st = load_state(cfg.state_path)
    assert st.valid_until <= time.time() and st.verdict["status"] == "fail"
    code, out, err = run("check", "--replay", str(HEALTHY), "--reuse-pass", cfg.state_path, "-q")
    assert "no pass to reuse (the last pass ran out at" in err


# -- nvidia-bug-report.sh, bounded ----------------------------------------------------------------------
def _bug_report_stand_in(tmp_path, body: str):
    """A SYNTHESIZED stand-in for NVIDIA's script: it takes --output-file NAME and writes NAME.gz."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "nvidia-bug-report.sh"
    script.write_text("#!/bin/sh\nBASE=nvidia-bug-report.log\n"
                      "while [ \"$1\" != \"\" ]; do case \"$1\" in --output-file) BASE=\"$2\"; shift;; esac; shift; done\n"
                      + body)
    script.chmod(0o755)
    return bindir


@pytest.mark.slow  # starts the stand-in script three times
def test_the_bug_report_runs_beside_the_snapshot_within_its_bounds(tmp_path, monkeypatch):
    written = _bug_report_stand_in(tmp_path, 'echo "Start of NVIDIA bug report log file." | gzip -c > "$BASE.gz"\n')
    monkeypatch.setenv("PATH", f"{written}:{os.environ['PATH']}")
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    res = run_bug_report(EvidenceConfig(bug_report=True, max_bytes=1 << 20), str(set_dir))
    assert res.outcome == "written" and res.path == str(set_dir / "nvidia-bug-report.log.gz") and res.size_bytes > 0
    hung = _bug_report_stand_in(tmp_path, 'echo partial > "$BASE"\nsleep 60\n')
    monkeypatch.setenv("PATH", f"{hung}:{os.environ['PATH']}")
    res = run_bug_report(EvidenceConfig(bug_report=True, timeout_s=1.0, max_bytes=1 << 20), str(set_dir))
    assert res.outcome == "timeout" and res.path and "partial" in res.detail
    big = _bug_report_stand_in(tmp_path, 'head -c 5000000 /dev/zero > "$BASE"\nsleep 60\n')
    monkeypatch.setenv("PATH", f"{big}:{os.environ['PATH']}")
    res = run_bug_report(EvidenceConfig(bug_report=True, timeout_s=60.0, max_bytes=1 << 20), str(set_dir))
    assert res.outcome == "too_large" and res.size_bytes > 1 << 20
    res = run_bug_report(EvidenceConfig(bug_report=True, max_bytes=1 << 62), str(set_dir))
    assert res.outcome == "no_space"  # twice max_bytes free is asked for before it starts


def test_without_the_script_nothing_runs_and_old_sets_are_pruned(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    res = run_bug_report(EvidenceConfig(bug_report=True), str(tmp_path))
    assert res.outcome == "not_installed"
    for name in ("20260101T000000Z", "20260102T000000Z", "20260103T000000Z"):
        (tmp_path / "ev" / name).mkdir(parents=True)
    gone = prune(str(tmp_path / "ev"), 2)
    assert [os.path.basename(g) for g in gone] == ["20260101T000000Z"]
    assert sorted(os.listdir(tmp_path / "ev")) == ["20260102T000000Z", "20260103T000000Z"]
