"""check's deadline covers the whole run, start-up and writing included: when it comes first, stdout
carries one whole document (or the quiet verdict lines) prepared beforehand, never half of one,
and the exit code says whether a verdict was reached. The watcher is tried over a stand-in
child (``sleep``); the slow steps of a real run are synthesized: a child process whose snapshot
reading, or whose report building, sleeps past the deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

import exporter_cases as C
from ccdiag.core.findings import FAIL, UNKNOWN, Component, Finding
from ccdiag.report.document import validate
from ccdiag.report.fallback import no_verdict, verdict_report, verdict_text
from ccdiag.run.deadline import GuardClient, NoGuard, arm, process_started_at, watch


class _Setup:
    """A watcher in a thread over a stand-in child (``sleep``), and the command's side of it."""

    def __init__(self, deadline_in_s: float, child: tuple[str, ...] = ("sleep", "60")):
        self.child = subprocess.Popen(list(child))
        up_r, up_w = os.pipe()
        down_r, down_w = os.pipe()
        self.out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        slots = (os.memfd_create("t1"), os.memfd_create("t2"))
        self.client = GuardClient(up_w, down_r, slots)
        self.up_w = up_w
        self.exits: list[int] = []
        self.thread = threading.Thread(target=watch, args=(self.child.pid, up_r, down_w, slots,
                                                           time.monotonic() + deadline_in_s),
                                       kwargs=dict(lead_s=0.0, out_fd=out_w, err_fd=err_w, exit=self.exits.append),
                                       daemon=True)
        self.thread.start()

    def output(self) -> bytes:
        os.set_blocking(self.out_r, False)
        try:
            return os.read(self.out_r, 1 << 20)
        except BlockingIOError:
            return b""


def test_at_the_deadline_the_child_is_killed_and_the_latest_fallback_written_whole():
    w = _Setup(0.3)
    w.client.set_fallback('{"a": 1}\n', 3, "no verdict")
    w.client.set_fallback('{"verdict": "fail"}\n', 1, "verdict known")  # the latest one counts
    w.thread.join(5.0)
    assert w.exits == [1] and w.output() == b'{"verdict": "fail"}\n'
    assert w.child.wait(5) == -9  # killed: nothing of the command writes after the fallback


@pytest.mark.slow
def test_a_command_that_claims_its_output_is_never_interrupted_and_its_code_passed_on():
    # the claim must reach the watcher before its deadline: 2 s leaves room on a loaded machine,
    # where 0.2 s did not (the deadline came first and the claim waited for an answer never sent)
    w = _Setup(2.0)
    w.client.set_fallback("x\n", 3, "no verdict")
    assert w.client.claim() is True
    time.sleep(2.3)  # past the deadline: no longer watched
    assert w.exits == [] and w.thread.is_alive()
    os.close(w.up_w)  # the command ends
    w.child.terminate()
    w.thread.join(5.0)
    assert w.exits == [128 + 15] and w.output() == b""


def test_a_command_killed_before_it_claimed_its_output_leaves_the_fallback():
    w = _Setup(30.0)
    w.client.set_fallback("x\n", 3, "no verdict")
    os.close(w.up_w)
    w.child.kill()  # the OOM killer, say
    w.thread.join(5.0)
    assert w.exits == [3] and w.output() == b"x\n"


def test_a_command_that_ends_on_its_own_keeps_its_exit_code_and_its_silence():
    w = _Setup(30.0, child=("sh", "-c", "exit 2"))  # bad input: one line on stderr, exit 2
    w.client.set_fallback("x\n", 3, "no verdict")
    os.close(w.up_w)
    w.thread.join(5.0)
    assert w.exits == [2] and w.output() == b""


