"""A node rebuilt from an nvidia-bug-report log: the door's bug-report face and --bug-report.

Real inputs: a complete R510 log (tests/fixtures/nvfiles, marwank270/nvidia-bug-report), gpud's real
H100 nvidia-smi -q and lspci -vvv, the corpus's ibstat, the kernel lines of NVIDIA/NVSentinel#155.
Reports in the R580 layout around them are SYNTHESIZED frames (tests/synth/bugreport.py).
"""

from __future__ import annotations

import gzip
import json
import pathlib
import time

import pytest

from ccdiag.host.bugreport import BugReportError, read_bug_report
from ccdiag.host.door import NOT_RECORDED_KIND, HostReadError, ReplayHost
from ccdiag.host.snapshot import SnapshotData
from ccdiag.probes import kmsg, nvml, pcie
from ccdiag.report.document import validate
from cli_runner import run
from synth import bugreport as synth

HERE = pathlib.Path(__file__).parent
FIX = HERE / "fixtures" / "nvfiles"
R510 = FIX / "bugreport-r510-quadro-k2200-marwank270.log.gz"
H100_SMI = FIX / "smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt"
#: NVIDIA/NVSentinel#155: a GPU that fell off the bus without an XID (570.158.01), the lines as posted
FALLEN_OFF = """[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
               NVRM: (PCI ID: 10de:26b5) installed in this system has
               NVRM: fallen off the bus and is not responding to commands.
[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).
[ 1843.439669] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  (dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025"""


def _h100_report(tmp_path: pathlib.Path, fabric: str = "active (running)", **kw) -> pathlib.Path:
    """SYNTHESIZED R580-layout report around real bodies: gpud's H100 nvidia-smi -q (every GPU in
    HW power brake slowdown) and lspci -vvv, the corpus's ibstat, and a fabric manager state."""
    smi = synth.strip_fixture_header(H100_SMI.read_text())
    lspci_vvv = gzip.decompress((FIX / "lspci-vvv-h100x8-gpud.txt.gz").read_bytes()).decode()
    ibstat = synth.strip_fixture_header((HERE / "fixtures/corpus/ib").joinpath(
        "ibstat-a100-8x-cx6-mt4123-hdr-at-2x-width-rate100-tab-indent.txt").read_text())
    text = synth.report(
        synth.file_section("/proc/modules", "nvidia_peermem 16384 0 - Live 0x0\nnvidia 54345728 1 nvidia_peermem, Live 0x0"),
        synth.file_section("/proc/cmdline", "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro iommu=pt"),
        synth.command_block(("/usr/bin/lspci -nnDvvvxxxx", lspci_vvv)),
        synth.titled("dmesg:", kw.get("dmesg", "[    0.000000] Linux version 6.8.0-60-generic")),
        synth.command_block(("/usr/bin/nvidia-smi --query", smi)),
        synth.command_block(("/usr/sbin/ibstat", ibstat)),
        synth.command_block(("/usr/bin/systemctl status nvidia-fabricmanager.service",
                             f"● nvidia-fabricmanager.service - NVIDIA fabric manager service\n     Active: {fabric}")),
        end=kw.get("end", True))
    path = tmp_path / "nvidia-bug-report.log.gz"
    path.write_bytes(gzip.compress(text.encode()))
    return path


# -- the door over a report ------------------------------------------------------------------------
def test_the_real_r510_report_replays_as_a_node():
    snap = read_bug_report(str(R510))
    meta = snap.meta["bug_report"]
    assert (meta["generator_version"], meta["generator"], meta["complete"]) == ("31295035", "R510 (510.73.08)", True)
    assert snap.meta["hostname"] == "fujitsu" and snap.meta["partial_record"].endswith(R510.name)
    host = ReplayHost(snap)
    obs = nvml.collect(host)
    assert (obs.driver_version, obs.device_count, obs.gpus[0].name) == ("510.73.08", 1, "Quadro K2200")
    tree = pcie.collect(host)
    gpu = next(d for d in tree.devices if d.kind == "gpu")
    assert (gpu.bdf, gpu.parent, gpu.current_link_speed_gts, gpu.max_link_speed_gts) == (
        "0000:01:00.0", "0000:00:01.0", 2.5, 5.0)
    assert kmsg.collect(host).lines_scanned > 500
    assert "nvidia" in host.read_text("/proc/modules")


def test_what_the_report_lacks_is_not_recorded_never_absent():
    host = ReplayHost(read_bug_report(str(R510)))
    with pytest.raises(HostReadError) as exc:
        host.read_text("/proc/self/limits")
    assert exc.value.kind == NOT_RECORDED_KIND
    with pytest.raises(HostReadError) as exc:  # the report says this one does not exist
        host.read_text("/proc/pci")
    assert exc.value.kind == "missing"
    assert host.unrecorded("netdev") and host.unrecorded("smi_topo") and host.unrecorded("nvml") is None


