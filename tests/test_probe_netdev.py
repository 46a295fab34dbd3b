"""Netdev probe on trees SYNTHESIZED with synth.sysfs (kernel layout: /sys/class/net links
into the PCI device or /sys/devices/virtual/net) and on this machine."""

from __future__ import annotations

import pytest

from ccdiag.host.door import LiveHost, ReplayHost
from ccdiag.probes import netdev
from ccdiag.probes.registry import ProbeUnavailable
from ccdiag.host.snapshot import SnapshotData
from synth import sysfs as synth


def test_addresses_from_psutil_splits_link_address():
    addrs, mac = netdev.addresses_from_psutil([
        {"family": "inet", "address": "10.0.0.2", "netmask": "255.255.255.0"},
        {"family": "inet6", "address": "fe80::1%eth0", "netmask": None},
        {"family": "link", "address": "02:00:00:00:00:01"},
        {"family": "17", "address": ""},
    ])
    assert [a.address for a in addrs] == ["10.0.0.2", "fe80::1%eth0"] and addrs[1].netmask is None
    assert mac == "02:00:00:00:00:01"


def node_tree() -> SnapshotData:
    """SYNTHESIZED: an IPoIB interface and a RoCE Ethernet port on ConnectX functions with their
    RDMA devices, a down port, lo and docker0 (virtual)."""
    snap = synth.new_snapshot()
    synth.add_pci_device(snap, ["pci0000:17", "0000:17:01.0", "0000:18:00.0"], **synth.CONNECTX7_IB)
    synth.add_pci_device(snap, ["pci0000:17", "0000:17:02.0", "0000:19:00.0"], **synth.CONNECTX7_ETH)
    synth.add_pci_device(snap, ["pci0000:17", "0000:17:02.0", "0000:19:00.1"], **synth.CONNECTX7_ETH)
    synth.add_ib_device(snap, "mlx5_0", "0000:18:00.0")
    synth.add_ib_device(snap, "mlx5_1", "0000:19:00.0", ports=[synth.IbPortSpec(link_layer="Ethernet", netdev="ens2f0")])
    synth.add_netdev(snap, "ib0", pci_bdf="0000:18:00.0", mtu=4092, speed=400000,
                     address="00:00:10:87:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:45:1a:2c",
                     addresses=[("inet", "10.10.0.11", "255.255.255.0")])
    synth.add_netdev(snap, "ens2f0", pci_bdf="0000:19:00.0", mtu=9000, speed=200000,
                     addresses=[("inet", "10.20.0.11", "255.255.255.0")])
    synth.add_netdev(snap, "ens2f1", pci_bdf="0000:19:00.1", operstate="down", speed=-1)
    synth.add_netdev(snap, "lo", mtu=65536, operstate="unknown", address="00:00:00:00:00:00",
                     addresses=[("inet", "127.0.0.1", "255.0.0.0")])
    synth.add_netdev(snap, "docker0", operstate="down", address="02:42:ac:11:00:01",
                     addresses=[("inet", "172.17.0.1", "255.255.0.0")])
    return snap


def by_name(obs) -> dict:
    return {i.name: i for i in obs.interfaces}


def test_collect_physical_virtual_and_rdma_links():
    ifs = by_name(netdev.collect(ReplayHost(node_tree())))
    assert sorted(ifs) == ["docker0", "ens2f0", "ens2f1", "ib0", "lo"]
    ib0 = ifs["ib0"]
    assert (ib0.virtual, ib0.pci_bdf, ib0.driver, ib0.ib_device) == (False, "0000:18:00.0", "mlx5_core", "mlx5_0")
    assert (ib0.mtu, ib0.speed_mbps, ib0.up, ib0.operstate) == (4092, 400000, True, "up")
    assert ib0.mac.startswith("00:00:10:87:fe:80") and ib0.addresses[0].address == "10.10.0.11"
    assert ifs["ens2f0"].ib_device == "mlx5_1" and ifs["ens2f0"].mtu == 9000
    down = ifs["ens2f1"]
    assert down.speed_mbps is None and down.up is False and down.ib_device is None and down.errors == ()
    lo = ifs["lo"]
    assert lo.virtual is True and lo.pci_bdf is None and lo.driver is None and lo.speed_mbps is None
    assert lo.errors == ()  # EINVAL on lo's speed is normal
    assert ifs["docker0"].virtual is True and ifs["docker0"].addresses[0].address == "172.17.0.1"


