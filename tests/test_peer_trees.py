"""Real sysfs trees captured by peer projects, read through ccdiag's door, must give the values those
projects' own tests state; and a tree read with ``--root`` must be the only source of what is
reported: no fact of the machine running the tests (its interfaces, addresses, host name, kernel)
may appear in any output.

Trees (each file's header gives its repository, commit and path):

* ``gpud-class-infiniband-h100.ttar.txt``: leptonai/gpud's capture of an H100 node's nine ConnectX-7
  HCAs; expected values from gpud's ``class_test.go``.
* ``node_exporter-class-net-bond0-eth0.ttar.txt``: prometheus/node_exporter's ``/sys/class/net``
  fixture (a bond, its ``bonding_masters`` file, a PCI eth0); expected values from its
  ``e2e-output.txt``.
"""

from __future__ import annotations

import json
import platform
import socket

import pytest

from ccdiag.host.door import LiveHost, ReplayHost
from ccdiag.probes import infiniband, netdev
from cli_runner import run
from conftest import FIXTURES
from ttar import extract_ttar, load_ttar

GPUD_IB = FIXTURES / "corpus/sysfs/gpud-class-infiniband-h100.ttar.txt"
NODE_EXPORTER_NET = FIXTURES / "corpus/sysfs/node_exporter-class-net-bond0-eth0.ttar.txt"
ETH0_DEVICE = "/sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/eth0"


# -- the peers' expected values ----------------------------------------------------------------------
def test_gpud_h100_infiniband_fields_equal_gpuds_expected_values():
    obs = infiniband.collect(ReplayHost(load_ttar(GPUD_IB)))
    assert len(obs.devices) == 9
    dev = next(d for d in obs.devices if d.name == "mlx5_1")
    assert (dev.board_id, dev.fw_ver, dev.hca_type) == ("MT_0000000838", "28.41.1000", "MT4129")
    port = next(p for p in dev.ports if p.port == 1)
    assert (port.state_code, port.state) == (4, "ACTIVE")
    assert (port.phys_state_code, port.phys_state) == (5, "LinkUp")
    assert port.rate_gbit_s == 400.0  # gpud: RateGBSec 400, Rate 50000000000 bytes/s
    assert port.counters["link_downed"] == 255
    assert port.counters["excessive_buffer_overrun_errors"] == 15
    assert port.counters["port_rcv_switch_relay_errors"] == 2


def test_node_exporter_net_fields_equal_node_exporters_expected_values():
    obs = netdev.collect(ReplayHost(load_ttar(NODE_EXPORTER_NET, prefix="/")))
    by_name = {i.name: i for i in obs.interfaces}
    assert "bonding_masters" not in by_name  # a plain file of the bonding driver, not an interface
    assert {"bond0", "eth0"} <= set(by_name)
    for name in ("bond0", "eth0"):  # node_network_up 1, node_network_mtu_bytes 1500, node_network_info
        itf = by_name[name]
        assert (itf.up, itf.mtu, itf.operstate, itf.mac) == (True, 1500, "up", "01:01:01:01:01:01")
    assert by_name["eth0"].speed_mbps * 1_000_000 // 8 == 125_000_000  # node_network_speed_bytes 1.25e+08
    # its device path is a PCI function's, not /sys/devices/virtual
    assert by_name["eth0"].virtual is False


