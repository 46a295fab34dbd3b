"""check's deadline covers the whole run, start-up and writing included: when it comes first, stdout
carries one whole document (or the quiet verdict lines) prepared beforehand, never half of one,
and the exit code says whether a verdict was reached. The slow steps are synthesized: a child
process whose snapshot reading, or whose report building, sleeps past the deadline."""

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
from ccdiag.report.fallback import no_verdict, verdict_text, without_large_sections
from ccdiag.run.deadline import NoGuard, OutputGuard, arm, process_started_at


def _guard(deadline_in_s: float) -> tuple[OutputGuard, int, list[int]]:
    r, w = os.pipe()
    exits: list[int] = []
    guard = OutputGuard(time.monotonic() + deadline_in_s, fd=w, exit=exits.append, lead_s=0.0)
    return guard, r, exits


def test_at_the_deadline_the_fallback_is_written_whole_and_the_command_writes_nothing():
    guard, r, exits = _guard(0.05)
    guard.set_fallback('{"a": 1}\n', 3, "no verdict")
    guard.start()
    guard._thread.join(2.0)  # the deadline has come
    assert guard.claim() is False  # the command may not write: the guard has ended the process
    assert exits == [3] and guard.fired
    assert os.read(r, 100) == b'{"a": 1}\n'


def test_a_command_that_claims_its_output_first_is_never_interrupted():
    guard, r, exits = _guard(0.2)
    guard.set_fallback("x\n", 3, "no verdict")
    guard.start()
    assert guard.claim() is True
    guard._thread.join(1.0)
    assert not guard._thread.is_alive() and exits == [] and not guard.fired
    os.set_blocking(r, False)
    with pytest.raises(BlockingIOError):
        os.read(r, 10)


def test_the_latest_fallback_is_the_one_written():
    guard, r, exits = _guard(0.1)
    guard.set_fallback("before\n", 3, "x")
    guard.set_fallback("after the verdict\n", 1, "y")
    guard.start()
    guard._thread.join(2.0)
    assert exits == [1] and os.read(r, 100) == b"after the verdict\n"


def test_no_guard_where_stdout_is_captured():
    # pytest captures stdout: a test process must never be ended by a guard
    assert isinstance(arm(time.monotonic() + 0.01), NoGuard)


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
    report = {"schema_version": "1.5.0", "kind": "check", "tool": {}, "host": {}, "run": {"duration_s": 1.0},
              "probes": {}, "topology": None, "findings": []}
    cut = without_large_sections(report)
    assert "probes" not in cut and "topology" not in cut and cut["run"]["omitted"]["sections"] == ["topology", "probes"]
    failed = Finding("x.y", FAIL, Component("gpu", "GPU0"), "synthesized failure")
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
def test_a_report_that_cannot_be_built_in_time_still_carries_the_verdict_and_every_finding():
    proc, wall = _child(_SLOW_REPORT, "check", "--replay", str(C.DEGRADED), "--json", "--timeout", "4")
    assert proc.returncode == 1, proc.stderr  # a failure found is still a failure
    doc = json.loads(proc.stdout)
    validate(doc)
    assert "topology" not in doc and "probes" not in doc
    assert doc["run"]["omitted"]["sections"] == ["topology", "probes"]
    assert doc["verdict"]["status"] == FAIL and doc["verdict"]["exit_code"] == 1
    from cli_runner import run

    code, out, _ = run("check", "--replay", str(C.DEGRADED), "--json")
    whole = json.loads(out)
    assert code == 1 and len(doc["findings"]) == len(whole["findings"])  # every finding kept
    assert wall < 4.0 + 10.0


def test_the_guard_runs_in_its_own_thread_and_never_blocks_the_command():
    guard, _r, exits = _guard(60.0)
    guard.start()
    assert isinstance(guard._thread, threading.Thread) and guard._thread.daemon
    guard.stop()
    guard._thread.join(1.0)
    assert not guard._thread.is_alive() and exits == []
