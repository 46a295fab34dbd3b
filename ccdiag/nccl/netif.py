"""Whether a network interface can carry NCCL/MPI traffic between hosts: the one rule.

Three places ask this question: the environment check (does ``NCCL_SOCKET_IFNAME`` select a usable
interface?), the NCCL recommender (which interface to write into ``NCCL_SOCKET_IFNAME``) and the
cluster run (which addresses two hosts measure between). They all call :func:`problem` so that a
setting one of them rejects is rejected by the others with the same words.

An interface is refused when it is loopback; a container, bridge or tunnel interface by name
(``docker0``, ``veth*``, ``br-*``, ``virbr*``, ``cni*``, ``flannel*``...: interfaces that never carry
traffic between hosts of their own, the same prefixes NCCL itself leaves out by default); a member
of a bridge or bond (its address, if any, is not where traffic goes); down; or without an address
outside loopback and link-local. Bonds and teams are virtual but real fabric. The kernel's "virtual"
flag is deliberately not a reason: inside a container or network namespace the host's own NIC is a
veth peer named ``eth0``, and that one does carry the traffic.

:func:`judge_list` reads an ``NCCL_SOCKET_IFNAME`` value with NCCL's own list semantics
(:mod:`ccdiag.nccl.lists`: ``^`` excludes, ``=`` exact names, otherwise prefixes) against the
interfaces of a node and says which usable interfaces NCCL would use and what is wrong.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ccdiag.nccl.lists import nccl_match, parse_nccl_list

#: interface name prefixes that never carry NCCL traffic between hosts (containers, bridges, tunnels)
NOT_FABRIC = ("lo", "docker", "br-", "virbr", "veth", "cni", "flannel", "cali", "vxlan", "tun", "tap", "lxc",
              "kube", "weave", "genev", "wg", "tailscale", "cilium", "podman", "vnet", "nerdctl")
#: virtual interfaces that are real fabric (bonds, teams)
VIRTUAL_BUT_FABRIC = ("bond", "team")

LOOPBACK = "loopback interface"
NOT_FABRIC_WHY = "container, bridge or tunnel interface"
ENSLAVED = "member of a bridge or bond"
DOWN = "down"
NO_ADDRESS = "no IP address"


@dataclass(frozen=True)
class Iface:
    """What the rule needs to know of one interface, whichever probe or library it came from."""

    name: str
    up: bool | None  # None: state not known
    addresses: tuple[str, ...] = ()  # IPv4/IPv6 addresses as text (no prefix length)
    enslaved: bool = False
    speed_mbps: int | None = None


def from_netdev(i: Any) -> Iface:
    """An :class:`ccdiag.probes.netdev.NetInterface` as the rule sees it. ``up`` wins over
    ``operstate``; operstate ``unknown`` (loopback, some virtual NICs) counts as up, as the kernel
    means it."""
    up = i.up
    if up is None and i.operstate:
        up = i.operstate.lower() in ("up", "unknown")
    addrs = tuple(str(a.address) for a in i.addresses if a.family in ("inet", "inet6"))
    return Iface(i.name, up, addrs, False, i.speed_mbps)


def name_problem(name: str) -> str | None:
    """Why an interface's name alone rules it out, or None."""
    if name == "lo":
        return LOOPBACK
    if name.startswith(NOT_FABRIC) and not name.startswith(VIRTUAL_BUT_FABRIC):
        return NOT_FABRIC_WHY
    return None


def routable(address: str) -> bool:
    """An address another host can reach: not loopback, not link-local, not unspecified."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)


def problem(iface: Iface) -> str | None:
    """Why ``iface`` cannot carry NCCL/MPI traffic between hosts, or None when it can."""
    why = name_problem(iface.name)
    if why:
        return why
    if iface.enslaved:
        return ENSLAVED
    if iface.up is False:
        return DOWN
    if not any(routable(a) for a in iface.addresses):
        return NO_ADDRESS
    return None


def usable(ifaces: Iterable[Iface]) -> list[Iface]:
    return [i for i in ifaces if problem(i) is None]


@dataclass(frozen=True)
class ListVerdict:
    """An ``NCCL_SOCKET_IFNAME`` value judged against a node's interfaces."""

    chosen: tuple[str, ...]  # usable interfaces NCCL would use under the list
    problems: tuple[str, ...]  # what is wrong, one sentence per entry (empty: fine)
    usable: tuple[str, ...]  # every usable interface of the node, for the remedy

    @property
    def ok(self) -> bool:
        return not self.problems and bool(self.chosen)


def _entry_problem(entry_name: str, matched: list[Iface], exact: bool) -> str | None:
    if not matched:
        spaces = " (NCCL strips no spaces from list entries)" if entry_name != entry_name.strip() else ""
        return f"'{entry_name}' matches no interface" + ("" if exact else " (as a prefix)") + spaces
    if usable(matched):
        return None
    return "; ".join(f"{i.name}: {problem(i)}" for i in matched)


def judge_list(value: str, ifaces: Iterable[Iface]) -> ListVerdict:
    """Which usable interfaces NCCL would use under ``value``, and every entry that selects none."""
    ifaces = list(ifaces)
    good = tuple(i.name for i in usable(ifaces))
    spec = parse_nccl_list(value)
    if spec.exclude:
        left = tuple(n for n in good if spec.selects(n))
        return ListVerdict(left, () if left else ("excludes every usable interface",), good)
    problems, chosen = [], []
    for e in spec.entries:
        matched = [i for i in ifaces if nccl_match(spec, e, i.name)]
        why = _entry_problem(e.name, matched, spec.exact)
        if why:
            problems.append(why)
        chosen += [i.name for i in usable(matched) if i.name not in chosen]
    if not spec.entries:
        problems.append("names no interface")
    return ListVerdict(tuple(chosen), tuple(problems), good)


__all__ = [
    "NOT_FABRIC",
    "VIRTUAL_BUT_FABRIC",
    "Iface",
    "ListVerdict",
    "from_netdev",
    "judge_list",
    "name_problem",
    "problem",
    "routable",
    "usable",
]
