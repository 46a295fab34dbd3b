"""`ccdiag snapshot`: writing, re-writing and redacting snapshots."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile

from click.testing import CliRunner

from ccdiag.commands.cli import cli
from ccdiag.host.door import ReplayHost
from ccdiag.report.redact import redact
from ccdiag.host.snapshot import SnapshotData


def _identifying_snapshot() -> SnapshotData:
    """Synthesized for the test: identifiers in every place a snapshot can hold them."""
    snap = SnapshotData(meta={"hostname": "gpu-node-017.example.org", "format": "x"})
    snap.put_file("/proc/sys/kernel/hostname", "gpu-node-017\n")
    snap.put_file("/sys/class/net/eth0/address", "b8:ce:f6:12:34:56\n")
    snap.put_file("/sys/class/infiniband/mlx5_0/node_guid", "0c42:a103:0079:7a3c\n")
    snap.put_file("/sys/class/infiniband/mlx5_0/ports/1/gids/0", "fe80:0000:0000:0000:0e42:a1ff:fe79:7a3c\n")
    snap.put_file("/sys/class/infiniband/mlx5_0/ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:0a63:5c07\n")
    snap.put_file("/sys/bus/pci/devices/0000:18:00.0/config", b"\x86\x80\xff\xfe")
    snap.net[0] = {"addrs": {"eth0": [{"family": "inet", "address": "10.99.92.7", "netmask": "255.255.255.0"},
                                      {"family": "inet", "address": "127.0.0.1", "netmask": "255.0.0.0"}]},
                   "stats": {}}
    snap.nvml = [
        {"epoch": 0, "call": ["nvmlDeviceGetSerial", 0], "ok": "1654922001234"},
        {"epoch": 0, "call": ["nvmlDeviceGetUUID", 0], "ok": "GPU-5f3e0f4c-2d4e-7b1a-9c0d-1e2f3a4b5c6d"},
    ]
    snap.kmsg[0] = {"lines": ["4,100,5000,-;NVRM: GPU at PCI:0000:18:00: GPU-5f3e0f4c-2d4e-7b1a-9c0d-1e2f3a4b5c6d",
                              "6,101,6000,-;mlx5_core: gpu-node-017 link up 10.99.92.7"]}
    snap.commands = [{"epoch": 0, "argv": ["hostname"], "rc": 0, "stdout": "gpu-node-017\n", "stderr": "",
                      "duration_s": 0.001, "timed_out": False, "error": None}]
    return snap


ORIGINALS = ["gpu-node-017", "b8:ce:f6:12:34:56", "0c42:a103:0079:7a3c", "0e42:a1ff:fe79:7a3c", "10.99.92.7",
             "0a63:5c07", "1654922001234", "5f3e0f4c"]


def _all_text(data: bytes) -> str:
    out = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar:
            if m.isfile():
                out.append(tar.extractfile(m).read().decode("utf-8", "replace"))
            out.append(m.name + " " + m.linkname)
    return "\n".join(out)


def test_redaction_removes_every_identifier_and_stays_consistent():
    red, counts = redact(_identifying_snapshot())
    text = _all_text(red.to_bytes())
    for original in ORIGINALS:
        assert original not in text, original
    assert "127.0.0.1" in text and "255.255.255.0" in text  # not identifying: kept
    rep = ReplayHost(SnapshotData.from_bytes(red.to_bytes()))
    uuid = rep.nvml("nvmlDeviceGetUUID", 0)
    assert uuid.startswith("GPU-") and uuid in rep.read_kmsg()[0]  # same pseudonym everywhere
    assert rep.read_bytes("/sys/bus/pci/devices/0000:18:00.0/config") == b"\x86\x80\xff\xfe"
    assert rep.meta()["redacted"] is True
    assert counts["ipv4"] == 1 and counts["uuid"] == 1 and counts["host"] >= 1


def test_snapshot_cli_records_this_machine_and_redacts_on_rewrite(tmp_path):
    raw = tmp_path / "live.snap.tar.gz"
    res = CliRunner().invoke(cli, ["snapshot", "-o", str(raw)])
    assert res.exit_code == 0, res.output
    assert raw.exists() and "wrote" in res.output
    snap = SnapshotData.load(str(raw))
    assert snap.meta["source"] == "recorded" and snap.meta["hostname"]
    red = tmp_path / "red.snap.tar.gz"
    res = CliRunner().invoke(cli, ["snapshot", "--replay", str(raw), "-o", str(red), "--redact", "--json"])
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads(res.output)
    assert doc["kind"] == "snapshot" and doc["snapshot"]["redacted"] is True
    host = snap.meta["hostname"].split(".")[0]
    import re

    # whole-word search: a short host name ("vm") may legitimately occur inside other words ("nvml")
    assert not re.search(r"(?<![A-Za-z0-9_-])" + re.escape(host) + r"(?![A-Za-z0-9_-])", _all_text(red.read_bytes()))


def test_snapshot_cli_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.snap"
    bad.write_bytes(b"\x00" * 100)
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "snapshot", "--replay", str(bad), "-o",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "not a ccdiag snapshot" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
