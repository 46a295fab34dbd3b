"""PCIe probe: parsers from tables (value strings from REAL captures in tests/fixtures/corpus), and
collection from sysfs trees SYNTHESIZED with synth.sysfs (device ids and counters made up,
layout and value formats the kernel's)."""

from __future__ import annotations

import re

import pytest

from ccdiag.host.door import LiveHost, ReplayHost
from ccdiag.probes import pcie
from ccdiag.probes.registry import ProbeUnavailable
from ccdiag.host.snapshot import SnapshotData
from synth import sysfs as synth
from conftest import FIXTURES

CORPUS = FIXTURES / "corpus"


def corpus_lines(rel: str) -> list[str]:
    text = (CORPUS / rel).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if not line.startswith("#ccdiag-")]


# -- parsers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, gts", [
    ("32.0 GT/s PCIe", 32.0), ("16.0 GT/s PCIe", 16.0), ("2.5 GT/s PCIe", 2.5), ("8 GT/s", 8.0),
    ("5.0 GT/s", 5.0), ("Unknown", None), ("", None), (None, None), ("0 GT/s", None), ("fast", None),
])
def test_parse_link_speed(text, gts):
    assert pcie.parse_link_speed(text) == gts


def test_parse_link_speed_on_real_sysfs_values_of_a_gb10():
    # "path 000f:01:00.0 current_link_speed: 2.5 GT/s PCIe" lines of a real probe script run
    values = {}
    for line in corpus_lines("sysfs/pci-link-sysfs-values-gb10-rootport-and-gpu.txt"):
        m = re.match(r"path (\S+) (\w+): (.*)$", line)
        if m:
            values[(m.group(1), m.group(2))] = m.group(3)
    assert pcie.parse_link_speed(values[("000f:00:00.0", "max_link_speed")]) == 32.0
    assert pcie.parse_link_speed(values[("000f:01:00.0", "current_link_speed")]) == 2.5
    assert pcie.parse_link_width(values[("000f:01:00.0", "current_link_width")]) == 1
    assert pcie.parse_link_width(values[("000f:01:00.0", "max_link_width")]) == 16


def test_parse_link_speed_on_real_kernel_limited_by_message():
    line = corpus_lines("lspci/dmesg-limited-by-h100-gen5-gpu-behind-gen4-switch-elided.txt")[0]
    limited, capable = re.findall(r"(\d+\.\d+ GT/s PCIe)", line)
    assert (pcie.parse_link_speed(limited), pcie.parse_link_speed(capable)) == (16.0, 32.0)


@pytest.mark.parametrize("text, width", [
    ("16", 16), ("1", 1), ("0", None), ("255", None), ("63", None), ("", None), ("x16", None), (None, None),
])
def test_parse_link_width(text, width):
    assert pcie.parse_link_width(text) == width


def test_parse_aer_counters_keeps_names_and_total():
    text = "RxErr 3\nBadTLP 0\nBadDLLP 1\nTOTAL_ERR_COR 4\n"
    assert pcie.parse_aer_counters(text) == {"RxErr": 3, "BadTLP": 0, "BadDLLP": 1, "TOTAL_ERR_COR": 4}
    assert pcie.parse_aer_counters("garbage line here\nRxErr x\n") == {}


def test_parse_acs_ctrl_walks_the_extended_capability_list():
    ctrl = synth.ACS_SV | synth.ACS_RR | synth.ACS_CR | synth.ACS_UF
    config = synth.config_space("0x1000", "0xc030", synth.CLASS_PCI_BRIDGE, True, ctrl)
    assert pcie.parse_acs_ctrl(config) == ctrl
    assert pcie.acs_names(ctrl) == ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")
    # AER capability only: no ACS
    assert pcie.parse_acs_ctrl(synth.config_space("0x1000", "0xc030", synth.CLASS_PCI_BRIDGE, True, None)) is None
    # ACS present and off
    assert pcie.parse_acs_ctrl(synth.config_space("0x1000", "0xc030", synth.CLASS_PCI_BRIDGE, True, 0)) == 0
    assert pcie.acs_names(0) == () and pcie.acs_names(None) == ()


def test_parse_acs_ctrl_survives_a_looping_or_empty_list():
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (0x100 << 20)).to_bytes(4, "little")  # next points to itself
    assert pcie.parse_acs_ctrl(bytes(config)) is None
    assert pcie.parse_acs_ctrl(b"\xff" * 4096) is None
    assert pcie.parse_acs_ctrl(b"") is None


@pytest.mark.parametrize("real, expected", [
    ("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1b:00.0",
     ("pci0000:17", ("0000:17:01.0", "0000:18:00.0", "0000:19:00.0", "0000:1b:00.0"))),
    ("/sys/devices/pci000f:00/000f:00:00.0/000f:01:00.0", ("pci000f:00", ("000f:00:00.0", "000f:01:00.0"))),
    # a Hyper-V guest: the PCI root complex sits below VMBus nodes
    ("/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/47505500-0001-0000-3130-444531303244/"
     "pci0001:00/0001:00:00.0", ("pci0001:00", ("0001:00:00.0",))),
])
def test_split_device_path(real, expected):
    assert pcie.split_device_path(real) == expected


