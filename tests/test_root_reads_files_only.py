"""``--root DIR`` reads a copied tree from its files alone: no command of this machine runs.

Why: ``nvidia-smi``, ``dmesg`` and ``systemctl`` describe the machine ccdiag runs on, not the tree;
an XID in this machine's ``dmesg`` once failed an empty tree. node_exporter's root options only
prefix file reads, and so does ccdiag's. Here every command a probe could ask for is stood in by a
script on the PATH that writes its name to a log; after ``check``, ``topo``, ``nccl`` and
``snapshot`` over an empty root the log must be empty.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

from ccdiag.host.door import NOT_RUN_UNDER_ROOT, LiveHost

#: every command name a probe runs (probes/smi_topo.py, kmsg.py, system.py) and a few more that a
#: future probe might reach for; each stand-in records that it was called
STAND_INS = ("nvidia-smi", "dmesg", "journalctl", "systemctl", "lspci", "ibstat", "ibv_devinfo", "ip", "ethtool",
             "ldconfig", "lsmod", "modinfo", "numactl", "dcgmi")


def test_the_door_runs_nothing_under_a_root(tmp_path):
    result = LiveHost(str(tmp_path)).run([sys.executable, "-c", "open('ran', 'w')"])
    assert result.error == NOT_RUN_UNDER_ROOT and result.rc is None and not result.ok
    assert not (tmp_path / "ran").exists() and not os.path.exists("ran")
    assert "not run under --root" in result.describe()


@pytest.fixture
def recording_path(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "called.log"
    for name in STAND_INS:
        script = bindir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit 0\n')
        script.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return env, log


@pytest.mark.slow  # four CLI runs in child processes
def test_check_topo_nccl_and_snapshot_on_an_empty_root_call_no_command(tmp_path, recording_path):
    env, log = recording_path
    root = tmp_path / "tree"
    root.mkdir()
    snap = tmp_path / "tree.snap.tar.gz"
    runs = {
        "check": ["check", "--root", str(root), "--window", "0", "--timeout", "20", "--json"],
        "topo": ["topo", "--root", str(root), "--json"],
        "nccl": ["nccl", "--root", str(root)],
        "snapshot": ["snapshot", "--root", str(root), "--window", "0", "-o", str(snap)],
    }
    for name, args in runs.items():
        proc = subprocess.run([sys.executable, "-m", "ccdiag", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode in (0, 1, 3), (name, proc.returncode, proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr, name
        if name == "check":
            report = json.loads(proc.stdout)
            assert report["findings"], "an empty tree still gets findings (unknown or skip), never silence"
    assert not log.exists() or log.read_text() == "", log.read_text()
    # the snapshot says the commands were not run, so a replay judges the tree as the live run did
    with tarfile.open(snap) as tar:
        names = tar.getnames()
        member = next(n for n in names if n.endswith("commands.json"))
        commands = json.load(tar.extractfile(member))
    assert commands and all(c["error"] == NOT_RUN_UNDER_ROOT for c in commands)
