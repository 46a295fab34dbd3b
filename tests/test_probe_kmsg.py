"""Kernel-log probe: REAL log lines from tests/fixtures/kmsg (each file says where it comes from),
one SYNTHESIZED kmsg record file (it says so), and the source fallbacks on replayed hosts."""

from __future__ import annotations

import pytest

from ccdiag.host.door import CommandResult, HostReadError, LiveHost, ReplayHost
from ccdiag.probes import kmsg
from ccdiag.host.snapshot import SnapshotData
from synth import sysfs as synth
from conftest import FIXTURES

KMSG = FIXTURES / "kmsg"


def lines_of(name: str) -> list[str]:
    text = (KMSG / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if not line.startswith("#ccdiag-")]


def events_of(name: str):
    events, scanned = kmsg.parse_lines(lines_of(name))
    return events, scanned


# -- framing -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, expected", [
    ("4,1003,6000000000,-;NVRM: Xid (PCI:0000:18:00): 79, x", (6000.0, "NVRM: Xid (PCI:0000:18:00): 79, x")),
    ("<4>[   10.735323] pci 0000:04:00.0: msg", (10.735323, "pci 0000:04:00.0: msg")),
    ("[ 4254.197816] NVRM: GPU at PCI:0000:5d:00: GPU-f1", (4254.197816, "NVRM: GPU at PCI:0000:5d:00: GPU-f1")),
    ("[  812.5] node7 kernel: mlx5_core 0000:0c:00.0 ib0: Link down", (812.5, "mlx5_core 0000:0c:00.0 ib0: Link down")),
    ("[Fri Aug 30 11:43:09 2024] NVRM: hello", (None, "NVRM: hello")),
    ("Oct 02 10:41:07 srv-r07-u12 kernel: NVRM: hello", (None, "NVRM: hello")),
    ("Aug 16 19:25:51 host kernel: [85385.218434] NVRM: hello", (85385.218434, "NVRM: hello")),
    (" SUBSYSTEM=pci", None), (" DEVICE=+pci:0000:0c:00.0", None), ("", None),
])
def test_split_line(line, expected):
    assert kmsg.split_line(line) == expected


def test_kmsg_record_escaped_newline_is_joined():
    t, msg = kmsg.split_line("4,1,100,-;a\\x0ab")
    assert (t, msg) == (0.0001, "a b")


# -- real lines ----------------------------------------------------------------------------------------
def test_xid_with_quoted_unknown_pid_and_ctime_stamps():
    events, scanned = events_of("dmesg-ctime-xid13-xid109-pid-unknown.txt")
    assert scanned == 5
    assert [(e.kind, e.code, e.bdf, e.pid, e.time_s) for e in events] == [
        ("xid", 13, "0000:cb:00.0", None, None)] * 3 + [("xid", 109, "0000:cb:00.0", 1797828, None)]


def test_xid79_with_pid_but_no_name_and_gpu_uuid_line():
    events, _ = events_of("dmesg-xid79-pid-no-name-gpu-at-pci-uuid.txt")
    assert [(e.kind, e.bdf) for e in events] == [
        ("gpu_uuid", "0000:01:00.0"), ("xid", "0000:01:00.0"), ("fallen_off_bus", "0000:01:00.0")]
    uuid, xid, fell = events
    assert uuid.device == "GPU-18af74bb-7c72-ff70-e447-87d48378ea20"
    assert (xid.code, xid.pid, xid.time_s) == (79, 8828, 24307.640018)
    assert fell.time_s == 24307.640021


def test_xid79_crash_dump_continuation_lines_are_not_events():
    events, scanned = events_of("dmesg-xid79-crash-dump-multiline-continuation.txt")
    assert scanned == 8
    assert [e.kind for e in events] == ["gpu_uuid", "xid", "fallen_off_bus"]
    assert events[1].pid is None and events[1].code == 79 and events[1].bdf == "0000:5d:00.0"


def test_fallen_off_bus_without_xid_over_three_lines():
    events, _ = events_of("dmesg-fallen-off-bus-without-xid-multiline.txt")
    assert [(e.kind, e.bdf, e.time_s) for e in events] == [("fallen_off_bus", "0000:b3:00.0", None),
                                                           ("driver_load", None, 1843.439669)]
    assert (events[1].device, events[1].severity) == ("570.158.01", "open")  # the open GPU kernel modules
    assert "not responding" in events[0].message


def test_journal_lines_with_only_a_kernel_prefix():
    events, _ = events_of("journal-xid45-kernel-prefix-only.txt")
    assert [(e.code, e.bdf, e.pid) for e in events] == [
        (45, "0000:dc:00.0", 1818990), (45, "0000:ed:00.0", 1818992), (45, "0000:ba:00.0", 1818989),
        (45, "0000:97:00.0", 1818987)]


def test_old_driver_xids_without_pid():
    events, _ = events_of("dmesg-xid31-xid32-no-pid-old-driver.txt")
    assert [(e.code, e.pid, e.time_s) for e in events] == [(32, None, 24128.828315), (32, None, 24128.828608),
                                                            (31, None, 24128.834365)]


def test_mlx5_ib_port_events_init_is_skipped_active_is_up():
    events, scanned = events_of("journal-mlx5-ib-port-link-init-active.txt")
    assert scanned == 4
    assert [(e.kind, e.bdf, e.device, e.port, e.code) for e in events] == [
        ("ib_link_up", "0000:ab:00.0", "mlx5_5", 1, None)]


def test_aer_source_device_and_reporting_port():
    events, _ = events_of("dmesg-aer-corrected-received-from-ctime.txt")
    assert [(e.kind, e.bdf, e.device) for e in events] == [("aer", "0000:06:00.0", "0000:00:1d.3")] * 2


