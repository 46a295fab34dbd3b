"""The network settings of the RoCE rails, each against its peer rails on the same node.

A node's RDMA rails are built alike (one NIC per GPU, same model, same rate), so they are each
other's baseline, as the GPUs are in :mod:`ccdiag.checks.peers`. Three settings break RoCE on one
rail while ``ibv_devinfo`` shows it ACTIVE at full rate:

* the MTU of the rail's interface: RoCE's path MTU follows it (a 1500-byte interface gives 1024-byte
  RDMA packets where its peers at 9000 give 4096), so one rail at 1500 among rails at 9000 runs
  slower and NCCL's rings run at its pace;
* reverse-path filtering: with several rails in one IPv4 subnet, strict filtering
  (``rp_filter=1``) drops the packets that arrive on a rail other than the one the route names, so
  RDMA connection set-up fails on all but one rail; the kernel applies the larger of the
  interface's and ``all``'s value, and loose mode (2) or off (0) is what multi-rail RoCE needs;
* ARP on rails that share a subnet: with ``arp_ignore=0`` every rail answers ARP for every local
  address, so peers learn one rail's MAC for all of them and the traffic of several rails leaves
  through one (NVIDIA/nccl#1109, ROCm/rccl#1303: "ARP flux");
* ECN for RoCE congestion control, per priority, where the driver exposes it (mlx5's ``ecn``
  directory): a rail whose notification or reaction point differs from its peers' reacts to
  congestion unlike the rest of the fabric.

InfiniBand rails are left out of the MTU rule: the subnet manager sets their MTU, not the interface
(the IPoIB interface's MTU is no RDMA MTU).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import node_component
from ccdiag.core.findings import FAIL, PASS, SKIP, WARN, Component, Evidence, Finding
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NETDEV

PEERS = "the node's other RoCE rails (no policy needed)"


def _majority(values: list) -> tuple[Any, int] | None:
    counts = Counter(v for v in values if v is not None)
    if not counts:
        return None
    value, n = counts.most_common(1)[0]
    return (value, n) if n * 2 > sum(counts.values()) else None


def roce_rails(ctx: CheckContext) -> list[tuple[Any, Any, Any]]:
    """(RDMA device, its active Ethernet port, its network interface) for every RoCE rail: the
    active RoCE ports at the rate most of them run (a slower storage or management NIC is no rail)."""
    ib, net = ctx.data(PROBE_INFINIBAND), ctx.data(PROBE_NETDEV)
    if ib is None or net is None:
        return []
    by_name = {i.name: i for i in net.interfaces}
    out = []
    for d in ib.devices:
        names = list(d.netdevs) + [i.name for i in net.interfaces if i.ib_device == d.name and i.name not in d.netdevs]
        itf = next((by_name[n] for n in names if n in by_name), None)
        for p in d.ports:
            if (p.link_layer or "").lower() == "ethernet" and (p.state or "").upper() == "ACTIVE" and itf is not None:
                out.append((d, p, itf))
    rate = _majority([p.rate_gbit_s for _, p, _ in out])
    return [r for r in out if rate is None or r[1].rate_gbit_s == rate[0]]


def _component(d: Any, p: Any, itf: Any) -> Component:
    return Component("ib_port", f"{d.name} port {p.port}", device=d.name, port=p.port, peer=itf.name)


@check("ib.mtu", needs=(PROBE_INFINIBAND, PROBE_NETDEV), what="RoCE rail MTU")
def rail_mtu(ctx: CheckContext) -> list[Finding]:
    """A RoCE rail whose interface MTU is below its peer rails' (1500 among 9000)."""
    cid = "ib.mtu"
    rails = [r for r in roce_rails(ctx) if r[2].mtu is not None]
    if len(rails) < 2:
        return [Finding(cid, SKIP, node_component(), "Fewer than two RoCE rails: no MTU to compare (an InfiniBand "
                        "MTU is the subnet manager's).")]
    major = _majority([itf.mtu for _, _, itf in rails])
    if major is None:
        mtus = Counter(itf.mtu for _, _, itf in rails)
        return [Finding(cid, WARN, node_component(), "The RoCE rails run different MTUs with no majority: "
                        + ", ".join(f"{n} at {m}" for m, n in sorted(mtus.items())) + ".",
                        evidence=tuple(Evidence(f"{itf.name} MTU", itf.mtu, f"/sys/class/net/{itf.name}/mtu")
                                       for _, _, itf in rails),
                        expected="one MTU on every rail", expected_source=PEERS,
                        remedy="Set every rail interface to the fabric's MTU (9000 on most RoCE fabrics).")]
    want, n = major
    out = []
    for d, p, itf in rails:
        if itf.mtu < want:
            out.append(Finding(cid, FAIL, _component(d, p, itf),
                               f"{d.name} ({itf.name}) MTU {itf.mtu} while its {n} peer rails run {want}: its RDMA "
                               "packets are smaller and NCCL's rings run at this rail's pace.",
                               evidence=(Evidence("MTU", itf.mtu, f"/sys/class/net/{itf.name}/mtu"),
                                         Evidence("peer rails' MTU", want, "/sys/class/net/*/mtu")),
                               expected=f"MTU {want}, as the other rails", expected_source=PEERS,
                               remedy=f"ip link set dev {itf.name} mtu {want}, and make it persistent in the "
                                      "interface's network configuration (netplan, NetworkManager, ifcfg).",
                               details={"mtu": itf.mtu, "peers_mtu": want}))
    return out or [Finding(cid, PASS, node_component(), f"{len(rails)} RoCE rails at MTU {want}.",
                           expected_source=PEERS)]


