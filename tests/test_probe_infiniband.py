"""InfiniBand probe: the REAL sysfs tree of prometheus/procfs (hfi1, mlx4, mlx5, with its quirks),
real ibstat facts rebuilt as sysfs, and trees SYNTHESIZED with synth.sysfs for the faults."""

from __future__ import annotations

import re

import pytest

from ccdiag.host.door import LiveHost, ReplayHost
from ccdiag.probes import infiniband as ib
from ccdiag.probes.registry import ProbeUnavailable
from ccdiag.host.snapshot import SnapshotData
from synth import sysfs as synth
from conftest import FIXTURES
from ttar import load_ttar

REAL_TREE = FIXTURES / "corpus/sysfs/procfs-class-infiniband-hfi1-mlx4-mlx5.ttar.txt"
IBSTAT = FIXTURES / "corpus/ib/ibstat-a100-8x-cx6-mt4123-hdr-at-2x-width-rate100-tab-indent.txt"


# -- parsers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("400 Gb/sec (4X NDR)", (400.0, 4, "NDR")), ("100 Gb/sec (2X HDR)", (100.0, 2, "HDR")),
    ("200 Gb/sec (4X HDR)", (200.0, 4, "HDR")), ("40 Gb/sec (4X QDR)", (40.0, 4, "QDR")),
    ("10 Gb/sec (1X QDR)", (10.0, 1, "QDR")), ("25 Gb/sec (1X EDR)", (25.0, 1, "EDR")),
    ("56 Gb/sec (4X FDR)", (56.0, 4, "FDR")), ("2.5 Gb/sec (1X SDR)", (2.5, 1, "SDR")),
    ("10 Gb/sec (4X)", (10.0, 4, None)), ("", (None, None, None)), ("fast", (None, None, None)),
    (None, (None, None, None)),
])
def test_parse_rate(text, expected):
    assert ib.parse_rate(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("4: ACTIVE", (4, "ACTIVE")), ("1: DOWN", (1, "DOWN")), ("5: LinkUp", (5, "LinkUp")),
    ("2: Polling", (2, "Polling")), ("3: Disabled", (3, "Disabled")), ("ACTIVE", (None, "ACTIVE")),
    ("", (None, None)), (None, (None, None)),
])
def test_parse_state(text, expected):
    assert ib.parse_state(text) == expected


@pytest.mark.parametrize("text, value, why", [
    ("0", 0, None), ("2880761508848", 2880761508848, None), ("N/A (no PMA)", None, "counter not provided"),
    ("abc", None, "not an integer"), ("", None, "not an integer"), ("-1", None, "not an integer"),
])
def test_parse_counter(text, value, why):
    got, reason = ib.parse_counter(text)
    assert got == value
    assert (reason is None) if why is None else reason.startswith(why)


def test_parse_hex_int():
    assert ib.parse_hex_int("0x1a") == 26 and ib.parse_hex_int("0x0") == 0 and ib.parse_hex_int("12") == 12
    assert ib.parse_hex_int("zz") is None and ib.parse_hex_int(None) is None


# -- the real procfs tree ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_obs():
    return ib.collect(ReplayHost(load_ttar(REAL_TREE, prefix="/sys")))


def test_real_tree_devices_and_ports(real_obs):
    devs = {d.name: d for d in real_obs.devices}
    assert list(devs) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    hfi = devs["hfi1_0"]
    assert hfi.fw_ver == "1.27.0" and hfi.hca_type is None and hfi.board_id.startswith("HPE 100Gb 1-port OP101")
    (p,) = hfi.ports
    assert (p.rate_gbit_s, p.width, p.speed_name, p.state, p.state_code) == (100.0, 4, "EDR", "ACTIVE", 4)
    assert p.counters["port_rcv_data"] == 345091702026 and p.hw_counters is None
    mlx4 = devs["mlx4_0"]
    assert [q.port for q in mlx4.ports] == [1, 2]
    assert [q.rate_raw for q in mlx4.ports] == ["40 Gb/sec (4X QDR)"] * 2
    assert mlx4.ports[1].link_layer == "InfiniBand"  # the extra blank line of the real file is stripped
    assert mlx4.ports[1].counters["port_xmit_wait"] == 3846
    mlx5 = devs["mlx5_0"]
    assert mlx5.node_guid == "0a7f:bc12:45ef:d23b"  # file without trailing newline
    (q,) = mlx5.ports
    assert (q.phys_state, q.phys_state_code) == ("ACTIVE", 4)  # real quirk: phys_state "4: ACTIVE"
    assert (q.rate_gbit_s, q.width, q.speed_name) == (25.0, 1, "EDR")
    assert q.hw_counters["req_cqe_error"] == 3481 and q.hw_counters["roce_adp_retrans"] == 99


