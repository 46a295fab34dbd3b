"""``ccdiag check`` is bounded: a hung ``nvidia-smi`` or NVML call costs the deadline plus at most a
second, and becomes an ``unknown`` finding naming the call, never a health check that hangs.

The hangs are synthesized: a fake ``nvidia-smi`` that ignores SIGTERM and sleeps forever, and NVML
bindings whose calls never return (as a wedged driver's do).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import types

import pytest

from ccdiag.run.checkrun import evaluate
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, UNKNOWN
from ccdiag.host.door import LiveHost
from wedged import HUNG_PYNVML, write_hung_smi

REPO = pathlib.Path(__file__).resolve().parent.parent
#: What a run may take past its 3 s deadline here. The hangs below last 120 s or forever, so any
#: bound far below that shows the deadline cut them; the slack is for a loaded 2-core CI machine.
#: How far past its deadline a run really ends is measured in bench/bench_check.py, not here.
SLACK_S = 4.0


@pytest.fixture
def hung_smi(tmp_path, monkeypatch):
    """A PATH whose ``nvidia-smi`` never exits (and shrugs off SIGTERM); its PIDs are killed after."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pids = tmp_path / "smi.pids"
    write_hung_smi(bindir, pids)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    yield bindir
    if pids.exists():
        for pid in pids.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass


class HungNvml:
    """Synthesized NVML binding: init and device lookup answer, ``nvmlDeviceGetUUID`` never returns."""

    def __init__(self, hang_init: bool = False):
        self.release = threading.Event()
        self.hang_init = hang_init

    def _hang(self):
        self.release.wait()
        raise RuntimeError("released by the test")

    def nvmlInit(self):
        if self.hang_init:
            self._hang()

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlDeviceGetCount(self):
        return 8

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetUUID(self, handle):
        self._hang()

    def __getattr__(self, name):
        if name.startswith("nvml"):
            return lambda *a: self._hang()
        raise AttributeError(name)


@pytest.fixture
def hang_probes(monkeypatch):
    """Two probe modules that each block in one door call, registered as ``ccdiag.probes.*``."""
    smi = types.ModuleType("ccdiag.probes.hang_smi")
    smi.NAME, smi.TIMEOUT_S = "hang_smi", 60.0
    smi.collect = lambda host: host.run(["nvidia-smi", "topo", "-m"], timeout=60)
    nv = types.ModuleType("ccdiag.probes.hang_nvml")
    nv.NAME, nv.TIMEOUT_S = "hang_nvml", 60.0
    nv.collect = lambda host: [host.nvml("nvmlDeviceGetCount"), host.nvml("nvmlDeviceGetUUID", 0)]
    monkeypatch.setitem(sys.modules, "ccdiag.probes.hang_smi", smi)
    monkeypatch.setitem(sys.modules, "ccdiag.probes.hang_nvml", nv)
    return ["hang_smi", "hang_nvml"]


def _text(finding) -> str:
    return json.dumps([finding.check, finding.summary, str(finding.component), str(finding.evidence)])


def test_hung_command_and_nvml_call_are_named_and_bounded(tmp_path, hung_smi, hang_probes):
    nvml = HungNvml()
    host = LiveHost("/", nvml_binding=nvml, nvml_call_timeout=120.0)  # commands run live only
    try:
        t0 = time.monotonic()
        result = evaluate(host, deadline_s=3.0, window_s=5.0, probes=hang_probes)
        elapsed = time.monotonic() - t0
    finally:
        nvml.release.set()
    assert elapsed <= 3.0 + SLACK_S, elapsed
    assert result.timed_out
    assert result.later is None  # no room left for a second sample: the window is not slept
    assert result.exit_code == ExitCode.UNEVALUATED
    unknown = [_text(f) for f in result.findings if f.status == UNKNOWN]
    assert any("hang_nvml" in t and "nvmlDeviceGetUUID(0)" in t for t in unknown), unknown
    assert any("hang_smi" in t and "nvidia-smi topo -m" in t for t in unknown), unknown