def test_a_synthesized_r580_report_with_real_bodies_gives_every_probe_its_data(tmp_path):
    host = ReplayHost(read_bug_report(str(_h100_report(tmp_path))))
    obs = nvml.collect(host)
    assert obs.device_count == 8 and all("hw_power_brake_slowdown" in g.clock_event_names for g in obs.gpus)
    tree = {d.bdf: d for d in pcie.collect(host).devices}
    assert tree["0000:19:00.0"].kind == "gpu" and tree["0000:19:00.0"].path[:2] == ("0000:15:01.0", "0000:16:00.0")
    assert tree["0000:83:00.0"].kind == "nvswitch"
    from ccdiag.probes import infiniband, system

    ib = infiniband.collect(host)
    assert len(ib.devices) == 8 and ib.devices[0].ports[0].state == "ACTIVE"
    sysobs = system.collect(host)
    assert sysobs.fabric_manager == "active" and "nvidia_peermem" in sysobs.modules
    # the command line says iommu=pt, but no report holds /sys/class/iommu: the mode stays unknown
    assert "iommu=pt" in (sysobs.cmdline or "") and sysobs.iommu is None


# -- the commands ----------------------------------------------------------------------------------
def test_check_bug_report_names_the_power_brake_on_every_gpu(tmp_path):
    code, out, err = run("check", "--bug-report", str(_h100_report(tmp_path)), "--json")
    assert err == "" or "ccdiag:" in err
    doc = json.loads(out)
    clocks = [f for f in doc["findings"] if f["check"] == "gpu.clocks" and f["status"] in ("warn", "fail")]
    assert len(clocks) == 8 and all("hw_power_brake_slowdown" in f["summary"] for f in clocks)
    assert doc["probes"]["netdev"]["status"] == "failed" and "not recorded" in doc["probes"]["netdev"]["error"]
    assert not [f for f in doc["findings"] if f["status"] == "pass" and f["check"].startswith("ib.rate")]
    assert code in (1, 3)


def test_check_bug_report_reads_a_stopped_fabric_manager_from_systemctl_status(tmp_path):
    """The report's `systemctl status nvidia-fabricmanager` says failed while nvidia-smi shows every
    GPU's fabric registration completed: the fabric-manager check says so (a warning, as on a node)."""
    code, out, _ = run("check", "--bug-report", str(_h100_report(tmp_path, fabric="failed (Result: exit-code)")),
                       "--json", "--only", "gpu.fabric_manager")
    doc = json.loads(out)
    fm = [f for f in doc["findings"] if f["check"] == "gpu.fabric_manager"][0]
    assert fm["status"] == "warn" and "'failed'" in fm["summary"]
    netdev = [f for f in doc["findings"] if f["check"] == "probe.failed"][0]
    assert "not judged" in netdev["summary"] and "bug" not in netdev["remedy"]
    assert code == 3  # what the report lacks (network interfaces) leaves the verdict unknown, never ok


def test_check_bug_report_names_the_gpu_that_fell_off_the_bus(tmp_path):
    """NVIDIA/NVSentinel#155's kernel lines in the report's dmesg section (SYNTHESIZED frame)."""
    path = tmp_path / "report.log"
    path.write_text(synth.report(synth.titled("dmesg:", FALLEN_OFF)))
    code, out, _ = run("check", "--bug-report", str(path), "--json", "--only", "xid")
    doc = json.loads(out)
    fallen = [f for f in doc["findings"] if f["status"] == "fail"]
    assert code == 1 and fallen and "0000:b3:00.0" in json.dumps(fallen[0]["component"])
    assert "fallen off the bus" in json.dumps(fallen).lower()


def test_snapshot_bug_report_writes_a_snapshot_that_replays_to_the_same_verdict(tmp_path):
    report = _h100_report(tmp_path)
    snap_path = tmp_path / "node.snap.tar.gz"
    code, _, _ = run("snapshot", "--bug-report", str(report), "-o", str(snap_path))
    assert code == 0
    _, direct, _ = run("check", "--bug-report", str(report), "--json")
    _, replayed, _ = run("check", "--replay", str(snap_path), "--json")

    def verdict(doc: str) -> list:
        d = json.loads(doc)
        return [d["verdict"]["status"]] + sorted((f["check"], f["component"]["name"], f["status"]) for f in d["findings"])

    assert verdict(direct) == verdict(replayed)
    redacted = tmp_path / "redacted.snap.tar.gz"
    assert run("snapshot", "--bug-report", str(report), "--redact", "-o", str(redacted))[0] == 0
    _, red, _ = run("check", "--replay", str(redacted), "--json")
    assert verdict(red) == verdict(direct)
    raw = gzip.decompress(redacted.read_bytes())
    assert b"1655022005478" not in raw  # a GPU serial of the report


