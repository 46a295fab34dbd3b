"""Candidate interfaces of a host and the address pairs two hosts can measure between.

Why: a node often has several networks (a management Ethernet beside the data fabric, or several
NICs), and MPI measures only the one it was told to use. To name the slow one, each host lists its
candidate interfaces (up, IPv4-addressed, not loopback, not a container/bridge/tunnel interface
or a bridge member: those never carry traffic between hosts of their own), and two hosts measure
between every pair of their addresses that share a subnet (a directly reachable pair; a routed
path would measure the router, not the interface).

The choice is pure (:func:`select`, :func:`common_pairs`) so it is tested without MPI or a real
network; :func:`local_candidates` only reads psutil and /sys and hands the facts to it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Iterable, Mapping, Sequence

# the project's one list of names that never carry traffic between hosts (NCCL's socket choice uses it)
from ccdiag.nccl import netif

SYS_NET = "/sys/class/net"


def _ipv4(addr: str, mask: str | int) -> ipaddress.IPv4Interface | None:
    try:
        return ipaddress.IPv4Interface(f"{addr}/{mask}")
    except ValueError:
        return None


def select(addrs: Mapping[str, Iterable[tuple[str, str | int]]], up: Mapping[str, bool],
           enslaved: Iterable[str] = (), only: Iterable[str] | None = None) -> list[dict]:
    """The candidate interfaces, sorted by name then address, as ``{"name", "address", "prefix"}``.

    ``addrs``: name -> [(IPv4 address, netmask "255.255.255.0" or prefix length)]; ``up``: name ->
    link up; ``enslaved``: names that are a bridge's (or bond's) member; ``only``: the ``--iface``
    names, when the user restricted the choice. Which interfaces qualify is the one usable-interface
    rule (:func:`ccdiag.nccl.netif.problem`) that the environment check and the NCCL recommender
    apply, so an interface one of them refuses is never measured here."""
    wanted = set(only) if only else None
    slaves = set(enslaved)
    out = []
    for name in sorted(addrs):
        pairs = [(a, m, _ipv4(a, m)) for a, m in addrs[name]]
        fact = netif.Iface(name, bool(up.get(name, False)), tuple(a for a, _, ip in pairs if ip is not None),
                           name in slaves)
        if (wanted is not None and name not in wanted) or netif.problem(fact) is not None:
            continue
        out += [{"name": name, "address": str(ip.ip), "prefix": ip.network.prefixlen}
                for _, _, ip in pairs if ip is not None and netif.routable(str(ip.ip))]
    return sorted(out, key=lambda c: (c["name"], c["address"]))


def network_of(cand: Mapping) -> str:
    """The subnet of a candidate, e.g. ``10.77.5.0/24``."""
    return str(ipaddress.IPv4Interface(f"{cand['address']}/{cand['prefix']}").network)


def common_pairs(mine: Sequence[Mapping], theirs: Sequence[Mapping]) -> list[tuple[dict, dict]]:
    """``(my candidate, peer candidate)`` for every pair of addresses on one subnet, as both hosts
    see it (same network and prefix on both sides: a mismatched mask is a misconfiguration, and
    the pair is left out rather than measured through a router). One pair per subnet: the first
    address of each side, so a host with two addresses on one subnet is measured once there.
    Sorted by subnet, the same order on both hosts, which keeps their steps in lockstep."""
    by_net_peer: dict[str, dict] = {}
    for c in theirs:
        by_net_peer.setdefault(network_of(c), dict(c))
    pairs: dict[str, tuple[dict, dict]] = {}
    for c in mine:
        net = network_of(c)
        if net in by_net_peer and net not in pairs and by_net_peer[net]["address"] != c["address"]:
            pairs[net] = (dict(c), by_net_peer[net])
    return [pairs[k] for k in sorted(pairs, key=lambda n: ipaddress.IPv4Network(n))]


def _enslaved_names(names: Iterable[str]) -> list[str]:
    """Interfaces that are a member of a bridge or bond (``/sys/class/net/X/master`` exists)."""
    return [n for n in names if os.path.lexists(os.path.join(SYS_NET, n, "master"))]


def local_candidates(only: Iterable[str] | None = None) -> list[dict]:
    """This host's candidates, read from psutil (addresses, link state) and /sys (bridge members).
    An unreadable list yields no candidates: the per-interface matrix is then empty, never an error."""
    try:
        import psutil

        raw = psutil.net_if_addrs()
        stats = psutil.net_if_stats()
    except Exception:  # noqa: BLE001 - no psutil or no /proc: nothing to measure per interface
        return []
    addrs = {n: [(a.address, a.netmask) for a in items if a.family == socket.AF_INET and a.netmask]
             for n, items in raw.items()}
    up = {n: bool(s.isup) for n, s in stats.items()}
    return select(addrs, up, _enslaved_names(addrs), only)