def test_a_failure_found_before_the_deadline_still_fails(tmp_path, hung_smi, hang_probes, monkeypatch):
    from ccdiag import checks
    from ccdiag.core.findings import Component, Finding

    def always_fails(ctx):
        yield Finding("test.synthetic_fail", FAIL, Component("node", "n"), "synthesized failure")

    checks.load_all()
    monkeypatch.setitem(checks.REGISTRY, "test.synthetic_fail",
                        checks.CheckSpec("test.synthetic_fail", always_fails, (), "synthesized"))
    result = evaluate(LiveHost("/"), deadline_s=2.0, probes=["hang_smi"])
    assert result.timed_out
    assert result.exit_code == ExitCode.FAIL


def test_real_probes_against_hung_nvml_finish_in_time(hung_smi):
    """The shipped probes, a live host whose NVML never answers a device query, and a hung
    ``nvidia-smi`` on PATH."""
    nvml = HungNvml()
    host = LiveHost("/", nvml_binding=nvml, nvml_call_timeout=120.0)
    try:
        t0 = time.monotonic()
        result = evaluate(host, deadline_s=3.0, window_s=0.0)
        elapsed = time.monotonic() - t0
    finally:
        nvml.release.set()
    assert elapsed <= 3.0 + SLACK_S, elapsed
    failed = any(f.status == FAIL for f in result.findings)
    assert result.exit_code == (ExitCode.FAIL if failed else ExitCode.UNEVALUATED)
    unknown = [_text(f) for f in result.findings if f.status == UNKNOWN]
    assert any("nvml" in t and "blocked in NVML call nvml" in t for t in unknown), unknown




def test_cli_timeout_10_with_hung_driver(tmp_path, hung_smi):
    """The deadline counts from the process's start: of 10 s, start-up and imports (seconds on a
    loaded machine) come first, and the probes still get enough to be blocked in nvmlInit. (With
    5 s, a machine at load 3 once spent the budget before the nvml probe started, and the report
    was the deadline's fallback, without the probe.)"""
    fake = tmp_path / "fakenvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(HUNG_PYNVML)
    env = dict(os.environ, PYTHONPATH=str(fake))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--timeout", "10", "--json"],
                          env=env, capture_output=True, text=True, timeout=40)
    wall = time.monotonic() - t0
    doc = json.loads(proc.stdout)
    assert doc["run"]["duration_s"] <= 10.0 + SLACK_S
    assert wall <= 10.0 + SLACK_S + 10.0, wall  # generous on a loaded machine
    failed = doc["verdict"]["counts"]["fail"] > 0
    assert proc.returncode == (1 if failed else 3), proc.stderr
    assert doc["probes"]["nvml"]["status"] == "timeout"
    assert "nvmlInit" in doc["probes"]["nvml"]["error"]
    assert any(f["status"] == "unknown" and "nvml" in json.dumps(f) for f in doc["findings"])
    assert "Traceback" not in proc.stderr


def _nvidia_on_pci() -> bool:
    base = pathlib.Path("/sys/bus/pci/devices")
    try:
        return any((d / "vendor").read_text().strip() == "0x10de" for d in base.iterdir())
    except OSError:
        return False


def test_cli_live_on_this_machine_gives_a_verdict_not_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--window", "0"],
                          capture_output=True, text=True,
                          timeout=60)
    assert "Traceback" not in proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    word = first.split(":")[0]
    assert word in ("OK", "WARN", "FAIL", "UNKNOWN"), first
    assert proc.returncode == {"OK": 0, "WARN": 0, "FAIL": 1, "UNKNOWN": 3}[word]
    if not _nvidia_on_pci():
        # no GPU on the bus and no policy expecting one: the GPU checks skip, they do not fail
        assert not any(line.startswith("FAIL gpu.") for line in proc.stdout.splitlines()), proc.stdout


@pytest.mark.parametrize("content", [b"", b"not a tar archive at all\n", b"\x1f\x8b\x08garbage"])
def test_garbage_replay_is_a_one_line_input_error(tmp_path, content):
    bad = tmp_path / "bad.snap.tar.gz"
    bad.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--replay", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in proc.stderr


def test_missing_replay_file_is_an_input_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--replay", str(tmp_path / "nope.tar.gz")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
