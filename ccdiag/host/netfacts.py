"""The facts a copied tree holds about its machine's identity and network, read through the door.

``--root DIR`` points ccdiag at a tree copied from another machine (a support bundle, a peer
project's sysfs fixture). Everything reported must then come from that tree: the interfaces,
their addresses and state, the host name and the kernel, never this machine's (psutil, socket and
platform describe the machine ccdiag runs on, not the tree). Reading stays apart from parsing:
the ``parse_*`` functions take text.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable

#: ``/proc/net/if_inet6``: address (32 hex digits), ifindex, prefix length, scope, flags, name
_IF_INET6 = re.compile(r"^([0-9a-fA-F]{32})\s+[0-9a-fA-F]+\s+([0-9a-fA-F]{2})\s+[0-9a-fA-F]+\s+[0-9a-fA-F]+\s+(\S+)$")
_PROC_VERSION = re.compile(r"^Linux version (\S+)")


def parse_if_inet6(text: str) -> dict[str, list[dict]]:
    """IPv6 addresses per interface from ``/proc/net/if_inet6``, in the door's address form
    (``family``, ``address``, ``netmask``, ``broadcast``); lines that do not parse are skipped."""
    out: dict[str, list[dict]] = {}
    for line in text.splitlines():
        m = _IF_INET6.match(line.strip())
        if not m:
            continue
        hexaddr, prefix_hex, name = m.groups()
        address = str(ipaddress.IPv6Address(bytes.fromhex(hexaddr)))
        prefix = int(prefix_hex, 16)
        netmask = str(ipaddress.IPv6Network(f"::/{prefix}").netmask) if prefix <= 128 else None
        out.setdefault(name, []).append({"family": "inet6", "address": address, "netmask": netmask,
                                         "broadcast": None})
    return out


def parse_proc_version(text: str) -> str | None:
    """The kernel release from ``/proc/version`` ("Linux version 5.15.0-91-generic ...")."""
    m = _PROC_VERSION.match(text.strip())
    return m.group(1) if m else None


def _first(read: Callable[[str], str | None], paths: tuple[str, ...]) -> str | None:
    """The first non-empty text among ``paths``; ``read`` gives None for a file it cannot read."""
    for path in paths:
        text = (read(path) or "").strip()
        if text:
            return text
    return None


def tree_net_facts(read: Callable[[str], str | None]) -> dict:
    """The interface facts of a tree whose files ``read`` gives: IPv6 addresses where the tree has
    ``/proc/net/if_inet6``; no IPv4 addresses (they are not kept in files); link state is left to
    the netdev probe's reading of ``/sys/class/net``."""
    text = _first(read, ("/proc/net/if_inet6",))
    return {"addrs": parse_if_inet6(text) if text else {}, "stats": {}}


def tree_identity(read: Callable[[str], str | None]) -> dict:
    """``hostname``, ``kernel`` and ``machine`` of the tree (None where it does not say)."""
    kernel = _first(read, ("/proc/sys/kernel/osrelease",))
    if kernel is None:
        version = _first(read, ("/proc/version",))
        kernel = parse_proc_version(version) if version else None
    return {"hostname": _first(read, ("/proc/sys/kernel/hostname", "/etc/hostname")), "kernel": kernel,
            "machine": _first(read, ("/proc/sys/kernel/arch",))}


__all__ = ["parse_if_inet6", "parse_proc_version", "tree_identity", "tree_net_facts"]
