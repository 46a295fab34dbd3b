"""Slurm's ``topology.conf``: the tree plugin's switches or the block plugin's blocks, as a layout.

The format, from topology.conf(5): one line per switch (``SwitchName=s0 Nodes=dev[0-5]``, a leaf;
``SwitchName=s3 Switches=s[0-2]``, a switch above leaves; an optional ``LinkSpeed``), or one line
per block (``BlockName=block1 Nodes=node[1-32]``) with ``BlockSizes=30,120``, or one per ring
(``RingName=ring0 Nodes=node[01-08]``). Parameter names are case insensitive; text after ``#`` is a
comment; node and switch names are hostlist expressions (:mod:`.hostlist`).

What locate takes from it: for a tree, each host's leaf switch (the switch whose ``Nodes`` name it)
and the switch above that leaf; for blocks and rings, each host's block. A host a file lists under
two leaves stays under the first, and the note says so (real files carry such slips; Slurm's own
reading of them is its business, ours is to say what we used).
"""

from __future__ import annotations

from ccdiag.cluster import hostlist
from ccdiag.cluster.layout import Layout
from ccdiag.core.errors import InputError

#: the parameters topology.conf(5) documents, by line kind (lower case)
KEYS = {
    "switchname": ("switchname", "switches", "nodes", "linkspeed"),
    "blockname": ("blockname", "nodes"),
    "blocksizes": ("blocksizes",),
    "ringname": ("ringname", "nodes"),
}


def _lines(text: str):
    """(line number, text without comment) of every non-empty logical line; a trailing backslash
    continues a line."""
    pending, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = no
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            yield start, line
    if pending.strip():
        yield start, pending.strip()


def _pairs(line: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in line.split():
        key, eq, value = tok.partition("=")
        if not eq or not key:
            raise InputError(f"{where}: {tok!r} is not Key=Value")
        k = key.lower()
        if k in out:
            raise InputError(f"{where}: {key} given twice")
        out[k] = value
    return out


def parse(text: str, path: str = "topology.conf") -> Layout:
    """The layout of a topology.conf (tree, block or ring)."""
    switches: dict[str, dict] = {}
    blocks: list[tuple[str, list[str], int]] = []
    block_sizes: list[int] = []
    kinds: set[str] = set()
    budget = [hostlist.MAX_NAMES]
    for no, line in _lines(text):
        where = f"{path}:{no}"
        kv = _pairs(line, where)
        named = [k for k in KEYS if k in kv]
        if len(named) != 1:
            raise InputError(f"{where}: a line has one of SwitchName=, BlockName=, BlockSizes= or RingName="
                             + (f", not {len(named)}" if named else ""))
        first = named[0]
        unknown = sorted(set(kv) - set(KEYS[first]))
        if unknown:
            raise InputError(f"{where}: {first} line with unknown parameter(s) {', '.join(unknown)}")
        try:
            if first == "switchname":
                kinds.add("tree")
                name = kv["switchname"]
                if not name:
                    raise InputError(f"{where}: SwitchName is empty")
                if name in switches:
                    raise InputError(f"{where}: switch {name} defined twice (first on line {switches[name]['line']})")
                switches[name] = {"line": no, "nodes": hostlist.expand(kv.get("nodes", ""), budget),
                                  "switches": hostlist.expand(kv.get("switches", ""), budget)}
            elif first in ("blockname", "ringname"):
                kinds.add("block" if first == "blockname" else "ring")
                name = kv[first]
                if not name:
                    raise InputError(f"{where}: {first} is empty")
                blocks.append((name, hostlist.expand(kv.get("nodes", ""), budget), no))
            else:
                kinds.add("block")
                try:
                    block_sizes = [int(x) for x in kv["blocksizes"].split(",") if x.strip()]
                except ValueError:
                    raise InputError(f"{where}: BlockSizes {kv['blocksizes']!r} is not a list of numbers") from None
        except hostlist.HostlistError as exc:
            raise InputError(f"{where}: bad hostlist: {exc}") from None
    if "tree" in kinds and kinds - {"tree"}:
        raise InputError(f"{path}: switch lines and block/ring lines in one file: a topology.conf is for one plugin")
    if "tree" in kinds:
        return _tree(switches, path)
    if blocks:
        return _blocks(blocks, block_sizes, path, "ring" if kinds == {"ring"} else "block")
    raise InputError(f"{path}: no SwitchName or BlockName line names any node")


def _tree(switches: dict[str, dict], path: str) -> Layout:
    parent: dict[str, str] = {}
    notes: list[str] = []
    for name, sw in switches.items():
        for child in sw["switches"]:
            if child not in switches:
                notes.append(f"switch {name} (line {sw['line']}) names switch {child}, which no line defines")
            parent.setdefault(child, name)
    group_of: dict[str, str] = {}
    for name, sw in switches.items():
        for node in sw["nodes"]:
            if node in group_of:
                if group_of[node] != name:
                    notes.append(f"{node} is listed under {group_of[node]} and {name} (line {sw['line']}); "
                                 f"taken as under {group_of[node]}")
                continue
            group_of[node] = name
    if not group_of:
        raise InputError(f"{path}: no switch names any node (Nodes=)")
    leaves = {g for g in group_of.values()}
    return Layout(fmt="slurm-tree", sources=(path,), group_of=group_of, group_kind="leaf switch",
                  parent_of={g: parent[g] for g in leaves if g in parent}, notes=tuple(notes))


def _blocks(blocks: list[tuple[str, list[str], int]], sizes: list[int], path: str, kind: str) -> Layout:
    group_of: dict[str, str] = {}
    notes: list[str] = []
    for name, nodes, no in blocks:
        for node in nodes:
            if node in group_of:
                notes.append(f"{node} is in {group_of[node]} and {name} (line {no}); taken as in {group_of[node]}")
                continue
            group_of[node] = name
    if not group_of:
        raise InputError(f"{path}: no block names any node (Nodes=)")
    if sizes:
        notes.append(f"BlockSizes={','.join(map(str, sizes))}: locate screens each base block")
    return Layout(fmt=f"slurm-{kind}", sources=(path,), group_of=group_of, group_kind=kind, notes=tuple(notes))