def test_no_guard_where_stdout_is_captured(monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    before = time.monotonic()
    guard = arm(10.0)
    assert isinstance(guard, NoGuard) and guard.started >= before  # counted from now, not the test run's start


def test_the_process_start_is_before_now_and_not_long_ago():
    age = time.monotonic() - process_started_at()
    assert 0.0 < age < 24 * 3600


def test_fallback_documents_validate_and_say_what_was_left_out():
    text, code = no_verdict("opening the snapshot", 10.0, True, replayed_from="x.tar.gz")
    doc = json.loads(text)
    validate(doc)
    assert code == 3 and doc["verdict"]["status"] == UNKNOWN and doc["verdict"]["exit_code"] == 3
    assert "opening the snapshot" in doc["findings"][0]["summary"] and doc["run"]["timed_out"] is True
    line, code = no_verdict("probing and judging", 10.0, False)
    assert code == 3 and line.startswith("UNKNOWN:") and "probing and judging" in line
    passed = Finding("x.z", "pass", Component("gpu", "GPU1"), "synthesized pass")
    failed = Finding("x.y", FAIL, Component("gpu", "GPU0"), "synthesized failure")
    cut = verdict_report([failed, passed], 1, {"hostname": "n"}, {"duration_s": 1.0}, {})
    validate(cut)
    assert [f["check"] for f in cut["findings"]] == ["x.y"]  # the problems, not the passes
    assert cut["verdict"]["counts"]["pass"] == 1 and cut["verdict"]["counts"]["fail"] == 1
    assert cut["run"]["omitted"]["sections"][:2] == ["topology", "probes"]
    assert verdict_text([failed], 1, "n", False, False).startswith("FAIL:")


_SLOW_LOAD = """
import sys, time
from ccdiag.host import snapshot
real = snapshot.SnapshotData.load.__func__
snapshot.SnapshotData.load = classmethod(lambda cls, path: (time.sleep(60), real(cls, path))[1])
from ccdiag.commands.cli import main
main(sys.argv[1:])
"""

_SLOW_REPORT = """
import sys, time
from ccdiag.topology import model
model.Topology.to_json = lambda self, *a, **k: time.sleep(60)
from ccdiag.commands.cli import main
main(sys.argv[1:])
"""


def _child(script: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60)
    return proc, time.monotonic() - t0


@pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")
def test_a_snapshot_that_loads_past_the_deadline_gives_one_unknown_document():
    proc, wall = _child(_SLOW_LOAD, "check", "--replay", str(C.HEALTHY), "--json", "--timeout", "2")
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)  # one whole document
    validate(doc)
    assert [f["check"] for f in doc["findings"]] == ["check.deadline"]
    assert "opening the snapshot" in doc["findings"][0]["summary"]
    assert "deadline came before a verdict" in proc.stderr and "Traceback" not in proc.stderr
    assert wall < 2.0 + 10.0  # the child ends at its deadline, not after the 60 s sleep (generous for load)
    text, _ = _child(_SLOW_LOAD, "check", "--replay", str(C.HEALTHY), "--timeout", "2")
    assert text.returncode == 3 and text.stdout.startswith("UNKNOWN:") and len(text.stdout.splitlines()) == 2


@pytest.mark.skipif(not C.DEGRADED.exists(), reason="bundled samples missing")
def test_a_report_that_cannot_be_built_in_time_still_carries_the_verdict_and_every_problem():
    proc, wall = _child(_SLOW_REPORT, "check", "--replay", str(C.DEGRADED), "--json", "--timeout", "4")
    assert proc.returncode == 1, proc.stderr  # a failure found is still a failure
    doc = json.loads(proc.stdout)
    validate(doc)
    assert "topology" not in doc and "probes" not in doc
    assert doc["run"]["omitted"]["sections"][:2] == ["topology", "probes"]
    assert doc["verdict"]["status"] == FAIL and doc["verdict"]["exit_code"] == 1
    from cli_runner import run

    code, out, _ = run("check", "--replay", str(C.DEGRADED), "--json")
    whole = json.loads(out)
    assert code == 1 and doc["verdict"]["counts"] == whole["verdict"]["counts"]  # the verdict counts every finding
    problems = [(f["check"], f["status"]) for f in whole["findings"] if f["status"] in ("fail", "warn", "unknown")]
    assert [(f["check"], f["status"]) for f in doc["findings"]] == problems  # every problem kept
    assert wall < 4.0 + 10.0
