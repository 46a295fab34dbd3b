"""Files ccdiag writes: atomically (a temporary file in the same directory, synced, renamed), with
the caller's umask for reports and textfiles, owner-only for snapshots (they carry the kernel log)
unless asked otherwise; an unwritable --output keeps the verdict on stdout and the node's exit code."""

from __future__ import annotations

import json
import os
import stat

import pytest

import exporter_cases as C
from cli_runner import run
from ccdiag.core.output import current_umask, write_atomic

pytestmark = pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")


@pytest.fixture
def umask():
    def set_(value):
        old = os.umask(value)
        restore.append(old)

    restore = []
    yield set_
    for old in restore[:1]:
        os.umask(old)


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_atomic_takes_the_umask_and_leaves_no_temporary_file(tmp_path, umask):
    umask(0o027)
    assert current_umask() == 0o027
    path = tmp_path / "r.json"
    write_atomic(str(path), "{}\n")
    assert mode_of(path) == 0o640
    umask(0o077)
    write_atomic(str(path), "{}\n")
    assert mode_of(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("old\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write_atomic(str(path), "new\n" * 1000)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_check_report_and_textfile_follow_the_umask(tmp_path, umask):
    umask(0o077)
    report = tmp_path / "report.json"
    code, out, err = run("check", "--replay", str(C.HEALTHY), "-o", str(report), "--textfile", str(tmp_path))
    assert mode_of(report) == 0o600
    assert mode_of(tmp_path / "ccdiag.prom") == 0o600
    umask(0o022)
    code, out, err = run("check", "--replay", str(C.HEALTHY), "-o", str(report))
    assert mode_of(report) == 0o644


def test_a_snapshot_is_for_its_owner_unless_asked(tmp_path, umask):
    umask(0o022)
    snap = tmp_path / "s.snap.tar.gz"
    code, out, err = run("snapshot", "--replay", str(C.HEALTHY), "-o", str(snap))
    assert code == 0, err
    assert mode_of(snap) == 0o600
    code, out, err = run("snapshot", "--replay", str(C.HEALTHY), "-o", str(snap), "--mode", "0640")
    assert code == 0, err
    assert mode_of(snap) == 0o640
    code, out, err = run("snapshot", "--replay", str(C.HEALTHY), "-o", str(snap), "--mode", "999")
    assert code == 2 and "--mode 999" in err


def test_an_unwritable_output_keeps_the_verdict_and_the_exit_code(tmp_path):
    code_ok, out_ok, _ = run("check", "--replay", str(C.HEALTHY), "--json")
    code, out, err = run("check", "--replay", str(C.HEALTHY), "--json", "-o", str(tmp_path / "nope" / "r.json"))
    assert code == code_ok
    assert json.loads(out)["verdict"] == json.loads(out_ok)["verdict"]
    assert "cannot write report" in err and "nope" in err
