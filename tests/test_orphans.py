"""Nothing ccdiag starts or writes outlives it: a ``check`` killed with SIGKILL (no handler runs)
takes its running command with it, and a snapshot writer killed mid-write leaves a temporary that
the next write removes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from ccdiag.core.output import TEMP_PREFIX, _host_token
from ccdiag.host.snapshot import FOREIGN_TEMP_MAX_AGE_S, SnapshotData, sweep_stale_temporaries


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.slow  # a child process that starts a command
def test_a_command_dies_with_a_sigkilled_ccdiag():
    code = "from ccdiag.host.door import LiveHost\nLiveHost('/').run(['sleep', '83'], timeout=60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        end = time.monotonic() + 30
        while not psutil.Process(proc.pid).children(recursive=True) and time.monotonic() < end:
            time.sleep(0.05)
        assert [c.cmdline() for c in psutil.Process(proc.pid).children(recursive=True)] == [["sleep", "83"]]
        proc.kill()  # SIGKILL: no termination handler runs
        proc.wait(10)
        end = time.monotonic() + 10
        left = True
        while left and time.monotonic() < end:
            left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "83"]]
            time.sleep(0.05)
        assert not left
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_dead_writers_temporary_is_swept_on_the_next_write(tmp_path):
    dead = tmp_path / f"{TEMP_PREFIX}{_host_token()}-{_dead_pid()}-abc123"
    dead.write_bytes(b"x" * 4096)  # a full-size temporary a SIGKILLed writer left
    live = tmp_path / f"{TEMP_PREFIX}{_host_token()}-{os.getppid()}-def456"  # a writer still running
    live.write_bytes(b"y")
    foreign = tmp_path / f"{TEMP_PREFIX}otherhost-{_dead_pid()}-ghi789"  # another host's, recent
    foreign.write_bytes(b"z")
    old = tmp_path / ".ccdiag-oldform"  # the older form, a day old
    old.write_bytes(b"o")
    os.utime(old, (time.time() - FOREIGN_TEMP_MAX_AGE_S - 60,) * 2)
    unrelated = tmp_path / ".other-file"
    unrelated.write_bytes(b"u")
    SnapshotData().save(str(tmp_path / "new.snap.tar.gz"))
    left = sorted(p.name for p in tmp_path.iterdir())
    assert dead.name not in left and old.name not in left
    assert live.name in left and foreign.name in left and unrelated.name in left and "new.snap.tar.gz" in left
    assert sweep_stale_temporaries(str(tmp_path)) == []  # nothing more to sweep