def test_aer_with_requester_id_names_the_port():
    events, _ = events_of("kernel-aer-corrected-received-id-no-stamp.txt")
    assert [(e.kind, e.bdf) for e in events] == [("aer", "0000:00:1c.5")]


def test_synthesized_kmsg_records_link_flap_and_escaped_multiline():
    events, scanned = events_of("SYNTHESIZED-kmsg-records-mlx5e-link-flap.txt")
    assert scanned == 4  # the two continuation lines are not records
    assert [(e.kind, e.bdf, e.device, e.time_s) for e in events] == [
        ("ib_link_down", "0000:0c:00.0", "ib0", 5712.345678), ("ib_link_up", "0000:0c:00.0", "ib0", 5714.345678),
        ("xid", "0000:18:00.0", None, 6000.0), ("fallen_off_bus", "0000:18:00.0", None, 6000.0001)]


@pytest.mark.parametrize("message, kind, code, port, device", [
    ("nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 20034, Fatal, Link 50 LTSSM Fault Up", "sxid", 20034, None,
     "nvidia-nvswitch3"),
    ("mlx5_0:port 1 link down", "ib_link_down", None, 1, "mlx5_0"),
    ("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN", "ib_link_down", None, 1, "mlx5_5"),
    ("igc 0000:05:00.0 eth5: NIC Link is Down", None, None, None, None),
    ("NVRM: Xid (PCI:0000:10:00.0): 79, GPU has fallen off the bus.", "xid", 79, None, None),
])
def test_match_event_table(message, kind, code, port, device):
    """``code`` is only ever an XID/SXID number; a port event carries its port in ``port``."""
    event = kmsg.match_event(message, None)
    if kind is None:
        assert event is None
    else:
        assert (event.kind, event.code, event.port, event.device) == (kind, code, port, device)


def test_parse_uptime():
    assert kmsg.parse_uptime("8000.49 15000.10\n") == 8000.49
    assert kmsg.parse_uptime("") is None and kmsg.parse_uptime("abc") is None


# -- sources -----------------------------------------------------------------------------------------
def test_collect_from_kmsg_records_with_uptime():
    snap = SnapshotData()
    synth.add_kmsg(snap, [(812.345678, "NVRM: Xid (PCI:0000:1b:00): 94, pid=77, name=python3, Contained: SM")],
                   uptime_s=900.0)
    obs = kmsg.collect(ReplayHost(snap))
    assert (obs.source, obs.uptime_s, obs.lines_scanned, obs.errors) == ("/dev/kmsg", 900.0, 1, ())
    (e,) = obs.events
    assert (e.kind, e.code, e.bdf, e.pid, e.time_s) == ("xid", 94, "0000:1b:00.0", 77, 812.345678)


def test_falls_back_to_dmesg_when_kmsg_is_not_permitted():
    snap = SnapshotData()
    snap.kmsg[0] = {"error": {"kind": "permission", "errno": 1, "message": "Operation not permitted"}}
    synth.record_command(snap, kmsg.DMESG_ARGV, "\n".join(lines_of("dmesg-xid79-crash-dump-multiline-continuation.txt")))
    obs = kmsg.collect(ReplayHost(snap))
    assert obs.source == "dmesg" and [e.kind for e in obs.events] == ["gpu_uuid", "xid", "fallen_off_bus"]
    assert sorted((e.source, e.kind) for e in obs.errors) == [("/dev/kmsg", "permission"), ("/proc/uptime", "missing")]


def test_falls_back_to_journalctl_when_dmesg_is_missing():
    snap = SnapshotData()
    synth.put_attr(snap, "/proc/uptime", "100.00 150.00")
    synth.record_command(snap, kmsg.DMESG_ARGV, rc=None, error="not found")
    synth.record_command(snap, kmsg.JOURNAL_ARGV, "[   50.000001] node kernel: mlx5_core 0000:0c:00.0 ib0: Link down\n")
    obs = kmsg.collect(ReplayHost(snap))
    assert obs.source == "journalctl" and obs.uptime_s == 100.0
    assert [(e.kind, e.time_s) for e in obs.events] == [("ib_link_down", 50.000001)]
    assert sorted(e.source for e in obs.errors) == ["/dev/kmsg", "dmesg --kernel --raw"]


def test_no_source_at_all_is_errors_not_a_crash():
    obs = kmsg.collect(ReplayHost(SnapshotData()))
    assert obs.source is None and obs.events == () and len(obs.errors) == 4


def test_a_hung_dmesg_is_bounded_by_its_deadline():
    class Slow(ReplayHost):
        def run(self, argv, timeout=10.0):
            return CommandResult(tuple(argv), None, "", "", timeout, True, None)

        def read_kmsg(self, **kw):
            raise HostReadError("/dev/kmsg", "permission", 1, "Operation not permitted")

    obs = kmsg.collect(Slow(SnapshotData()))
    assert obs.source is None and [e.kind for e in obs.errors][-2:] == ["timeout", "timeout"]


def test_live_run_reads_kmsg_or_falls_back():
    obs = kmsg.collect(LiveHost())
    assert obs.source in ("/dev/kmsg", "dmesg", "journalctl", None)
    if obs.source is None:
        assert obs.errors
    else:
        assert obs.lines_scanned >= 0 and (obs.uptime_s is None or obs.uptime_s > 0)


def test_an_xid_of_a_mig_instance_names_its_gpu():
    """The driver's own format for a contained error in a GPU instance (NVIDIA open-gpu-kernel-modules,
    the error-containment log comment): the GPU is the PCI address, the instance is not a device."""
    from ccdiag.probes.kmsg import match_event
    e = match_event("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
                    "RST: No, D-RST: No", 12.0)
    assert (e.kind, e.bdf, e.code, e.pid) == ("xid", "0000:01:00.0", 94, 7194)