# -- --root: the tree alone ----------------------------------------------------------------------------
def _live_facts() -> dict:
    """What this machine would leak: interface names and addresses (psutil), host name, kernel."""
    import psutil

    addrs = {a.address.split("%")[0] for items in psutil.net_if_addrs().values() for a in items if a.address}
    return {"ifaces": set(psutil.net_if_addrs()) | set(psutil.net_if_stats()), "addrs": addrs,
            "hostname": socket.gethostname(), "kernel": platform.release()}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The two peer trees as one copied machine, without eth0 (so its interfaces are bond0, dmz and
    int, none of which this machine has). Its /proc/sys/kernel/{hostname,osrelease} are SYNTHESIZED
    (no peer tree carries them): a name and release no real machine here has."""
    root = tmp_path_factory.mktemp("peer-root")
    extract_ttar(GPUD_IB, root)
    extract_ttar(NODE_EXPORTER_NET, root, prefix="/", skip=("/sys/class/net/eth0", ETH0_DEVICE))
    kernel = root / "proc/sys/kernel"
    kernel.mkdir(parents=True)
    (kernel / "hostname").write_text("peer-tree-node\n")
    (kernel / "osrelease").write_text("5.15.0-peer-tree\n")
    live = _live_facts()
    assert not {"bond0", "dmz", "int"} & live["ifaces"], "this machine has the tree's interfaces: pick others"
    return root


def _strings(doc) -> set[str]:
    """Every string (keys and values) in a JSON document."""
    out: set[str] = set()
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            out.update(k for k in x if isinstance(k, str))
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, str):
            out.add(x)
    return out


def _assert_no_live_fact(text: str, doc) -> None:
    live = _live_facts()
    strings = _strings(doc)
    assert not (live["ifaces"] & strings), live["ifaces"] & strings
    assert not [a for a in live["addrs"] if a in text]
    assert live["hostname"] not in strings
    assert live["kernel"] not in text


def test_the_door_under_a_root_gives_the_trees_facts_only(tree):
    host = LiveHost(str(tree))
    assert host.net_interfaces() == {"addrs": {}, "stats": {}}
    meta = host.meta()
    assert (meta["hostname"], meta["kernel"]) == ("peer-tree-node", "5.15.0-peer-tree")
    names = sorted(i.name for i in netdev.collect(host).interfaces)
    assert names == ["bond0", "dmz", "int"]


def test_the_process_environment_is_not_the_trees(tree, monkeypatch):
    """NCCL settings of the process running ccdiag say nothing of a tree; --env-file judges the tree's."""
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=eth0")
    assert LiveHost(str(tree)).environ() == {}
    assert LiveHost("/").environ()["NCCL_SOCKET_IFNAME"] == "=eth0"
    code, out, err = run("check", "--json", "--window", "0", "--no-load-links", "--root", str(tree))
    assert "=eth0" not in out, err


@pytest.mark.parametrize("args", [
    ("check", "--json", "--window", "0", "--no-load-links"),
    ("topo", "--json"),
    ("nccl", "--format", "json"),
], ids=lambda a: a[0])
def test_no_live_machine_fact_in_any_output(tree, args):
    code, out, err = run(*args, "--root", str(tree))
    assert code in (0, 1, 3), err
    doc = json.loads(out)
    _assert_no_live_fact(out, doc)
    assert doc["host"]["hostname"] == "peer-tree-node"
    if args[0] == "check":
        names = {i["name"] for i in doc["probes"]["netdev"]["data"]["interfaces"]}
        assert names == {"bond0", "dmz", "int"}
    if args[0] == "nccl":
        ifname = next((k for k in doc["nccl"]["knobs"] if k["name"] == "NCCL_SOCKET_IFNAME"), None)
        assert ifname is None or "eth0" not in json.dumps(ifname)


def test_snapshot_of_a_root_records_the_trees_facts_only(tree, tmp_path):
    path = tmp_path / "peer.snap.tar.gz"
    code, out, err = run("snapshot", "--root", str(tree), "--window", "0", "-o", str(path), "--json")
    assert code == 0, err
    from ccdiag.host.snapshot import SnapshotData

    snap = SnapshotData.load(str(path))
    _assert_no_live_fact(out, json.loads(out))
    recorded = json.dumps({"meta": snap.meta, "net": snap.net, "listings": snap.listings})
    _assert_no_live_fact(recorded, {"meta": snap.meta, "net": snap.net, "listings": snap.listings})
    assert snap.meta["hostname"] == "peer-tree-node" and snap.meta["kernel"] == "5.15.0-peer-tree"
    assert snap.net == {0: {"addrs": {}, "stats": {}}}


