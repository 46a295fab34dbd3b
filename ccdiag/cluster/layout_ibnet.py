"""``ibnetdiscover`` output: which hosts' HCAs hang off which leaf switch, as a layout.

The format is ibnetdiscover's print code (rdma-core, infiniband-diags/ibnetdiscover.c):

* a record per node: ``Switch\\t<ports> "S-<guid>"\\t\\t# "<node description>" enhanced|base port 0
  lid <lid> lmc <lmc>``; ``Ca\\t<ports> "H-<guid>"\\t\\t# "<node description>"``; ``Rt`` likewise for
  a router; before each, ``vendid=``, ``devid=``, ``sysimgguid=`` and ``switchguid=``/``caguid=``;
* under a switch, a line per connected port: ``[<port>]`` (``[ext N]`` in chassis mode), a tab, the
  peer's ``"S-..."``/``"H-..."`` and its ``[<port>]``, the peer port's GUID in parentheses for a
  non-switch, then ``# "<peer description>" lid <lid> <width><speed>``;
* under a CA, ``[<port>](<port guid>)``, the switch's ``"S-..."[<port>]``, then
  ``# lid <lid> lmc <lmc> "<switch description>" lid <lid> <width><speed>``.

A host's name is the first word of its HCA's node description (rdma-ndd writes ``"<hostname>
<device>"``). HCAs still carrying the firmware's default ("MT4129 ConnectX7   Mellanox
Technologies") or a SHARP aggregation node's name stand for no host and are counted in the notes. A
leaf is a switch with at least one host's HCA on it; hosts whose HCAs share a leaf are one group,
so a rail-optimised fabric (each host's eight HCAs on eight rail leaves of its scalable unit) gives
one group per scalable unit, and a plain fat tree one group per leaf.
"""

from __future__ import annotations

import re

from ccdiag.cluster.layout import Layout
from ccdiag.core.errors import InputError

_RECORD = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR?])-([0-9a-fA-F]+)"(?:\s*#\s*"(.*?)")?')
_PORT = re.compile(r'^\[(\d+)\]')
_PEER = re.compile(r'"([SHR?])-([0-9a-fA-F]+)"\s*\[(\d+)\]')
_QUOTED = re.compile(r'"(.*?)"')
#: node descriptions that name no host: the HCA firmware's default, a SHARP aggregation node
_NO_HOST = re.compile(r"^MT\d+\b|Mellanox Technologies|Aggregation Node", re.IGNORECASE)
#: the lines of the dump that carry nothing locate uses: a node's ids, chassis-mode headers
_PASSED_OVER = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=|^Chassis\b|^Hostname:|^Non-Chassis Nodes$")
#: a Mellanox/NVIDIA switch's description: "MF0;<name>:<model>/U1"
_SWITCH_NAME = re.compile(r"^MF0;([^:]+):")


def host_of(desc: str | None) -> str | None:
    """The host an HCA's node description names, or None for a default/non-host description."""
    if not desc or not desc.strip() or _NO_HOST.search(desc):
        return None
    return desc.split()[0]


def switch_label(desc: str | None, guid: str) -> str:
    m = _SWITCH_NAME.match(desc or "")
    return m.group(1) if m else (desc or f"S-{guid}")


def parse(text: str, path: str = "ibnetdiscover") -> Layout:
    nodes: dict[str, tuple[str, str | None]] = {}  # "S-guid" -> (kind, description)
    links: set[tuple[str, str]] = set()
    current: str | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            if current is None:
                raise InputError(f"{path}:{no}: a port line before any Switch/Ca record")
            if not _PORT.match(line):
                raise InputError(f"{path}:{no}: a port line that does not start with [<port number>]")
            peer = _PEER.search(line)
            if peer is None:
                raise InputError(f'{path}:{no}: a port line without its peer ("S-<guid>"[<port>] or "H-<guid>"[<port>])')
            other = f"{peer.group(1)}-{peer.group(2).lower()}"
            after = line.split("#", 1)[1] if "#" in line else ""
            q = _QUOTED.search(after)
            if other not in nodes:
                nodes[other] = ("Switch" if peer.group(1) == "S" else "Ca", q.group(1) if q else None)
            links.add((current, other))
            continue
        if line.startswith(("Switch", "Ca", "Rt")) and not line.startswith(("Chassis",)):
            m = _RECORD.match(line)
            if m is None:
                raise InputError(f'{path}:{no}: a {line.split()[0]} record without its "X-<guid>" name')
            current = f"{m.group(3)}-{m.group(4).lower()}"
            nodes[current] = (m.group(1), m.group(5))
            continue
        if not _PASSED_OVER.match(line):
            raise InputError(f"{path}:{no}: not an ibnetdiscover line: {line[:60]!r}")
    return _layout(nodes, links, path)


def _layout(nodes: dict, links: set, path: str) -> Layout:
    leaves_of: dict[str, set[str]] = {}
    unnamed: set[str] = set()
    for a, b in links:
        ka, kb = nodes.get(a, ("?", None))[0], nodes.get(b, ("?", None))[0]
        if ka == "Switch" and kb == "Ca":
            sw, ca = a, b
        elif ka == "Ca" and kb == "Switch":
            sw, ca = b, a
        else:
            continue
        host = host_of(nodes[ca][1])
        if host is None:
            unnamed.add(ca)
            continue
        leaves_of.setdefault(host, set()).add(sw)
    if not leaves_of:
        raise InputError(f"{path}: no switch port leads to a host's HCA (is this ibnetdiscover output?)")
    # hosts sharing a leaf are one group (union-find over leaves), in the order hosts appear
    root: dict[str, str] = {}

    def find(x: str) -> str:
        while root.setdefault(x, x) != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    for sws in leaves_of.values():
        first, *rest = sorted(sws)
        for s in rest:
            root[find(s)] = find(first)
    members: dict[str, set[str]] = {}
    for sws in leaves_of.values():
        for s in sws:
            members.setdefault(find(s), set()).add(s)
    names = {r: _group_name(sorted(switch_label(nodes[s][1], s[2:]) for s in sws)) for r, sws in members.items()}
    hosts = sorted(leaves_of, key=_natural)
    group_of = {h: names[find(next(iter(leaves_of[h])))] for h in hosts}
    notes = [f"{len(leaves_of)} hosts on {sum(len(m) for m in members.values())} leaf switches in {len(members)} groups"]
    if unnamed:
        notes.append(f"{len(unnamed)} HCAs carry no host name (a firmware default or an aggregation node's "
                     f"description): set node descriptions (rdma-ndd) to place those hosts")
    return Layout(fmt="ibnetdiscover", sources=(path,), group_of=group_of, group_kind="leaf switch",
                  notes=tuple(notes))


def _group_name(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{labels[0]} (+{len(labels) - 1} leaves)"


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name.lower())]
