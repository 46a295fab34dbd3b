"""One usable-interface rule: the environment check, the NCCL recommender and the cluster run give
one answer on the same table of interfaces (loopback, container and bridge interfaces, bridge
members, down interfaces, interfaces without an address or with only a link-local one).

The interface table is synthesized (names and states a reader of /sys/class/net would see); what
is asserted is that the three users agree, and that the verdicts are the rule's.
"""

from __future__ import annotations

import pytest
import scenarios_fabric as S
from ccdiag.probes.netdev import Address, NetdevObservation, NetInterface

from ccdiag.checks.environment import socket_ifname
from ccdiag.cluster import ifaces as cluster_ifaces
from ccdiag.nccl import netif
from ccdiag.nccl.layout import Layout
from ccdiag.nccl.recommend import _socket_ifname


def _if(name, up=True, addrs=("10.0.0.5",), virtual=False, speed=25000):
    return NetInterface(name, up=up, operstate="up" if up else "down", speed_mbps=speed, virtual=virtual,
                        addresses=tuple(Address("inet6" if ":" in a else "inet", a) for a in addrs))


#: name -> (interface, the rule's reason to refuse it or None)
TABLE = {
    "lo": (_if("lo", addrs=("127.0.0.1",), virtual=True), netif.LOOPBACK),
    "docker0": (_if("docker0", addrs=("172.17.0.1",), virtual=True), netif.NOT_FABRIC_WHY),
    "veth3a9f": (_if("veth3a9f", addrs=("172.17.0.9",), virtual=True), netif.NOT_FABRIC_WHY),
    "br-5e1c": (_if("br-5e1c", addrs=("172.18.0.1",), virtual=True), netif.NOT_FABRIC_WHY),
    "virbr0": (_if("virbr0", addrs=("192.168.122.1",), virtual=True), netif.NOT_FABRIC_WHY),
    "cni0": (_if("cni0", addrs=("10.244.0.1",), virtual=True), netif.NOT_FABRIC_WHY),
    "flannel.1": (_if("flannel.1", addrs=("10.244.0.0",), virtual=True), netif.NOT_FABRIC_WHY),
    "eth1": (_if("eth1", up=False, addrs=("10.1.0.5",)), netif.DOWN),
    "eth2": (_if("eth2", addrs=()), netif.NO_ADDRESS),
    "eth3": (_if("eth3", addrs=("169.254.3.4",)), netif.NO_ADDRESS),
    "eth0": (_if("eth0", addrs=("10.0.0.5",)), None),
    "bond0": (_if("bond0", addrs=("10.5.0.5",), virtual=True), None),
    "ib0": (_if("ib0", addrs=("192.168.0.5",), speed=400000), None),
}
USABLE = sorted(n for n, (_, why) in TABLE.items() if why is None)


def _runs():
    return S.with_data(S.healthy_runs(), "netdev", NetdevObservation(tuple(i for i, _ in TABLE.values())))


def _check(value):
    (f,) = socket_ifname(S.make_ctx(_runs(), env={"NCCL_SOCKET_IFNAME": value}))
    return f


def _recommended_candidates(env=None):
    layout = Layout((), (), {}, "node", "test", ports={}, interfaces=tuple(i for i, _ in TABLE.values()))
    return _socket_ifname(layout, env or {}, "env file", {})


def _cluster_candidates():
    addrs = {i.name: [(a.address, 24) for a in i.addresses if a.family == "inet"] for i, _ in TABLE.values()}
    up = {i.name: bool(i.up) for i, _ in TABLE.values()}
    return sorted({c["name"] for c in cluster_ifaces.select(addrs, up)})


def test_the_rule_on_the_table():
    got = {n: netif.problem(netif.from_netdev(i)) for n, (i, _) in TABLE.items()}
    assert got == {n: why for n, (_, why) in TABLE.items()}


def test_the_three_users_agree_on_the_usable_interfaces():
    knob = _recommended_candidates()
    assert sorted(knob.details["candidates"]) == USABLE
    assert _cluster_candidates() == USABLE
    for name, (_, why) in TABLE.items():
        f = _check(f"={name}")
        assert (f.status == "pass") == (why is None), (name, f.summary)
        if why is not None:
            assert why in f.summary
            # the recommender refuses it with the same words
            assert next(e.value["left_out"] for e in knob.evidence if e.what == name) == why


