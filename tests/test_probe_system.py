"""System probe: parsers from tables, a node SYNTHESIZED with synth.sysfs.add_system, faults
on it, and a live run on this machine."""

from __future__ import annotations

import pytest

from ccdiag.host.door import LiveHost, ReplayHost
from ccdiag.probes import system
from ccdiag.host.snapshot import SnapshotData
from synth import sysfs as synth
from conftest import FIXTURES


@pytest.mark.parametrize("text, count", [("0-55,112-167", 112), ("0", 1), ("0-1", 2), ("0,2,4-7", 6),
                                         ("", None), (None, None), ("a-b", None)])
def test_parse_cpulist(text, count):
    assert system.parse_cpulist(text) == count


def test_parse_cpuinfo_count():
    assert system.parse_cpuinfo_count("processor\t: 0\nvendor_id\t: x\n\nprocessor\t: 1\n") == 2
    assert system.parse_cpuinfo_count("") is None


def test_parse_os_release():
    assert system.parse_os_release('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n') == "Ubuntu 22.04.4 LTS"
    assert system.parse_os_release("NAME=x\n") is None


def test_parse_modules_keeps_order():
    text = ("nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
            "nvidia 56868864 1 nvidia_peermem, Live 0x0000000000000000 (POE)\n")
    assert system.parse_modules(text) == ("nvidia_peermem", "nvidia")


def test_parse_nvidia_version_closed_and_open_module():
    closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    assert system.parse_nvidia_version(closed) == "535.104.05"
    # the open module names itself like this (REAL kernel-log line, NVIDIA/NVSentinel#155)
    real = [line for line in (FIXTURES / "kmsg/dmesg-fallen-off-bus-without-xid-multiline.txt").read_text().splitlines()
            if "loading NVIDIA UNIX Open Kernel Module" in line][0]
    assert system.parse_nvidia_version(real) == "570.158.01"
    assert system.parse_nvidia_version("garbage") is None


@pytest.mark.parametrize("line, expected", [
    ("Max locked memory         8388608              8388608              bytes     ", (8388608, 8388608, False)),
    ("Max locked memory         unlimited            unlimited            bytes     ", (None, None, True)),
    ("Max locked memory         65536                unlimited            bytes     ", (65536, None, False)),
    ("Max locked memory         abc                  def                  bytes     ", (None, None, False)),
    ("Max locked memory", (None, None, None)),
    ("Max open files            1024                 4096                 files     ", (None, None, None)),
])
def test_parse_memlock(line, expected):
    assert system.parse_memlock("Limit  Soft Limit  Hard Limit  Units\n" + line + "\n") == expected


def test_parse_memlock_on_this_machines_real_limits():
    text = LiveHost().read_text("/proc/self/limits")
    soft, hard, unlimited = system.parse_memlock(text)
    assert unlimited is not None
    assert unlimited or (soft is not None and soft >= 0)


@pytest.mark.parametrize("cmdline, entries, group_type, mode", [
    ("ro quiet", ["dmar0"], "identity", "passthrough"),
    ("ro quiet", ["dmar0"], "DMA-FQ", "translated"),
    ("ro quiet", ["dmar0"], "DMA", "translated"),
    ("intel_iommu=on iommu=pt", ["dmar0", "dmar1"], None, "passthrough"),
    ("intel_iommu=on", ["dmar0"], None, "translated"),
    ("amd_iommu=off", ["ivhd0"], None, "off"),
    ("ro", [], None, "off"),
    ("ro", None, None, None),
])
def test_iommu_mode(cmdline, entries, group_type, mode):
    assert system.iommu_mode(cmdline, entries, group_type) == mode


def node() -> SnapshotData:
    """SYNTHESIZED node: 2 NUMA nodes, the NVIDIA and mlx5 modules, fabric manager active."""
    snap = synth.new_snapshot("synth-sys-01", kernel="5.15.0-105-generic")
    synth.add_system(snap, memlock=("8388608", "unlimited"), environ={"NCCL_IB_HCA": "=mlx5_0"})
    return snap


def test_collect_synthesized_node():
    obs = system.collect(ReplayHost(node()))
    assert obs.errors == ()
    assert (obs.hostname, obs.kernel, obs.os_release) == ("synth-sys-01", "5.15.0-105-generic", "Ubuntu 22.04.4 LTS")
    assert obs.cpu_count == 224 and [n.cpulist for n in obs.numa_nodes] == ["0-55,112-167", "56-111,168-223"]
    assert "nvidia_peermem" in obs.modules and obs.nvidia_driver_version == "535.104.05"
    assert obs.fabric_manager == "active" and obs.shm_bytes == 1 << 40
    assert (obs.memlock_soft_bytes, obs.memlock_hard_bytes, obs.memlock_unlimited) == (8388608, None, False)
    assert obs.iommu == "passthrough" and "iommu=pt" in obs.cmdline
    assert obs.environ == {"NCCL_IB_HCA": "=mlx5_0"}


def test_fabric_manager_states():
    snap = synth.new_snapshot()
    synth.add_system(snap, fabric_manager="inactive")
    assert system.collect(ReplayHost(snap)).fabric_manager == "inactive"
    snap = synth.new_snapshot()
    synth.add_system(snap, fabric_manager=None)  # systemctl not found (a container)
    obs = system.collect(ReplayHost(snap))
    assert obs.fabric_manager is None and obs.errors == ()