def test_real_tree_absent_attributes_are_none_not_errors(real_obs):
    for dev in real_obs.devices:
        assert dev.pci_bdf is None and dev.netdevs == () and dev.errors == ()
        for port in dev.ports:
            assert port.lid is None and port.gids == () and port.errors == ()


def test_real_tree_survives_a_garbage_counter_and_an_unreadable_one():
    snap = load_ttar(REAL_TREE, prefix="/sys")
    base = "/sys/class/infiniband/mlx5_0/ports/1"
    synth.put_attr(snap, f"{base}/counters/symbol_error", "N/A (no PMA)")
    synth.put_attr(snap, f"{base}/counters/port_rcv_errors", "abc")
    synth.put_attr(snap, f"{base}/hw_counters/lifespan", "")
    synth.put_unreadable(snap, f"{base}/hw_counters/out_of_buffer", "invalid")
    synth.put_unreadable(snap, "/sys/class/infiniband/mlx4_0/ports/1/counters/link_downed", "permission")
    devs = {d.name: d for d in ib.collect(ReplayHost(snap)).devices}
    (port,) = devs["mlx5_0"].ports
    kinds = {e.source.rsplit("/", 1)[-1]: e.kind for e in port.errors}
    assert kinds == {"symbol_error": "not_supported", "port_rcv_errors": "parse", "lifespan": "parse",
                     "out_of_buffer": "invalid"}
    assert "symbol_error" not in port.counters and port.counters["port_xmit_data"] == 2880761508848
    assert "lifespan" not in port.hw_counters and port.hw_counters["resp_cqe_error"] == 8109
    mlx4_p1 = devs["mlx4_0"].ports[0]
    assert [(e.kind, e.source.endswith("link_downed")) for e in mlx4_p1.errors] == [("permission", True)]
    assert mlx4_p1.counters["port_xmit_wait"] == 3599
    assert devs["hfi1_0"].ports[0].errors == ()


def test_missing_counters_directory_is_recorded():
    snap = load_ttar(REAL_TREE, prefix="/sys")
    prefix = "/sys/class/infiniband/hfi1_0/ports/1/counters"
    snap.files[0] = {p: v for p, v in snap.files[0].items() if not p.startswith(prefix)}
    snap.dirs = {d for d in snap.dirs if not d.startswith(prefix)}
    hfi = next(d for d in ib.collect(ReplayHost(snap)).devices if d.name == "hfi1_0")
    (port,) = hfi.ports
    assert port.counters is None and [(e.kind, e.source) for e in port.errors] == [("missing", prefix)]
    assert port.rate_gbit_s == 100.0


# -- real ibstat facts rebuilt as sysfs -------------------------------------------------------------
def ibstat_cas(path) -> list[dict]:
    cas, cur = [], None
    for line in path.read_text().splitlines():
        if line.startswith("#ccdiag-"):
            continue
        m = re.match(r"CA '(\S+)'", line)
        if m:
            cur = {"name": m.group(1)}
            cas.append(cur)
            continue
        key, sep, value = line.strip().partition(": ")
        if sep and cur is not None:
            cur[key] = value
    return cas


def test_ibstat_facts_of_a_2x_width_hdr_fabric_read_back_from_sysfs():
    """The REAL ibstat shows 8 HDR ports at Rate 100 (trained at 2X). Sysfs for such a port says
    "100 Gb/sec (2X HDR)"; the tree here is SYNTHESIZED from the ibstat values (GUID, LIDs, fw)."""
    cas = ibstat_cas(IBSTAT)
    assert len(cas) == 8
    snap = synth.new_snapshot()
    for i, ca in enumerate(cas):
        bdf = f"0000:{0x10 + i:02x}:00.0"
        synth.add_pci_device(snap, ["pci0000:00", f"0000:00:{i + 1:02x}.0", bdf], **synth.CONNECTX7_IB)
        guid = ca["Node GUID"][2:]
        synth.add_ib_device(
            snap, ca["name"], bdf, hca_type=ca["CA type"], fw_ver=ca["Firmware version"],
            node_guid=":".join(guid[k:k + 4] for k in range(0, 16, 4)),
            ports=[synth.IbPortSpec(rate=f"{ca['Rate']} Gb/sec (2X HDR)", lid=hex(int(ca["Base lid"])),
                                    sm_lid=hex(int(ca["SM lid"])), link_layer=ca["Link layer"])])
    obs = ib.collect(ReplayHost(snap))
    for ca, dev in zip(cas, obs.devices):
        (port,) = dev.ports
        assert dev.name == ca["name"] and dev.fw_ver == ca["Firmware version"]
        assert port.rate_gbit_s == float(ca["Rate"]) and port.width == 2 and port.speed_name == "HDR"
        assert port.lid == int(ca["Base lid"]) and port.sm_lid == int(ca["SM lid"])
        assert int(dev.node_guid.replace(":", ""), 16) == int(ca["Node GUID"], 16)
        assert port.gids[0].gid.endswith(dev.node_guid)


