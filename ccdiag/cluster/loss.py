"""Packet loss between hosts, from what TCP resent and what the NICs counted while each pair ran.

Why: TCP hides loss from a bandwidth figure (:mod:`.netcounters`), so a path that drops one packet in
a hundred passes every rate check; its retransmissions do not hide. In a round of disjoint pairs a
host sends to one peer only, so the TCP segments it resent during that pair's transfers, over the
segments it sent, is the loss rate of the direction host -> peer.

The rule: a direction whose sender resent more than :data:`LOSS_FRACTION` of at least
:data:`MIN_SEGMENTS` segments is lossy. Healthy paths resend far less: 114 of about 22 million
segments (0.0005 %) in a public 20-second iperf3 run on a 25 Gbit/s NIC (esnet/iperf#1088), at most
773 of about a million a second (0.07 %) in a public 40 Gbit/s run the maintainers called fine
(cilium/cilium#981), none between this project's test hosts at 1 Gbit/s once the resent segments
the receiver reported as duplicates (D-SACK) are taken off (a timer that fired early on a loaded
host; up to 0.12 % without that); a path dropping 1 % of its packets resends about 0.9 % of a
one-way stream (measured between the test hosts with nftables dropping 1 % at random: SYNTHESIZED
loss, real kernel counters), 0.3 to 1.9 % of an MPI exchange's segments, where both directions run
at once and ``OutSegs`` counts the acknowledgements too. 0.1 % sits between the two.

Which host: the project's one rule for a slow member vs a slow pair
(:func:`ccdiag.core.outliers.classify_flags`): a host in every lossy pair, while some pair without
it is clean, is where the loss is; which way (its peers resending to it: loss into it; it resending
to them: loss out of it) and its interface's drop counters say more. RDMA NICs count their own loss
(``out_of_sequence``, ``packet_seq_err``, ``local_ack_timeout_err``, ``out_of_buffer``): any that
rose on a host while the run ran is named on that host.
"""

from __future__ import annotations

from ccdiag.cluster import netcounters
from ccdiag.core import outliers
from ccdiag.core.findings import FAIL, WARN, Component, Evidence, Finding

#: a direction whose sender resent more than this fraction of its segments is lossy
LOSS_FRACTION = 0.001
#: fewer segments sent than this in a pair say nothing of its loss rate
MIN_SEGMENTS = 1000
#: interface counters that say a packet was dropped or damaged
IFACE_LOSS = ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors", "rx_missed_errors", "rx_crc_errors")


def loss_fraction(tcp: dict) -> float | None:
    """Resent segments that were lost / sent segments of a :func:`.netcounters.delta` ``tcp``
    part, or None below :data:`MIN_SEGMENTS`. A resent segment the receiver reported back as a
    duplicate (D-SACK, ``TcpExt: TCPDSACKRecvSegs``) had arrived: a retransmission timer or a tail
    loss probe that fired early (a rank, or its kernel, held off the CPU), not loss."""
    out = tcp.get("out_segs") or 0
    if out < MIN_SEGMENTS or "retrans_segs" not in tcp:
        return None
    return max(0, tcp["retrans_segs"] - (tcp.get("dsack_recv_segs") or 0)) / out


def rates(per_pair: dict[tuple[str, str], dict]) -> dict[tuple[str, str], float]:
    """``(sender, peer)`` -> loss fraction, from each sender's TCP counters during its pair."""
    return {k: r for k, d in per_pair.items() if (r := loss_fraction((d or {}).get("tcp") or {})) is not None}


def findings(per_pair: dict[tuple[str, str], dict], hosts: list[str], label: str,
             again: dict[tuple[str, str], dict] | None = None) -> list[Finding]:
    """Lossy hosts and lossy pairs (see the module docstring). ``per_pair[(a, b)]``: what ``a``'s
    counters moved while ``a`` measured with ``b`` (:func:`.netcounters.delta`); ``again``: the
    same for the pairs measured a second time. A host lossy with every peer is named at once; a
    single lossy pair only when its second measurement is lossy too (WARN when it was not, or was
    not measured again: the tail of another pair's traffic resent in its window reads the same)."""
    r = rates(per_pair)
    if not r:
        return []
    idx = {h: i for i, h in enumerate(hosts)}

    def key(a: str, b: str) -> tuple[str, str]:
        return (a, b) if idx.get(a, 0) <= idx.get(b, 0) else (b, a)

    flags: dict[tuple[str, str], bool] = {}
    for (a, b), v in r.items():
        k = key(a, b)
        flags[k] = flags.get(k, False) or v > LOSS_FRACTION
    cls = outliers.classify_flags(flags)
    r2 = rates(again or {})
    return ([_host_finding(h, r, per_pair, label) for h in cls.slow_members]
            + [_link_finding(a, b, r, r2, label) for a, b in cls.slow_pairs])