def _subnets(itf: Any) -> set:
    out = set()
    for a in itf.addresses:
        if a.family == "inet" and a.netmask:
            try:
                out.add(ipaddress.IPv4Network(f"{a.address}/{a.netmask}", strict=False))
            except ValueError:
                continue
    return out


@check("ib.rp_filter", needs=(PROBE_INFINIBAND, PROBE_NETDEV), what="reverse-path filtering on RoCE rails")
def rail_rp_filter(ctx: CheckContext) -> list[Finding]:
    """Strict reverse-path filtering on RoCE rails that share an IPv4 subnet."""
    cid = "ib.rp_filter"
    net = ctx.data(PROBE_NETDEV)
    rails = roce_rails(ctx)
    nets = {itf.name: _subnets(itf) for _, _, itf in rails}
    shared = {name for name, s in nets.items() for other, t in nets.items() if other != name and s & t}
    if len(rails) < 2:
        return [Finding(cid, SKIP, node_component(), "Fewer than two RoCE rails: reverse-path filtering does not "
                        "matter here.")]
    all_value = getattr(net, "rp_filter_all", None)
    out = []
    unread = []
    for d, p, itf in rails:
        if itf.rp_filter is None:
            unread.append(itf.name)
            continue
        effective = max(itf.rp_filter, all_value or 0)
        if effective == 1 and itf.name in shared:
            out.append(Finding(cid, FAIL, _component(d, p, itf),
                               f"{itf.name} ({d.name}) filters reverse paths strictly (rp_filter 1) and shares its "
                               "subnet with other rails: packets arriving on it for another rail's route are "
                               "dropped, and RDMA connections over it fail.",
                               evidence=(Evidence("rp_filter", itf.rp_filter, f"/proc/sys/net/ipv4/conf/{itf.name}/rp_filter"),
                                         Evidence("all.rp_filter", all_value, "/proc/sys/net/ipv4/conf/all/rp_filter"),
                                         Evidence("subnet", sorted(str(s) for s in nets[itf.name]), "interface addresses")),
                               expected="rp_filter 2 (loose) or 0 on rails that share a subnet",
                               expected_source="the kernel's reverse-path filter (uses max(all, interface))",
                               remedy=f"sysctl -w net.ipv4.conf.{itf.name}.rp_filter=2 and "
                                      "net.ipv4.conf.all.rp_filter=2, and persist them in /etc/sysctl.d/.",
                               details={"rp_filter": effective}))
    arp_all = getattr(net, "arp_ignore_all", None)
    for d, p, itf in rails:
        if itf.arp_ignore is None or itf.name not in shared or any(f.component.device == d.name for f in out):
            continue
        if max(itf.arp_ignore, arp_all or 0) == 0:
            out.append(Finding(cid, WARN, _component(d, p, itf),
                               f"{itf.name} ({d.name}) shares its subnet with other rails and answers ARP for every "
                               "local address (arp_ignore 0): peers may learn one rail's MAC for all of them and "
                               "send several rails' traffic through one (ARP flux).",
                               evidence=(Evidence("arp_ignore", itf.arp_ignore,
                                                  f"/proc/sys/net/ipv4/conf/{itf.name}/arp_ignore"),
                                         Evidence("all.arp_ignore", arp_all, "/proc/sys/net/ipv4/conf/all/arp_ignore"),
                                         Evidence("subnet", sorted(str(s) for s in nets[itf.name]), "interface addresses")),
                               expected="arp_ignore 1 and arp_announce 2 (with a route per rail), or a subnet per rail",
                               expected_source="NVIDIA/nccl#1109, ROCm/rccl#1303 (rails in one subnet)",
                               remedy="Give each rail its own subnet, or set net.ipv4.conf.all.arp_ignore=1 and "
                                      "arp_announce=2 with a routing table per rail.",
                               details={"arp_ignore": itf.arp_ignore}))
    if out:
        return out
    if unread and len(unread) == len(rails):
        return [Finding(cid, SKIP, node_component(), "rp_filter of the rails not read (a snapshot without it).")]
    return [Finding(cid, PASS, node_component(), f"{len(rails)} RoCE rails: no strict reverse-path filtering on rails "
                    "that share a subnet" + (f" ({len(shared)} share one)." if shared else " (each in its own subnet)."),
                    evidence=(Evidence("all.rp_filter", all_value, "/proc/sys/net/ipv4/conf/all/rp_filter"),))]