@pytest.mark.parametrize("vendor, cls, kind", [
    ("0x10de", "0x030200", "gpu"), ("0x10de", "0x030000", "gpu"), ("0x10de", "0x068000", "nvswitch"),
    ("0x15b3", "0x020700", "nic"), ("0x15b3", "0x020000", "nic"), ("0x1af4", "0x020000", "nic"),
    ("0x1000", "0x060400", "bridge"), ("0x10de", "0x040300", "other"), ("0x8086", "0x068000", "other"),
    (None, None, "other"),
])
def test_kind_of(vendor, cls, kind):
    assert pcie.kind_of(vendor, cls) == kind


# -- collection on synthesized trees ---------------------------------------------------------------
GPU_CHAIN = ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:04:00.0"]
NIC_CHAIN = ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:05:00.0"]


def hgx_like_tree() -> SnapshotData:
    """SYNTHESIZED: a Gen5 GPU behind a switch downstream port trained at Gen4 (the situation of
    the real 'limited by 16.0 GT/s PCIe x16 link at 0000:01:00.0' kernel message), a NIC on a
    sibling port of the same switch, and an NVSwitch directly under its own root port."""
    snap = synth.new_snapshot("synth-pcie")
    synth.add_pci_bridge(snap, GPU_CHAIN[:4], link=(synth.GEN4, 16, synth.GEN5, 16),
                         acs_ctrl=synth.ACS_SV | synth.ACS_RR | synth.ACS_CR | synth.ACS_UF)
    synth.add_pci_device(snap, GPU_CHAIN, **synth.H100_SXM, numa=0,
                         aer={"correctable": {"RxErr": 7, "BadTLP": 1}})
    synth.add_pci_device(snap, NIC_CHAIN, **synth.CONNECTX7_IB, numa=0)
    synth.add_pci_device(snap, ["pci0000:c0", "0000:c0:01.0", "0000:c1:00.0"], **synth.NVSWITCH_H100,
                         numa=None, link=(synth.GEN4, 2, synth.GEN4, 2))
    return snap


def by_bdf(obs) -> dict:
    return {d.bdf: d for d in obs.devices}


def test_collect_follows_every_hop_from_root_port():
    obs = pcie.collect(ReplayHost(hgx_like_tree()))
    devs = by_bdf(obs)
    assert set(devs) == {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:02:01.0", "0000:04:00.0",
                         "0000:05:00.0", "0000:c0:01.0", "0000:c1:00.0"}
    gpu = devs["0000:04:00.0"]
    assert gpu.kind == "gpu" and gpu.driver == "nvidia" and gpu.numa_node == 0
    assert gpu.path == tuple(GPU_CHAIN[1:]) and gpu.parent == "0000:02:00.0" and gpu.root_complex == "pci0000:00"
    assert gpu.aer_correctable["RxErr"] == 7 and gpu.aer_correctable["TOTAL_ERR_COR"] == 8
    assert gpu.aer_fatal["TOTAL_ERR_FATAL"] == 0
    assert devs["0000:00:01.0"].kind == "root_port" and devs["0000:00:01.0"].parent is None
    assert devs["0000:01:00.0"].kind == "bridge" and devs["0000:02:01.0"].kind == "bridge"
    dsp = devs["0000:02:00.0"]
    assert (dsp.current_link_speed_gts, dsp.max_link_speed_gts) == (16.0, 32.0)
    assert dsp.current_link_speed_raw == "16.0 GT/s PCIe"
    assert dsp.acs_enabled == ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")
    assert devs["0000:02:01.0"].acs_ctrl == 0 and devs["0000:02:01.0"].acs_enabled == ()
    assert gpu.acs_ctrl is None  # endpoints are not read for ACS
    nvs = devs["0000:c1:00.0"]
    assert nvs.kind == "nvswitch" and nvs.numa_node is None and nvs.current_link_width == 2
    assert devs["0000:05:00.0"].kind == "nic" and devs["0000:05:00.0"].driver == "mlx5_core"
    assert obs.errors == () and all(d.errors == () for d in obs.devices)


def test_link_down_values_of_the_real_gb10_become_none():
    """Values as the real GB10 capture shows them: root port current speed 'Unknown' with width 0
    (another run of the same probe), GPU at 2.5 GT/s x1 of 2.5 GT/s x16."""
    snap = synth.new_snapshot()
    synth.add_pci_bridge(snap, ["pci000f:00", "000f:00:00.0"], link=(synth.LINK_UNKNOWN, 0, synth.GEN5, 16))
    synth.add_pci_device(snap, ["pci000f:00", "000f:00:00.0", "000f:01:00.0"], vendor="0x10de", device="0x2e12",
                         pci_class=synth.CLASS_3D_CONTROLLER, driver="nvidia", link=(synth.GEN1, 1, synth.GEN1, 16))
    devs = by_bdf(pcie.collect(ReplayHost(snap)))
    rp = devs["000f:00:00.0"]
    assert rp.current_link_speed_gts is None and rp.current_link_speed_raw == "Unknown"
    assert rp.current_link_width is None and rp.max_link_width == 16
    gpu = devs["000f:01:00.0"]
    assert (gpu.current_link_speed_gts, gpu.current_link_width, gpu.max_link_width) == (2.5, 1, 16)