# -- defects found on these trees ----------------------------------------------------------------------
def test_real_roce_port_without_a_gids_directory_is_unknown_not_failed():
    """gpud's capture holds mlx5_bond_0, an active Ethernet (RoCE) port, with no gids/ directory (the
    capture did not copy it): nothing says whether a RoCE v2 GID exists, so the verdict is unknown."""
    from ccdiag.checks.infiniband import roce_gid
    from ccdiag.probes.registry import ProbeRun
    from scenarios_fabric import make_ctx

    obs = infiniband.collect(ReplayHost(load_ttar(GPUD_IB)))
    bond = next(d for d in obs.devices if d.name == "mlx5_bond_0")
    assert bond.ports[0].link_layer == "Ethernet" and bond.ports[0].state == "ACTIVE" and bond.ports[0].gids == ()
    findings = roce_gid(make_ctx({"infiniband": ProbeRun("infiniband", "ok", 0.1, obs)}))
    mine = [f for f in findings if f.component.device == "mlx5_bond_0"]
    assert [f.status for f in mine] == ["unknown"]
    assert "/sys/class/infiniband/mlx5_bond_0/ports/1/gids" in mine[0].summary


def _port_with_counters(value: str):
    """A SYNTHESIZED ConnectX-7 port whose every counter file reads ``value`` in both samples."""
    from synth import sysfs as synth

    snap = synth.new_snapshot(description="every IB counter unreadable")
    synth.add_pci_device(snap, ["pci0000:17", "0000:17:00.0"], vendor="0x15b3", device="0x1021",
                         pci_class="0x020700")
    synth.add_ib_device(snap, "mlx5_0", "0000:17:00.0", ports=(synth.IbPortSpec(
        counters={n: value for n in synth.IB_COUNTERS}),))
    return snap


@pytest.mark.parametrize("value", ["N/A (no PMA)", "garbage"])
def test_a_port_whose_counters_are_all_unreadable_is_unknown_naming_them(value):
    from ccdiag.checks.infiniband import counters
    from ccdiag.probes.registry import ProbeRun
    from scenarios_fabric import make_ctx

    obs = infiniband.collect(ReplayHost(_port_with_counters(value)))
    assert obs.devices[0].ports[0].counters == {}
    run = {"infiniband": ProbeRun("infiniband", "partial", 0.1, obs)}
    findings = counters(make_ctx(run, later=run, window_s=30))
    assert [(f.check, f.status, f.component.device) for f in findings] == [("ib.counters", "unknown", "mlx5_0")]
    assert "link_downed" in findings[0].summary and "symbol_error" in findings[0].summary


@pytest.mark.parametrize("soft, hard", [
    ("18446744073709551615", "18446744073709551615"),  # RLIM_INFINITY (~0UL) printed as a number
    ("unlimited", "unlimited"),
])
def test_a_16_eib_memlock_limit_is_unlimited(soft, hard):
    from dataclasses import replace

    from ccdiag.checks.environment import memlock
    from ccdiag.probes import system
    from scenarios_fabric import healthy_runs, make_ctx, with_data

    text = ("Limit                     Soft Limit           Hard Limit           Units     \n"
            f"Max locked memory         {soft:<20} {hard:<20} bytes     \n")
    assert system.parse_memlock(text) == (None, None, True)
    runs = healthy_runs()
    runs = with_data(runs, "system", replace(runs["system"].data, memlock_soft_bytes=None, memlock_hard_bytes=None,
                                             memlock_unlimited=system.parse_memlock(text)[2]))
    assert [(f.status, f.summary) for f in memlock(make_ctx(runs))] == [("pass", "memlock unlimited")]
