"""SIGTERM and SIGHUP end ``ccdiag check`` and ``ccdiag snapshot`` with 128 + the signal's number,
and leave no process behind: commands run in sessions of their own (so a deadline can kill a whole
tree), out of reach of a signal to ccdiag's process group, so ccdiag kills every group it started
before it exits.

The hang is synthesized: a ``nvidia-smi`` stand-in on PATH that ignores SIGTERM and never exits
(what a wedged GPU's does), found by a live run of this machine (under ``--root`` nothing runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from wedged import write_hung_smi


@pytest.fixture
def hung_smi(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pids = tmp_path / "smi.pids"
    write_hung_smi(bindir, pids, ignored="TERM HUP")
    yield bindir, pids
    for pid in (pids.read_text().split() if pids.exists() else ()):
        try:
            os.killpg(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _left(bindir, pids) -> list[str]:
    """Processes still running that the run started: the stand-in, or anything from its directory."""
    left = []
    started = {int(p) for p in pids.read_text().split()} if pids.exists() else set()
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if proc.info["pid"] in started or str(bindir) in cmd:
            left.append(f"{proc.info['pid']} {cmd}")
    return left


def _hup(disposition):
    """For the child, before it runs: SIGHUP's disposition set here, not inherited from whatever
    started the tests (under ``nohup`` it arrives ignored, and ccdiag leaves an ignored SIGHUP so)."""
    return lambda: signal.signal(signal.SIGHUP, disposition)


def _run_and_signal(args, bindir, pids, sig, when: str, tmp_path, hup=signal.SIG_DFL, then=None):
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.Popen([sys.executable, "-m", "ccdiag", *args], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_hup(hup))
    try:
        if when == "starting":
            time.sleep(0.2)
        else:
            end = time.monotonic() + 30
            while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < end:
                time.sleep(0.05)
            assert pids.exists(), "the stand-in nvidia-smi never started"
            if when == "later":
                time.sleep(1.0)
        proc.send_signal(sig)
        if then is not None:
            time.sleep(1.0)
            assert proc.poll() is None, "ended by a signal it was told to ignore"
            proc.send_signal(then)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("when", ["running", "later"])
def test_a_signalled_check_exits_128_plus_signum_and_leaves_no_process(hung_smi, tmp_path, sig, when):
    bindir, pids = hung_smi
    code, err = _run_and_signal(["check", "--timeout", "60"],
                                bindir, pids, sig, when, tmp_path)
    assert code == 128 + sig, err
    assert f"terminated by {signal.Signals(sig).name}" in err and "Traceback" not in err
    time.sleep(0.3)
    assert _left(bindir, pids) == []


def test_a_check_started_under_nohup_ignores_sighup_and_still_ends_on_sigterm(hung_smi, tmp_path):
    bindir, pids = hung_smi
    code, err = _run_and_signal(["check", "--timeout", "60"],
                                bindir, pids, signal.SIGHUP, "running", tmp_path, hup=signal.SIG_IGN,
                                then=signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, err
    assert "terminated by SIGTERM" in err and "Traceback" not in err
    time.sleep(0.3)
    assert _left(bindir, pids) == []


def test_a_check_signalled_while_starting_leaves_no_process(hung_smi, tmp_path):
    """Before the handler is installed the signal's default action ends Python (-15); after, 143.
    Either way nothing is left."""
    bindir, pids = hung_smi
    code, err = _run_and_signal(["check", "--timeout", "60"],
                                bindir, pids, signal.SIGTERM, "starting", tmp_path)
    assert code in (-signal.SIGTERM, 128 + signal.SIGTERM), err
    time.sleep(0.3)
    assert _left(bindir, pids) == []


def test_a_signalled_snapshot_leaves_no_process_and_no_partial_file(hung_smi, tmp_path):
    bindir, pids = hung_smi
    out = tmp_path / "snap.tar.gz"
    code, err = _run_and_signal(["snapshot", "-o", str(out)],
                                bindir, pids, signal.SIGTERM, "running", tmp_path)
    assert code == 128 + signal.SIGTERM, err
    time.sleep(0.3)
    assert _left(bindir, pids) == []
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith((".snap", "snap"))] == []


def test_the_signal_codes_are_documented():
    from ccdiag.core.exitcodes import SIGNAL_EXIT_CODES, SIGNAL_EXIT_DOC

    for name, code in SIGNAL_EXIT_CODES.items():
        assert code == 128 + signal.Signals[name]
        assert f"{code} {name}" in SIGNAL_EXIT_DOC
