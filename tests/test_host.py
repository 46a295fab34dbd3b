"""The host door: symlink resolution, read errors, command deadlines, record -> replay fidelity."""

from __future__ import annotations

import errno
import os
import time

import pytest

from ccdiag.host.door import HostReadError, LiveHost, RecordingHost, ReplayHost, resolve_path
from ccdiag.host.nvmlcall import DRIVER_MISSING, GPU_LOST, NOT_RECORDED, NvmlCallError
from ccdiag.host.snapshot import SnapshotData, SnapshotError


@pytest.fixture
def tree(tmp_path):
    """A small sysfs-like tree (synthesized for the test) with relative and absolute symlinks."""
    dev = tmp_path / "sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    dev.mkdir(parents=True)
    (dev / "current_link_width").write_text("16\n")
    (dev / "numa_node").write_text("0\n")
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:17/0000:17:01.0/0000:18:00.0",
               tmp_path / "sys/bus/pci/devices/0000:18:00.0")
    (tmp_path / "sys/class/net").mkdir(parents=True)
    os.symlink("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0", tmp_path / "sys/class/net/abs0")
    os.symlink("loop2", tmp_path / "sys/class/net/loop1")
    os.symlink("loop1", tmp_path / "sys/class/net/loop2")
    return tmp_path


def test_resolve_path_follows_links_and_never_climbs_above_root():
    links = {"/a/b": "../c", "/c": "/d/e", "/x": "../../../etc"}
    assert resolve_path("/a/b/f", links.get) == "/d/e/f"
    assert resolve_path("/x/passwd", links.get) == "/etc/passwd"
    assert resolve_path("/a/./b/../b", links.get) == "/d/b"  # ".." applies to the resolved link


def test_live_reads_through_relative_and_absolute_links_under_root(tree):
    host = LiveHost(str(tree))
    assert host.read_attr("/sys/bus/pci/devices/0000:18:00.0/current_link_width") == "16"
    # an absolute link target is taken relative to the root, never the real /
    assert host.read_attr("/sys/class/net/abs0/numa_node") == "0"
    assert host.realpath("/sys/bus/pci/devices/0000:18:00.0") == "/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    assert host.read_link("/sys/bus/pci/devices/0000:18:00.0").startswith("../../../devices/")


def test_live_read_errors_are_classified(tree):
    host = LiveHost(str(tree))
    with pytest.raises(HostReadError) as missing:
        host.read_attr("/sys/bus/pci/devices/0000:18:00.0/max_link_width")
    assert missing.value.kind == "missing" and missing.value.errno == errno.ENOENT
    with pytest.raises(HostReadError) as loop:
        host.read_attr("/sys/class/net/loop1/mtu")
    assert loop.value.kind == "loop"
    with pytest.raises(HostReadError) as isdir:
        host.read_attr("/sys/devices")
    assert isdir.value.kind == "invalid"
    with pytest.raises(HostReadError):
        host.read_link("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/numa_node")


def test_command_deadline_kills_the_whole_process_group():
    host = LiveHost()
    start = time.monotonic()
    # ignores SIGTERM and leaves a grandchild holding the output pipe
    res = host.run(["bash", "-c", "trap '' TERM; sleep 60 & sleep 60"], timeout=0.5)
    elapsed = time.monotonic() - start
    assert res.timed_out and res.rc is None
    assert elapsed < 0.5 + 10.0  # the group sleeps 60 s: ending far below that is the kill
    assert "killed after" in res.describe()