def _host_finding(h: str, r: dict, per_pair: dict, label: str) -> Finding:
    """A host lossy with every peer, and which way (its peers resend to it, or it to them)."""
    into = {a: v for (a, b), v in r.items() if b == h}
    outof = {b: v for (a, b), v in r.items() if a == h}
    bad_in = sum(1 for v in into.values() if v > LOSS_FRACTION)
    way = "into" if bad_in >= sum(1 for v in outof.values() if v > LOSS_FRACTION) else "out of"
    shown = into if way == "into" else outof
    others = [v for (a, b), v in r.items() if h not in (a, b)]
    drops = _iface_drops(per_pair, h)
    return Finding(
        check="cluster.host_loss", status=FAIL, component=Component(kind="node", name=h, device=label),
        summary=(f"host {h} loses packets {way} it over {label}: TCP resent "
                 f"{', '.join(f'{p} {v:.2%}' for p, v in sorted(shown.items()))} of the segments "
                 f"{'its peers sent to it' if way == 'into' else 'it sent to them'}, against at most "
                 f"{max(others, default=0.0):.2%} between other hosts" + (f"; {drops}" if drops else "")),
        evidence=tuple(Evidence(f"resent {a}->{b}", round(v, 6), "/proc/net/snmp Tcp RetransSegs / OutSegs of the sender")
                       for (a, b), v in sorted(r.items()) if h in (a, b)),
        expected=f"<= {LOSS_FRACTION:.1%} of the segments resent", expected_source="ccdiag.cluster.loss.LOSS_FRACTION",
        remedy=(f"look at {h}'s link over {label}: its NIC's and switch port's error and drop counters "
                f"(`ethtool -S`, `ip -s link`), the cable or transceiver, a policer or firewall dropping packets"),
        details={"host": h, "way": way, "iface": label,
                 "fractions": {f"{a}->{b}": v for (a, b), v in r.items() if h in (a, b)}})


def _link_finding(a: str, b: str, r: dict, r2: dict, label: str) -> Finding:
    """One lossy pair: FAIL when its second measurement is lossy too, else WARN (seen once)."""
    ab, ba = r.get((a, b)), r.get((b, a))
    seen = [r2[k] for k in ((a, b), (b, a)) if k in r2]
    confirmed = bool(seen) and max(seen) > LOSS_FRACTION
    why = ("; measured again: lossy again" if confirmed else
           "; measured again: not lossy (seen once)" if seen else "; not measured again (seen once)")
    return Finding(
        check="cluster.link_loss", status=FAIL if confirmed else WARN,
        component=Component(kind="host_link", name=f"{a} <-> {b} ({label})", device=label, peer=b),
        summary=(f"link {a} <-> {b} over {label} loses packets: TCP resent "
                 f"{'-' if ab is None else f'{ab:.2%}'} of {a}'s segments to {b}, "
                 f"{'-' if ba is None else f'{ba:.2%}'} of {b}'s to {a}{why}"),
        evidence=(Evidence(f"resent {a}->{b}", ab, "/proc/net/snmp of the sender"),
                  Evidence(f"resent {b}->{a}", ba, "/proc/net/snmp of the sender")),
        expected=f"<= {LOSS_FRACTION:.1%} of the segments resent", expected_source="ccdiag.cluster.loss.LOSS_FRACTION",
        remedy=f"check the path between {a} and {b}: the switch ports and uplinks between them, a policer",
        details={"a": a, "b": b, "iface": label, "a_to_b": ab, "b_to_a": ba, "again": seen})


def _iface_drops(per_pair: dict, host: str) -> str:
    """What ``host``'s interfaces counted as dropped or damaged while it measured."""
    total: dict[str, int] = {}
    for (a, _), d in per_pair.items():
        if a != host:
            continue
        for name, stats in ((d or {}).get("ifaces") or {}).items():
            for k in IFACE_LOSS:
                if stats.get(k):
                    total[f"{name} {k}"] = total.get(f"{name} {k}", 0) + stats[k]
    return ", ".join(f"{k} +{v}" for k, v in sorted(total.items()))


def rdma_findings(per_host: dict[str, dict]) -> list[Finding]:
    """A host whose RDMA NIC counted lost packets while the run ran (its whole-run
    :func:`.netcounters.delta`); congestion counters (CNPs, ``port_xmit_wait``) are listed with it.
    WARN: other traffic on the host may have moved them too."""
    out = []
    for h, moved in sorted(per_host.items()):
        for port, d in sorted(((moved or {}).get("rdma") or {}).items()):
            lost = {k: v for k in netcounters.RDMA_LOSS if (v := d.get(k))}
            if not lost:
                continue
            congestion = {k: v for k in netcounters.RDMA_CONGESTION + ("port_xmit_wait",) if (v := d.get(k))}
            out.append(Finding(
                check="cluster.rdma_loss", status=WARN, component=Component(kind="ib_port", name=f"{h} {port}", device=port),
                summary=(f"host {h}: RDMA port {port} counted lost packets while the pairs ran: "
                         + ", ".join(f"{k} +{v}" for k, v in lost.items())
                         + (f" (congestion: {', '.join(f'{k} +{v}' for k, v in congestion.items())})" if congestion else "")),
                evidence=tuple(Evidence(k, v, f"/sys/class/infiniband/{port.split('/')[0]}/ports/{port.split('/')[-1]}/hw_counters")
                               for k, v in lost.items()),
                remedy=("RoCE: check PFC/ECN on the port and its switch (lossless class), the port's error counters "
                        "and cable; InfiniBand: the port's symbol and receive errors"),
                details={"host": h, "port": port, "lost": lost, "congestion": congestion}))
    return out
