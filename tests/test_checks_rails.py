"""The RoCE rails against their peer rails: MTU, reverse-path filtering, ECN. Scenarios are
SYNTHESIZED (tests/scenarios_fabric.py: eight ConnectX-7 ports in Ethernet mode, one per GPU)."""

from __future__ import annotations

from dataclasses import replace

import scenarios_fabric as S
from ccdiag.checks.rails import rail_ecn, rail_mtu, rail_rp_filter
from ccdiag.core.findings import FAIL, PASS, SKIP, WARN
from ccdiag.probes.netdev import Address


def _rails(**per_iface):
    """The RoCE node with every rail interface edited: ``per_iface[name] = {field: value}``, and
    ``all_`` fields for every rail."""
    runs = S.roce_node()
    net = runs["netdev"].data
    common = per_iface.pop("all_", {})
    ifs = [replace(i, **{**common, **per_iface.get(i.name, {})}) if i.name.startswith("ib") else i
           for i in net.interfaces]
    rp_all = per_iface.pop("rp_all", None)
    return S.with_data(runs, "netdev", replace(net, interfaces=tuple(ifs), rp_filter_all=rp_all))


def test_one_rail_at_1500_among_9000_fails_naming_it():
    runs = _rails(all_={"mtu": 9000}, ib3={"mtu": 1500})
    f = [x for x in rail_mtu(S.make_ctx(runs)) if x.status != PASS]
    assert [(x.status, x.component.device, x.details) for x in f] == [(FAIL, "mlx5_3", {"mtu": 1500, "peers_mtu": 9000})]
    assert "ip link set dev ib3 mtu 9000" in f[0].remedy
    assert [x.status for x in rail_mtu(S.make_ctx(_rails(all_={"mtu": 9000})))] == [PASS]


def test_infiniband_rails_are_not_judged_by_their_ipoib_mtu():
    assert [x.status for x in rail_mtu(S.make_ctx())] == [SKIP]


def _subnet(i, shared):
    return (Address("inet", f"10.10.{0 if shared else i}.{11 + i}", "255.255.255.0"),)


def test_strict_rp_filter_on_rails_sharing_a_subnet_fails():
    shared = {f"ib{i}": {"addresses": _subnet(i, True), "rp_filter": 1} for i in range(8)}
    f = rail_rp_filter(S.make_ctx(_rails(**shared)))
    assert {x.status for x in f} == {FAIL} and len(f) == 8 and "rp_filter=2" in f[0].remedy
    loose = {f"ib{i}": {"addresses": _subnet(i, True), "rp_filter": 2} for i in range(8)}
    assert [x.status for x in rail_rp_filter(S.make_ctx(_rails(**loose)))] == [PASS]
    # all.rp_filter=1 makes an interface's 0 strict (the kernel takes the larger)
    off = {f"ib{i}": {"addresses": _subnet(i, True), "rp_filter": 0} for i in range(8)}
    assert {x.status for x in rail_rp_filter(S.make_ctx(_rails(**off, rp_all=1)))} == {FAIL}


def test_strict_rp_filter_on_rails_in_their_own_subnets_passes():
    own = {f"ib{i}": {"addresses": _subnet(i, False), "rp_filter": 1} for i in range(8)}
    f = rail_rp_filter(S.make_ctx(_rails(**own)))
    assert [x.status for x in f] == [PASS] and "own subnet" in f[0].summary


def test_a_rail_with_ecn_unlike_its_peers_warns():
    on = {"roce_np": (3,), "roce_rp": (3,)}
    runs = _rails(all_={"ecn": on}, ib5={"ecn": {"roce_np": (), "roce_rp": (3,)}})
    f = [x for x in rail_ecn(S.make_ctx(runs)) if x.status != PASS]
    assert [(x.status, x.component.device) for x in f] == [(WARN, "mlx5_5")] and "roce_np" in f[0].summary
    assert [x.status for x in rail_ecn(S.make_ctx(_rails(all_={"ecn": on})))] == [PASS]
    assert [x.status for x in rail_ecn(S.make_ctx(_rails()))] == [SKIP]


def test_rails_in_one_subnet_answering_arp_for_every_address_warn():
    """NVIDIA/nccl#1109: eight rails in one /24 and the switch saw every ARP reply on one interface
    per node; ROCm/rccl#1303: "ARP flux" with the NICs of a node in one subnet."""
    flux = {f"ib{i}": {"addresses": _subnet(i, True), "rp_filter": 2, "arp_ignore": 0} for i in range(8)}
    f = rail_rp_filter(S.make_ctx(_rails(**flux)))
    assert {x.status for x in f} == {WARN} and len(f) == 8 and "ARP flux" in f[0].summary
    fixed = {f"ib{i}": {"addresses": _subnet(i, True), "rp_filter": 2, "arp_ignore": 1} for i in range(8)}
    assert [x.status for x in rail_rp_filter(S.make_ctx(_rails(**fixed)))] == [PASS]
    own = {f"ib{i}": {"addresses": _subnet(i, False), "rp_filter": 2, "arp_ignore": 0} for i in range(8)}
    assert [x.status for x in rail_rp_filter(S.make_ctx(_rails(**own)))] == [PASS]