def test_command_not_found_and_exit_code():
    host = LiveHost()
    assert host.run(["ccdiag-no-such-command"]).error == "not found"
    res = host.run(["bash", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.rc, res.stdout, res.stderr, res.ok) == (3, "out\n", "err\n", False)


def test_record_then_replay_gives_the_same_answers(tree):
    rec = RecordingHost(str(tree))
    a = rec.read_attr("/sys/bus/pci/devices/0000:18:00.0/current_link_width")
    listing = rec.list_dir("/sys/bus/pci/devices")
    real = rec.realpath("/sys/class/net/abs0")
    assert rec.read_attr("/sys/class/net/abs0/numa_node") == "0"
    with pytest.raises(HostReadError):
        rec.read_attr("/sys/bus/pci/devices/0000:18:00.0/absent")
    cmd = rec.run(["bash", "-c", "echo hello; exit 2"])
    rec.next_epoch(0)
    (tree / "sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/current_link_width").write_text("8\n")
    b = rec.read_attr("/sys/bus/pci/devices/0000:18:00.0/current_link_width")
    data = rec.snapshot().to_bytes()

    rep = ReplayHost(SnapshotData.from_bytes(data))
    assert rep.read_attr("/sys/bus/pci/devices/0000:18:00.0/current_link_width") == a == "16"
    assert rep.list_dir("/sys/bus/pci/devices") == listing
    assert rep.realpath("/sys/class/net/abs0") == real
    with pytest.raises(HostReadError) as err:
        rep.read_attr("/sys/bus/pci/devices/0000:18:00.0/absent")
    assert err.value.kind == "missing"
    replayed = rep.run(["bash", "-c", "echo hello; exit 2"])
    assert (replayed.rc, replayed.stdout) == (cmd.rc, cmd.stdout)
    assert rep.run(["never", "ran"]).error == "not recorded in snapshot"
    # epoch 1 sees the changed counter, epoch 0 the old one
    rep.next_epoch(5)
    assert rep.read_attr("/sys/bus/pci/devices/0000:18:00.0/current_link_width") == b == "8"
    # files not re-read in epoch 1 fall back to epoch 0
    assert rep.read_attr("/sys/class/net/abs0/numa_node") == "0"
    # what was never read is absent from the snapshot, and says so
    with pytest.raises(HostReadError, match="not in snapshot"):
        rep.read_attr("/sys/bus/pci/devices/0000:18:00.0/max_link_speed")


def test_replay_of_read_errors_keeps_their_class():
    snap = SnapshotData()
    snap.put_error("/sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent", "invalid", errno.EINVAL,
                   "Invalid argument")
    snap.put_error("/proc/self/limits", "permission", errno.EACCES, "Permission denied")
    rep = ReplayHost(SnapshotData.from_bytes(snap.to_bytes()))
    with pytest.raises(HostReadError) as e1:
        rep.read_text("/sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent")
    with pytest.raises(HostReadError) as e2:
        rep.read_text("/proc/self/limits")
    assert (e1.value.kind, e2.value.kind) == ("invalid", "permission")
    assert rep.list_dir("/sys/class/infiniband/mlx5_0/ports/1/hw_counters") == ["np_cnp_sent"]


def test_nvml_replay_keeps_error_classes_and_init_failure():
    snap = SnapshotData(nvml=[
        {"epoch": 0, "call": ["nvmlInit"], "ok": None},
        {"epoch": 0, "call": ["nvmlDeviceGetUUID", 0], "ok": "GPU-1"},
        {"epoch": 0, "call": ["nvmlDeviceGetUUID", 1], "error": GPU_LOST, "code": 15, "message": "GPU is lost"},
    ])
    rep = ReplayHost(snap)
    assert rep.nvml("nvmlDeviceGetUUID", 0) == "GPU-1"
    with pytest.raises(NvmlCallError) as lost:
        rep.nvml("nvmlDeviceGetUUID", 1)
    assert lost.value.error_class == GPU_LOST
    with pytest.raises(NvmlCallError) as unrec:
        rep.nvml("nvmlDeviceGetName", 0)
    assert unrec.value.error_class == NOT_RECORDED
    nodriver = ReplayHost(SnapshotData(nvml=[{"epoch": 0, "call": ["nvmlInit"], "error": DRIVER_MISSING,
                                              "code": 12, "message": "NVML Shared Library Not Found"}]))
    with pytest.raises(NvmlCallError) as nd:
        nodriver.nvml("nvmlDeviceGetCount")
    assert nd.value.error_class == DRIVER_MISSING


@pytest.mark.gpu(False)
def test_live_host_without_driver_reports_driver_missing():
    with pytest.raises(NvmlCallError) as exc:
        LiveHost().nvml("nvmlDeviceGetCount")
    assert exc.value.error_class == DRIVER_MISSING


@pytest.mark.parametrize("payload", [b"", b"not a tar", b"\x1f\x8b\x08\x00garbage"])
def test_bad_snapshot_bytes_are_refused_with_a_clear_error(payload):
    with pytest.raises(SnapshotError) as exc:
        SnapshotData.from_bytes(payload, name="ticket.snap")
    assert "ticket.snap" in str(exc.value)


def test_truncated_and_future_snapshots_are_refused():
    snap = SnapshotData(meta={"hostname": "n1"})
    snap.put_file("/sys/x", "1\n")
    data = snap.to_bytes()
    with pytest.raises(SnapshotError):
        SnapshotData.from_bytes(data[: len(data) // 2])
    import io
    import json
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        meta = json.dumps({"format": "ccdiag-snapshot", "format_version": 99}).encode()
        info = tarfile.TarInfo("meta.json")
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    with pytest.raises(SnapshotError) as exc:
        SnapshotData.from_bytes(buf.getvalue())
    assert "newer" in str(exc.value)


def test_run_deadline_caps_every_command_and_close_kills_leftovers():
    import threading

    host = LiveHost()
    host.deadline = time.monotonic() + 0.6
    start = time.monotonic()
    res = host.run(["sleep", "30"], timeout=30)
    assert res.timed_out and time.monotonic() - start < 2.0
    late = host.run(["true"])
    assert late.rc is None and "deadline" in late.error
    # a command started by an abandoned probe thread is killed by close()
    host2 = LiveHost()
    t = threading.Thread(target=host2.run, args=(["sleep", "30"],), kwargs={"timeout": 60}, daemon=True)
    t.start()
    for _ in range(100):
        if host2._procs:
            break
        time.sleep(0.02)
    assert host2.kill_children() == 1
    t.join(3)
    assert not t.is_alive()


def _mutated_sample(member: str, edit) -> bytes:
    """The bundled healthy sample with one JSON member edited into a wrong shape (damage made by the test)."""
    import gzip
    import io
    import json
    import pathlib
    import tarfile

    src = pathlib.Path(__file__).resolve().parent.parent / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
    raw = gzip.decompress(src.read_bytes())
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tin, tarfile.open(fileobj=out, mode="w") as tout:
        for m in tin:
            data = tin.extractfile(m).read() if m.isfile() else None
            if m.name == member:
                data = json.dumps(edit(json.loads(data))).encode()
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
    return gzip.compress(out.getvalue())


@pytest.mark.parametrize("member,edit", [
    ("meta.json", lambda d: dict(d, format_version="x")),
    ("index.json", lambda d: dict(d, listings=[1])),
    ("index.json", lambda d: dict(d, kmsg={"x": {}})),
    ("index.json", lambda d: dict(d, fs_errors={"0": {"/a": "text"}})),
    ("index.json", lambda d: dict(d, environ=[1])),
    ("nvml.json", lambda d: ["x"]),
    ("commands.json", lambda d: [{"rc": 0}]),
], ids=["version", "listings", "kmsg", "fs_errors", "environ", "nvml", "commands"])
def test_snapshot_members_of_the_wrong_shape_are_refused(member, edit):
    with pytest.raises(SnapshotError, match="corrupt snapshot"):
        SnapshotData.from_bytes(_mutated_sample(member, edit))
