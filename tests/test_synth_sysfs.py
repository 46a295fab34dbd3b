"""The SYNTHESIZED sysfs builders and the ttar reader: the shapes they produce must be the kernel's
(relative symlink targets, one-line attributes), because probes are tested on them."""

from __future__ import annotations

import pytest

from ccdiag.host.door import HostReadError, ReplayHost
from ccdiag.host.snapshot import SnapshotData
from synth import sysfs as synth
from ttar import parse_ttar

CHAIN = ["pci0000:17", "0000:17:01.0", "0000:18:00.0"]


def test_pci_links_have_the_kernels_relative_targets():
    snap = synth.new_snapshot()
    real = synth.add_pci_device(snap, CHAIN, **synth.H100_SXM)
    assert real == "/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    assert snap.links["/sys/bus/pci/devices/0000:18:00.0"] == "../../../devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    assert snap.links[f"{real}/driver"] == "../../../../bus/pci/drivers/nvidia"
    assert snap.links["/sys/bus/pci/devices/0000:17:01.0"] == "../../../devices/pci0000:17/0000:17:01.0"
    host = ReplayHost(snap)
    assert host.read_attr("/sys/bus/pci/devices/0000:18:00.0/class") == "0x030200"
    assert host.read_bytes(f"{real}/vendor") == b"0x10de\n"
    assert host.read_attr("/sys/bus/pci/devices/0000:17:01.0/class") == "0x060400"  # auto-created root port


def test_ib_and_net_links_resolve_like_the_kernels():
    snap = synth.new_snapshot()
    synth.add_pci_device(snap, CHAIN, **synth.CONNECTX7_IB)
    dev = synth.add_ib_device(snap, "mlx5_0", "0000:18:00.0")
    net = synth.add_netdev(snap, "ib0", pci_bdf="0000:18:00.0")
    assert snap.links["/sys/class/infiniband/mlx5_0"] == "../../devices/pci0000:17/0000:17:01.0/0000:18:00.0/infiniband/mlx5_0"
    assert snap.links["/sys/class/net/ib0"] == "../../devices/pci0000:17/0000:17:01.0/0000:18:00.0/net/ib0"
    assert snap.links[f"{dev}/device"] == "../../../0000:18:00.0"
    host = ReplayHost(snap)
    assert host.realpath("/sys/class/infiniband/mlx5_0/device") == "/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    assert host.list_dir("/sys/class/net/ib0/device/infiniband") == ["mlx5_0"]
    assert host.realpath("/sys/class/net/ib0") == net
    with pytest.raises(HostReadError) as err:
        host.read_attr("/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/5")  # unused GID: EINVAL
    assert err.value.kind == "invalid"


def test_unknown_bdf_is_refused():
    with pytest.raises(KeyError):
        synth.add_ib_device(synth.new_snapshot(), "mlx5_0", "0000:99:00.0")


def test_snapshot_says_synthesized_and_round_trips():
    snap = synth.new_snapshot("n1", time_epoch=1700000000.0)
    synth.add_system(snap)
    assert snap.meta["synthesized"] is True and snap.meta["source"] == "synthesized"
    again = SnapshotData.from_bytes(snap.to_bytes())
    assert again.meta["time_epoch"] == 1700000000.0 and again.statvfs["/dev/shm"]["total_bytes"] == 1 << 40
    assert ReplayHost(again).read_attr("/proc/self/limits").splitlines()[0].startswith("Limit")


def test_kmsg_records_continue_sequence_numbers():
    snap = SnapshotData()
    synth.add_kmsg(snap, [(1.5, "a")])
    lines = synth.add_kmsg(snap, [(2.25, "b\nc", 3), "6,99,1,-;raw"])
    assert lines == ["4,0,1500000,-;a", "3,1,2250000,-;b\\x0ac", "6,99,1,-;raw"]


def test_cpulist_merge():
    assert synth._merge_cpulists(["0-55,112-167", "56-111,168-223"]) == "0-223"
    assert synth._merge_cpulists(["0-3", "8,9"]) == "0-3,8-9"


def test_ttar_reader_files_dirs_links_eof_and_modes():
    text = "\n".join([
        "#ccdiag-source: synthesized for this test",
        "Directory: class/x", "Mode: 755", "# ttar - - -",
        "Path: class/x/a", "Lines: 1", "hello", "Mode: 644", "# ttar - - -",
        "Path: class/x/b", "Lines: 2", "two", "", "Mode: 644", "# ttar - - -",
        "Path: class/x/c", "Lines: 1", "no newlineEOF", "Mode: 644", "# ttar - - -",
        "Path: class/x/d", "Lines: 0", "Mode: 644", "# ttar - - -",
        "Path: class/x/secret", "Lines: 1", "x", "Mode: 200", "# ttar - - -",
        "Path: class/x/link", "SymlinkTo: ../y", "# ttar - - -",
        "Path: class/x/nul", "Lines: 1", "aNULLBYTEbEOF", "Mode: 644",
    ])
    snap = parse_ttar(text, prefix="/sys")
    files = snap.files[0]
    assert files["/sys/class/x/a"] == b"hello\n" and files["/sys/class/x/b"] == b"two\n\n"
    assert files["/sys/class/x/c"] == b"no newline" and files["/sys/class/x/d"] == b""
    assert files["/sys/class/x/nul"] == b"a\0b"
    assert files["/sys/class/x/secret"]["kind"] == "permission"
    assert snap.links["/sys/class/x/link"] == "../y" and "/sys/class/x" in snap.dirs
    with pytest.raises(ValueError):
        parse_ttar("Path: a\nbogus\n")
