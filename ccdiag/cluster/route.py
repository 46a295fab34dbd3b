"""Which link a rank's traffic to a peer really takes: shared memory, the interface the kernel routes
the peer's address through, the transport MPI was told to use, or "unknown".

Why: a finding that names the wrong link sends someone to the wrong cable. Two ranks on one host
talk through shared memory (OpenMPI's ``vader``/``sm``, UCX's ``posix``/``cma``), so a slow hop
between them is the host, never a network link. Between hosts, the name is taken from what
decides the path: MPI's own include list when there is one (``btl_tcp_if_include``, UCX's
``UCX_NET_DEVICES``), else the kernel's route to each of the peer's addresses (a UDP ``connect``
sends nothing and tells the source address the kernel picked). When the peer's addresses route
over several interfaces (OpenMPI's TCP transport then stripes over all of them) the answer says
so, instead of guessing one by a /24 match, which is wrong on /16 networks and on IB fabrics.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Mapping

SHARED_MEMORY = "shared memory"
UNKNOWN = "unknown"


def source_address(peer_addr: str) -> str | None:
    """The local address the kernel would send from to reach ``peer_addr`` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((peer_addr, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def mpi_transport(env: Mapping[str, str], mine: Mapping[str, list]) -> str | None:
    """The link MPI was told to use, when the environment names exactly one: a TCP include list
    with one interface this host has, or UCX's device list."""
    tcp = [x for x in env.get("OMPI_MCA_btl_tcp_if_include", "").split(",") if x and "/" not in x]
    present = [x for x in tcp if x in mine]
    if len(present) == 1:
        return present[0]
    ucx = env.get("UCX_NET_DEVICES", "")
    if ucx and ucx.lower() != "all":
        return f"UCX {ucx}"
    return None


def link_to(me: Mapping, peer: Mapping, env: Mapping[str, str] | None = None,
            resolve: Callable[[str], str | None] = source_address) -> str:
    """The link from this rank (``me``: its ``host`` and ``ifaces`` name -> IPv4 addresses) to
    ``peer`` (the same, as the peer reported it)."""
    if me.get("host") and me.get("host") == peer.get("host"):
        return SHARED_MEMORY
    mine = me.get("ifaces") or {}
    told = mpi_transport(env if env is not None else os.environ, mine)
    if told:
        return told
    by_addr = {a: name for name, addrs in mine.items() for a in addrs}
    routes = set()
    for addrs in (peer.get("ifaces") or {}).values():
        for a in addrs:
            src = resolve(a)
            if src in by_addr:
                routes.add(by_addr[src])
    if len(routes) == 1:
        return routes.pop()
    if routes:
        return f"{UNKNOWN} (MPI may use any of {', '.join(sorted(routes))})"
    return UNKNOWN