@pytest.mark.parametrize("value", ["=lo", "=docker0", "lo", "docker"])
def test_check_fails_exactly_as_nccl_rejects(value):
    f = _check(value)
    assert f.status == "fail"
    knob = _recommended_candidates({"NCCL_SOCKET_IFNAME": value})
    assert knob.value == "=ib0"  # the fastest usable interface
    # both name the same reason for refusing the value
    assert "; ".join(netif.judge_list(value, [netif.from_netdev(i) for i, _ in TABLE.values()]).problems) in f.summary
    assert f.summary.split(": ", 1)[1] in knob.reason


def test_bridge_member_is_refused_by_the_rule_and_the_cluster():
    assert netif.problem(netif.Iface("eth7", True, ("10.7.0.5",), enslaved=True)) == netif.ENSLAVED
    assert cluster_ifaces.select({"eth7": [("10.7.0.5", 24)]}, {"eth7": True}, enslaved=["eth7"]) == []


@pytest.mark.parametrize("value,chosen,ok", [
    ("^docker,lo", ("bond0", "eth0", "ib0"), True),
    ("^=eth0,ib0,bond0", (), False),
    ("eth", ("eth0",), True),           # prefix: eth1 (down), eth2, eth3 (no address) too; NCCL uses eth0
    ("=eth0,ib0", ("eth0", "ib0"), True),
    ("=eth9", (), False),
])
def test_judge_list_reads_nccl_list_semantics(value, chosen, ok):
    v = netif.judge_list(value, [netif.from_netdev(i) for i, _ in TABLE.values()])
    assert sorted(v.chosen) == sorted(chosen)
    assert v.ok == ok


def test_link_local_ipv6_is_not_an_address_for_the_rule():
    i = NetInterface("eth5", up=True, operstate="up", addresses=(Address("inet6", "fe80::1%eth5"),))
    assert netif.problem(netif.from_netdev(i)) == netif.NO_ADDRESS


SAMPLE = "samples/hgx-h100-8gpu-healthy.snap.tar.gz"


@pytest.mark.parametrize("value,why", [("=lo", "lo: loopback interface"), ("=ib", "'ib' matches no interface")])
def test_check_and_nccl_commands_agree_on_the_sample(tmp_path, value, why):
    import json
    import pathlib

    from cli_runner import run

    sample = str(pathlib.Path(__file__).resolve().parent.parent / SAMPLE)
    env = tmp_path / "job.env"
    env.write_text(f"NCCL_SOCKET_IFNAME={value}\n")
    code, out, _ = run("check", "--replay", sample, "--env-file", str(env), "--only", "env.socket_ifname", "--json")
    doc = json.loads(out)
    (f,) = [f for f in doc["findings"] if f["check"] == "env.socket_ifname"]
    assert code != 0 and f["status"] == "fail" and why in f["summary"]
    code, out, _ = run("nccl", "--replay", sample, "--env-file", str(env), "--json")
    knob = next(k for k in json.loads(out)["nccl"]["knobs"] if k["name"] == "NCCL_SOCKET_IFNAME")
    assert code == 0 and knob["value"] != value and why in knob["reason"]


@pytest.mark.parametrize("value,entries", [
    ("=mlx5_0, mlx5_1", [("mlx5_0", None), (" mlx5_1", None)]),   # NCCL strips nothing
    ("mlx5_0:x,mlx5_1:1x,mlx5_2::0:1", [("mlx5_0", 0), ("mlx5_1", 1), ("mlx5_2", None)]),  # atoi; empty port: any
    ("^=a,,b", [("a", None), ("b", None)]),                          # empty entries dropped (strtok)
])
def test_lists_are_read_the_way_nccl_parses_them(value, entries):
    from ccdiag.nccl.lists import parse_nccl_list

    assert [(e.name, e.port) for e in parse_nccl_list(value).entries] == entries


def test_a_space_after_a_comma_is_a_failure_the_check_names():
    f = _check("=eth0, ib0")
    assert f.status == "fail" and "' ib0' matches no interface" in f.summary and "strips no spaces" in f.summary