def test_unreadable_file_is_one_error():
    snap = node_tree()
    real = synth.pci_dir(snap, "0000:19:00.0") + "/net/ens2f0"
    synth.put_unreadable(snap, f"{real}/mtu", "permission")
    synth.put_unreadable(snap, f"{real}/speed", "io")
    ifs = by_name(netdev.collect(ReplayHost(snap)))
    e = ifs["ens2f0"]
    assert sorted((x.source.rsplit("/", 1)[-1], x.kind) for x in e.errors) == [("mtu", "permission"), ("speed", "io")]
    assert e.mtu == 9000  # psutil still knows it
    assert e.speed_mbps == 200000 and e.operstate == "up"
    assert all(not i.errors for n, i in ifs.items() if n != "ens2f0")


@pytest.mark.parametrize("garbage", ["N/A (no PMA)", "abc", ""])
def test_garbage_value_is_none_and_the_rest_reads(garbage):
    snap = node_tree()
    synth.put_attr(snap, synth.pci_dir(snap, "0000:18:00.0") + "/net/ib0/speed", garbage)
    synth.put_attr(snap, synth.pci_dir(snap, "0000:18:00.0") + "/net/ib0/mtu", garbage)
    snap.net[0]["stats"]["ib0"]["speed_mbps"] = 0
    ifs = by_name(netdev.collect(ReplayHost(snap)))
    ib0 = ifs["ib0"]
    assert ib0.speed_mbps is None and ib0.mtu == 4092 and ib0.driver == "mlx5_core"
    assert sorted((e.source.rsplit("/", 1)[-1], e.kind) for e in ib0.errors) == [("mtu", "parse"), ("speed", "parse")]
    assert all(not i.errors for n, i in ifs.items() if n != "ib0")


def test_psutil_only_when_sysfs_is_absent():
    snap = SnapshotData()
    snap.net[0] = {"addrs": {"eth0": [{"family": "inet", "address": "192.0.2.5", "netmask": "255.255.255.0"}]},
                   "stats": {"eth0": {"isup": True, "speed_mbps": 0, "mtu": 1500}}}
    (eth0,) = netdev.collect(ReplayHost(snap)).interfaces
    assert (eth0.up, eth0.mtu, eth0.speed_mbps, eth0.virtual, eth0.operstate) == (True, 1500, None, None, None)


def test_psutil_failure_is_recorded_and_sysfs_still_answers():
    class Broken(ReplayHost):
        def net_interfaces(self):
            raise OSError("no netlink")

    obs = netdev.collect(Broken(node_tree()))
    assert [e.kind for e in obs.errors] == ["io"] and len(obs.interfaces) == 5


def test_nothing_at_all_is_unavailable():
    with pytest.raises(ProbeUnavailable):
        netdev.collect(ReplayHost(SnapshotData()))


def test_live_run_lists_this_machines_interfaces():
    ifs = by_name(netdev.collect(LiveHost()))
    assert "lo" in ifs and ifs["lo"].virtual is True
    physical = [i for i in ifs.values() if i.virtual is False]
    assert physical, "this machine has at least one non-virtual interface (eth0)"
    assert all(i.mtu is None or i.mtu > 0 for i in ifs.values())


def test_rdma_interfaces_carry_their_rp_filter_arp_and_ecn_settings():
    """SYNTHESIZED files in the kernel's layout: /proc/sys/net/ipv4/conf/<if>/{rp_filter,arp_ignore}
    and mlx5's /sys/class/net/<if>/ecn/<roce_np|roce_rp>/enable/<priority>; read only for RDMA
    interfaces."""
    snap = node_tree()
    for name, rp, arp in (("all", 1, 0), ("ens2f0", 2, 1), ("ib0", 0, 0)):
        snap.put_file(f"/proc/sys/net/ipv4/conf/{name}/rp_filter", f"{rp}\n")
        snap.put_file(f"/proc/sys/net/ipv4/conf/{name}/arp_ignore", f"{arp}\n")
    for kind in ("roce_np", "roce_rp"):
        for prio in range(8):
            snap.put_file(f"/sys/devices/pci0000:17/0000:17:02.0/0000:19:00.0/net/ens2f0/ecn/{kind}/enable/{prio}",
                          "1\n" if prio == 3 else "0\n")
    obs = netdev.collect(ReplayHost(snap))
    by = {i.name: i for i in obs.interfaces}
    assert (by["ens2f0"].rp_filter, by["ens2f0"].arp_ignore) == (2, 1)
    assert by["ens2f0"].ecn == {"roce_np": (3,), "roce_rp": (3,)}
    assert (by["ib0"].rp_filter, by["ib0"].ecn) == (0, None)
    assert (obs.rp_filter_all, obs.arp_ignore_all) == (1, 0)
    assert by["docker0"].rp_filter is None  # not an RDMA interface: not read