def test_unreadable_and_garbage_files_are_single_errors():
    snap = node()
    synth.put_unreadable(snap, "/proc/modules", "permission")
    synth.put_attr(snap, "/sys/devices/system/cpu/online", "abc")
    obs = system.collect(ReplayHost(snap))
    assert sorted((e.source, e.kind) for e in obs.errors) == [
        ("/proc/modules", "permission"), ("/sys/devices/system/cpu/online", "parse")]
    assert obs.modules == () and obs.cpu_count is None  # no cpuinfo in this snapshot to fall back on
    assert obs.nvidia_driver_version == "535.104.05" and obs.shm_bytes == 1 << 40


def test_no_driver_no_peermem():
    snap = synth.new_snapshot()
    synth.add_system(snap, modules=("mlx5_core", "ib_core"), nvidia_version=None, iommu_group_type=None,
                     cmdline="ro intel_iommu=on")
    obs = system.collect(ReplayHost(snap))
    assert obs.nvidia_driver_version is None and "nvidia_peermem" not in obs.modules
    assert obs.iommu == "translated" and obs.errors == ()


def test_empty_host_gives_nones_and_reasons_not_a_crash():
    obs = system.collect(ReplayHost(SnapshotData()))
    assert obs.kernel is None and obs.modules == () and obs.shm_bytes is None and obs.iommu is None
    sources = {e.source for e in obs.errors}
    assert {"/proc/modules", "/dev/shm", "/proc/self/limits"} <= sources


def test_live_run_reads_modules_and_shm():
    obs = system.collect(LiveHost())
    assert obs.kernel and obs.hostname
    assert obs.shm_bytes is not None and obs.shm_bytes > 0
    assert obs.modules or any(e.source == "/proc/modules" for e in obs.errors)
    assert obs.cpu_count is not None and obs.cpu_count >= 1
    assert obs.memlock_unlimited is not None


def test_live_record_then_replay_gives_identical_observations():
    """What RecordingHost kept of this machine is enough to reproduce every sysfs probe exactly."""
    from ccdiag.host.door import RecordingHost
    from ccdiag.probes import kmsg, netdev, pcie

    rec = RecordingHost()
    modules = (system, pcie, netdev, kmsg)
    live = {m.NAME: m.collect(rec) for m in modules}
    replay = ReplayHost(SnapshotData.from_bytes(rec.snapshot().to_bytes()))
    assert {m.NAME: m.collect(replay) for m in modules} == live


@pytest.mark.parametrize("text,cpus", [("0-3,8", {0, 1, 2, 3, 8}), ("", set()), (None, set()), ("x,2", {2}),
                                       ("5-2", set()), ("0-99999999", set(range(65536)))])
def test_cpulist_cpus_is_bounded_and_skips_damage(text, cpus):
    assert system.cpulist_cpus(text) == cpus


# -- what a node class's known-good set records: the NCCL library and the fabric manager's version -------
@pytest.mark.parametrize("target, version", [
    ("libnccl.so.2.18.3", "2.18.3"), ("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", "2.21.5"),
    ("libnccl.so.2.27.7", "2.27.7"), ("libnccl.so.2", None), ("libnccl-net.so", None), ("libnccl.so.2.x.1", None)])
def test_parse_libnccl_target(target, version):
    """NCCL's packages install libnccl.so.<major>.<minor>.<patch> and link libnccl.so.2 to it (the
    libnccl2 .deb's file list)."""
    assert system.parse_libnccl_target(target) == version


@pytest.mark.parametrize("text, version", [
    # the line nv-fabricmanager --version prints, as public code quotes it: a Go fabric-manager query
    # test (its input with blank lines and a tab), an install transcript for driver 450.102.04, and
    # the version parser of a Python fleet tool ("Fabric Manager version is : 580.159.03")
    ("Fabric Manager version is : 535.161.08\n", "535.161.08"),
    ("\n\n\tFabric Manager version is : 535.161.08\n\n", "535.161.08"),
    ("Fabric Manager version is : 450.102.04", "450.102.04"),
    ("Fabric Manager version is : 580.159.03\n", "580.159.03"),
    ("nv-fabricmanager: command not found", None)])
def test_parse_fabric_manager_version(text, version):
    assert system.parse_fabric_manager_version(text) == version


def test_the_nccl_library_and_the_fabric_managers_version_are_read_where_they_are():
    snap = node()
    synth.put_attr(snap, "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", "")
    synth.put_link(snap, "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")
    synth.record_command(snap, ["nv-fabricmanager", "--version"], "Fabric Manager version is : 535.104.05\n", 0)
    obs = system.collect(ReplayHost(snap))
    assert (obs.nccl_version, obs.nccl_library) == ("2.21.5", "/usr/lib/x86_64-linux-gnu/libnccl.so.2")
    assert obs.fabric_manager_version == "535.104.05" and obs.errors == ()
    # no NCCL package, no fabric manager service: absent, and no error about either
    bare = synth.new_snapshot()
    synth.add_system(bare, fabric_manager="inactive")
    obs = system.collect(ReplayHost(bare))
    assert (obs.nccl_version, obs.fabric_manager_version) == (None, None) and obs.errors == ()