def test_topo_and_nccl_read_the_report(tmp_path):
    report = str(_h100_report(tmp_path))
    code, out, _ = run("topo", "--bug-report", report, "--json")
    doc = json.loads(out)
    assert code == 0 and len(doc["topology"]["gpus"]) == 8
    code, out, _ = run("nccl", "--bug-report", report, "--format", "json")
    assert code == 0 and json.loads(out)


def test_a_bare_nvidia_smi_q_is_read_as_a_report_of_that_one_section():
    snap = read_bug_report(str(H100_SMI))
    assert snap.meta["bug_report"]["kind"] == "nvidia-smi -q"
    assert set(snap.meta["not_recorded"]) >= {"pcie", "kmsg", "infiniband"}
    assert nvml.collect(ReplayHost(snap)).device_count == 8


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, says", [
    (b"", "empty"),
    (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 4000, "not text"),
    (b"hello world\nthis is a text file\n", "not an nvidia-bug-report log"),
])
def test_a_file_that_is_not_a_report_is_bad_input_in_one_line(tmp_path, content, says):
    path = tmp_path / "nvidia-bug-report.log"
    path.write_bytes(content)
    code, out, err = run("check", "--bug-report", str(path))
    assert code == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_truncated_report_gives_a_partial_verdict_and_says_what_was_not_read(tmp_path):
    whole = _h100_report(tmp_path).read_bytes()
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(whole[: int(len(whole) * 0.6)])
    snap = read_bug_report(str(cut))
    meta = snap.meta["bug_report"]
    assert not meta["complete"] and any("truncated" in n for n in meta["notes"])
    code, out, err = run("check", "--bug-report", str(cut), "--json")
    doc = json.loads(out)
    assert code in (1, 3) and "Traceback" not in err and doc["verdict"]
    assert validate(doc) is None
    assert doc["host"]["source"] == "bug-report" and doc["host"]["bug_report"]["complete"] is False
    record = [f for f in doc["findings"] if f["check"] == "probe.record"]
    assert record[0]["status"] == "unknown" and "truncated" in record[0]["summary"]
    assert "copy it whole" in record[0]["remedy"]


def test_a_report_read_whole_says_so_and_carries_when_it_was_written():
    code, out, _ = run("check", "--bug-report", str(H100_SMI), "--json", "--only", "probe")
    doc = json.loads(out)
    assert validate(doc) is None
    record = [f for f in doc["findings"] if f["check"] == "probe.record"]
    assert record[0]["status"] == "pass" and doc["host"]["bug_report"]["complete"] is True
    assert doc["host"]["time"].startswith("2024-07-31")  # the output's own Timestamp line


def test_a_report_read_past_its_deadline_is_partial(tmp_path):
    report = _h100_report(tmp_path)
    snap = read_bug_report(str(report), deadline=time.monotonic() - 1)
    assert any("deadline" in n for n in snap.meta["bug_report"]["notes"])
    from ccdiag.checks import CheckContext
    from ccdiag.checks.probes import check_record

    finding = check_record(CheckContext(runs={}, meta=snap.meta))[0]
    assert finding.status == "unknown" and "deadline" in finding.summary and "--timeout" in finding.remedy
    assert check_record(CheckContext(runs={}, meta={"hostname": "n"})) == []


def test_bug_report_with_replay_is_a_usage_error(tmp_path):
    code, _, err = run("check", "--bug-report", str(R510), "--replay", str(R510))
    assert code == 2 and "--bug-report" in err


def test_the_snapshot_of_a_report_passes_the_snapshot_checks(tmp_path):
    snap = read_bug_report(str(R510))
    again = SnapshotData.from_bytes(snap.to_bytes(), "bug report")
    assert again.meta["partial_record"] == snap.meta["partial_record"]
    with pytest.raises(BugReportError):
        (tmp_path / "x.txt").write_text("nothing\n")
        read_bug_report(str(tmp_path / "x.txt"))


def test_check_on_the_real_r510_report_never_passes_what_it_lacks():
    code, out, err = run("check", "--bug-report", str(R510), "--json")
    doc = json.loads(out)
    assert code == 3 and doc["verdict"]["status"] == "unknown"
    by = {(f["check"], f["status"]) for f in doc["findings"]}
    assert ("ib.port_state", "unknown") in by and not any(c.startswith("ib.") and s == "pass" for c, s in by)