def test_config_space_readable_only_as_root_gives_a_permission_record():
    snap = synth.new_snapshot()
    synth.add_pci_bridge(snap, GPU_CHAIN[:2], config_size=64, acs_ctrl=synth.ACS_RR)
    synth.add_pci_device(snap, GPU_CHAIN[:2] + ["0000:01:00.0"], **synth.H100_SXM)
    rp = by_bdf(pcie.collect(ReplayHost(snap)))["0000:00:01.0"]
    assert rp.acs_ctrl is None and rp.acs_enabled == ()
    assert [(e.kind, "extended config space not readable" in e.message) for e in rp.errors] == [("permission", True)]
    assert rp.current_link_speed_gts == 32.0  # everything else still read


def test_unreadable_file_is_one_error_and_the_rest_is_read():
    snap = hgx_like_tree()
    real = synth.pci_dir(snap, "0000:04:00.0")
    synth.put_unreadable(snap, f"{real}/aer_dev_correctable", "permission")
    synth.put_unreadable(snap, f"{real}/max_link_speed", "io")
    obs = pcie.collect(ReplayHost(snap))
    gpu = by_bdf(obs)["0000:04:00.0"]
    assert sorted((e.source.rsplit("/", 1)[-1], e.kind) for e in gpu.errors) == [
        ("aer_dev_correctable", "permission"), ("max_link_speed", "io")]
    assert gpu.aer_correctable is None and gpu.max_link_speed_gts is None
    assert gpu.aer_fatal is not None and gpu.current_link_speed_gts == 32.0 and gpu.driver == "nvidia"
    assert all(not d.errors for d in obs.devices if d.bdf != "0000:04:00.0")


@pytest.mark.parametrize("garbage", ["N/A (no PMA)", "abc", ""])
def test_garbage_counter_file_is_a_parse_error_on_that_file_only(garbage):
    snap = hgx_like_tree()
    real = synth.pci_dir(snap, "0000:04:00.0")
    synth.put_attr(snap, f"{real}/aer_dev_nonfatal", garbage)
    gpu = by_bdf(pcie.collect(ReplayHost(snap)))["0000:04:00.0"]
    assert gpu.aer_nonfatal is None
    assert [(e.source.rsplit("/", 1)[-1], e.kind) for e in gpu.errors] == [("aer_dev_nonfatal", "parse")]
    assert gpu.aer_correctable["RxErr"] == 7 and gpu.aer_fatal["TOTAL_ERR_FATAL"] == 0


def test_missing_optional_files_are_not_errors():
    snap = synth.new_snapshot()
    synth.add_pci_device(snap, ["pci0000:00", "0000:00:03.0"], vendor="0x1af4", device="0x1041",
                         pci_class=synth.CLASS_ETHERNET, driver="virtio-pci", link=None, aer=False, numa=None)
    (nic,) = pcie.collect(ReplayHost(snap)).devices
    assert nic.kind == "nic" and nic.parent is None and nic.path == ("0000:00:03.0",)
    assert nic.current_link_speed_gts is None and nic.aer_correctable is None and nic.errors == ()


def test_virtual_functions_are_skipped():
    snap = hgx_like_tree()
    vf = synth.add_pci_device(snap, NIC_CHAIN[:-1] + ["0000:05:00.1"], **synth.CONNECTX7_IB)
    snap.put_link(f"{vf}/physfn", "../0000:05:00.0")
    assert "0000:05:00.1" not in by_bdf(pcie.collect(ReplayHost(snap)))


def test_no_pci_bus_is_unavailable():
    with pytest.raises(ProbeUnavailable, match="no PCI"):
        pcie.collect(ReplayHost(SnapshotData()))


def test_snapshot_round_trip_keeps_the_result():
    snap = hgx_like_tree()
    again = SnapshotData.from_bytes(snap.to_bytes())
    assert pcie.collect(ReplayHost(again)) == pcie.collect(ReplayHost(snap))


def test_live_run_on_this_machine_does_not_crash():
    try:
        obs = pcie.collect(LiveHost())
    except ProbeUnavailable:
        return
    assert all(d.kind in ("gpu", "nic", "nvswitch", "bridge", "root_port", "other") for d in obs.devices)
    for d in obs.devices:
        assert d.numa_node is None or d.numa_node >= 0
        assert d.current_link_width is None or d.current_link_width > 0