# -- synthesized trees ------------------------------------------------------------------------------
def roce_tree() -> SnapshotData:
    """SYNTHESIZED: one RoCE port (Ethernet link layer) with v1 and v2 GIDs on eth netdev ens1f0 and
    one IB port, on two PCI functions with their class/infiniband links."""
    snap = synth.new_snapshot()
    synth.add_pci_device(snap, ["pci0000:17", "0000:17:01.0", "0000:18:00.0"], **synth.CONNECTX7_ETH)
    synth.add_pci_device(snap, ["pci0000:17", "0000:17:02.0", "0000:19:00.0"], **synth.CONNECTX7_IB)
    gids = [("fe80:0000:0000:0000:0ac0:ebff:fe12:3456", "IB/RoCE v1", "ens1f0"),
            ("fe80:0000:0000:0000:0ac0:ebff:fe12:3456", "RoCE v2", "ens1f0"),
            ("0000:0000:0000:0000:0000:ffff:0a0a:000b", "IB/RoCE v1", "ens1f0"),
            ("0000:0000:0000:0000:0000:ffff:0a0a:000b", "RoCE v2", "ens1f0")]
    synth.add_ib_device(snap, "mlx5_0", "0000:18:00.0", ports=[synth.IbPortSpec(
        link_layer="Ethernet", rate="200 Gb/sec (4X HDR)", lid="0x0", sm_lid="0x0", gids=gids, gid_table_len=16)])
    synth.add_netdev(snap, "ens1f0", pci_bdf="0000:18:00.0", speed=200000)
    synth.add_ib_device(snap, "mlx5_1", "0000:19:00.0", node_guid="a088:c203:0045:1a2d", ports=[
        synth.IbPortSpec(state="1: DOWN", phys_state="2: Polling", rate="10 Gb/sec (4X SDR)", lid="0xffff")])
    return snap


def test_roce_gids_types_and_netdevs():
    devs = {d.name: d for d in ib.collect(ReplayHost(roce_tree())).devices}
    roce = devs["mlx5_0"]
    assert roce.pci_bdf == "0000:18:00.0" and roce.netdevs == ("ens1f0",)
    (port,) = roce.ports
    assert port.link_layer == "Ethernet" and port.lid == 0
    assert [(g.index, g.type, g.netdev) for g in port.gids] == [
        (0, "IB/RoCE v1", "ens1f0"), (1, "RoCE v2", "ens1f0"), (2, "IB/RoCE v1", "ens1f0"), (3, "RoCE v2", "ens1f0")]
    assert port.errors == ()  # zero GIDs with EINVAL types/ndevs are normal
    down = devs["mlx5_1"].ports[0]
    assert (down.state, down.phys_state, down.phys_state_code, down.lid) == ("DOWN", "Polling", 2, 0xFFFF)
    assert devs["mlx5_1"].netdevs == () and down.gids[0].netdev is None


def test_unreadable_state_is_a_port_error():
    snap = roce_tree()
    real = synth.pci_dir(snap, "0000:19:00.0") + "/infiniband/mlx5_1/ports/1/state"
    synth.put_unreadable(snap, real, "permission")
    port = next(d for d in ib.collect(ReplayHost(snap)).devices if d.name == "mlx5_1").ports[0]
    assert port.state is None and [e.kind for e in port.errors] == ["permission"]
    assert port.phys_state == "Polling" and port.counters is not None


def test_unparseable_rate_is_recorded():
    snap = roce_tree()
    synth.put_attr(snap, synth.pci_dir(snap, "0000:19:00.0") + "/infiniband/mlx5_1/ports/1/rate", "weird")
    port = next(d for d in ib.collect(ReplayHost(snap)).devices if d.name == "mlx5_1").ports[0]
    assert port.rate_gbit_s is None and port.rate_raw == "weird" and [e.kind for e in port.errors] == ["parse"]


def test_no_infiniband_class_is_unavailable():
    with pytest.raises(ProbeUnavailable, match=r"no RDMA devices: /sys/class/infiniband absent"):
        ib.collect(ReplayHost(SnapshotData()))
    snap = SnapshotData()
    snap.put_dir("/sys/class/infiniband")
    with pytest.raises(ProbeUnavailable, match="empty"):
        ib.collect(ReplayHost(snap))


def test_live_run_on_this_machine_has_no_rdma():
    host = LiveHost()
    if host.exists("/sys/class/infiniband") and host.list_dir("/sys/class/infiniband"):
        pytest.skip("this machine has RDMA devices")
    with pytest.raises(ProbeUnavailable):
        ib.collect(host)