@check("ib.ecn", needs=(PROBE_INFINIBAND, PROBE_NETDEV), what="RoCE ECN on the rails")
def rail_ecn(ctx: CheckContext) -> list[Finding]:
    """A RoCE rail whose ECN settings (per priority, notification and reaction point) differ from
    its peer rails'. PFC is set through DCB (not sysfs) and is not read here."""
    cid = "ib.ecn"
    rails = [r for r in roce_rails(ctx) if r[2].ecn is not None]
    if len(rails) < 2:
        return [Finding(cid, SKIP, node_component(), "ECN is not exposed in sysfs for two or more RoCE rails "
                        "(mlx5's ecn directory); PFC and ECN are set through DCB tools there.")]

    def key(itf: Any) -> tuple:
        return tuple(sorted((k, tuple(v)) for k, v in (itf.ecn or {}).items()))
    major = _majority([key(itf) for _, _, itf in rails])
    if major is None:
        return [Finding(cid, WARN, node_component(), "The RoCE rails' ECN settings differ with no majority.",
                        evidence=tuple(Evidence(f"{itf.name} ECN", itf.ecn, f"/sys/class/net/{itf.name}/ecn")
                                       for _, _, itf in rails),
                        expected="the same ECN settings on every rail", expected_source=PEERS)]
    want = dict(major[0])
    out = []
    for d, p, itf in rails:
        if key(itf) != major[0]:
            out.append(Finding(cid, WARN, _component(d, p, itf),
                               f"{itf.name} ({d.name}) ECN differs from its {major[1]} peer rails': "
                               + "; ".join(f"{k} on priorities {list(itf.ecn.get(k, ()))} (peers {list(want.get(k, ()))})"
                                           for k in sorted(set(want) | set(itf.ecn)) if itf.ecn.get(k) != want.get(k))
                               + ".", evidence=(Evidence("ECN", itf.ecn, f"/sys/class/net/{itf.name}/ecn"),
                                                Evidence("peer rails' ECN", want, "/sys/class/net/*/ecn")),
                               expected="the same ECN settings as the other rails", expected_source=PEERS,
                               remedy=f"Set {itf.name}'s ECN like the other rails (echo 1 > "
                                      f"/sys/class/net/{itf.name}/ecn/roce_np/enable/<prio>, and roce_rp), or through "
                                      "the NIC's QoS tool.", details={"ecn": itf.ecn, "peers_ecn": want}))
    return out or [Finding(cid, PASS, node_component(), f"{len(rails)} RoCE rails with the same ECN settings.",
                           expected_source=PEERS)]
