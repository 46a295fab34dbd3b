"""The whole device-by-device level matrix in O(n^2) cheap cell copies instead of n^2 level() calls.

Why: ``topo --json`` carries the complete GPU/NIC matrix. With 3,000 RDMA devices that is 9 million
cells, and :meth:`Topology.level` (a few microseconds each: id lookups, chain walks, a cache keyed by
pairs of parents) took ~30 s for them. Between two PCIe endpoints the level depends only on where
their ancestor chains meet (the lowest common ancestor, LCA) and on how many switches each side
climbs to reach it, so a row can be filled range by range:

* columns are ordered by their root path (top of chain first), which makes every subtree of the PCIe
  forest one contiguous range of columns;
* for a row, walking its own chain from the top down, each ancestor ``x`` overwrites its subtree's
  range with the level of a pair meeting at ``x`` (NODE at a NUMA node, PHB at a host bridge, PIX or
  PXB by switch count, precomputed per ``x`` for the columns below it); deeper ancestors overwrite
  shallower ones, so each column ends with the level at its true LCA;
* columns under another top get SYS (NUMA nodes that differ) or unknown, as ``level()`` says.

Everything else is left to ``level()`` itself, cell by cell: GPU-GPU pairs (NVLink), ends that are
not PCIe leaves or have no parent, ends whose chain ends in a loop (a hostile snapshot's parent
cycle), and duplicated ends. tests/test_topology_fastrows.py checks equality with ``level()``.
"""

from __future__ import annotations

import operator
from typing import Any

from ccdiag.topology.levels import UNKNOWN


def level_rows(topo: Any, ends: list[str]) -> list[list[str]]:
    """``[[topo.level(a, b) or "X" on the diagonal for b in ends] for a in ends]``, quickly."""
    n = len(ends)
    parent, inner, nodes = topo._parent, topo._inner, topo.graph.nodes
    kinds = [nodes[e].get("kind") for e in ends]
    slow: set[int] = set()
    paths: dict[int, tuple[str, ...]] = {}
    for j, e in enumerate(ends):
        p = parent.get(e)
        if p is None or e in inner:
            slow.add(j)
            continue
        chain = topo._ancestors(p)
        if chain[-1] in parent:  # the walk stopped at a cycle, not at a top
            slow.add(j)
            continue
        paths[j] = tuple(reversed(chain))
    if len(set(ends)) != n:
        slow = set(range(n))
        paths = {}

    fast = sorted(paths, key=lambda j: paths[j])  # columns in root-path order: subtrees contiguous
    where = {j: k for k, j in enumerate(fast)}
    is_switch = {}

    def switch(x: str) -> int:
        v = is_switch.get(x)
        if v is None:
            v = is_switch[x] = 1 if nodes[x].get("kind") == "switch" else 0
        return v

    # ranges and per-LCA templates: for prefix (root path to x), the columns [lo, hi) below x and,
    # for each, whether the switches strictly below x on its side number 0, 1 or more
    ranges: dict[tuple[str, ...], list[int]] = {}
    below: dict[tuple[str, ...], list[int]] = {}
    for k, j in enumerate(fast):
        path = paths[j]
        # switches at depths d+1.. of this path, for each depth d
        suffix = [0] * (len(path) + 1)
        for d in range(len(path) - 1, -1, -1):
            suffix[d] = suffix[d + 1] + switch(path[d])
        for d in range(len(path)):
            pre = path[:d + 1]
            r = ranges.get(pre)
            if r is None:
                ranges[pre] = [k, k + 1]
                below[pre] = [suffix[d + 1]]
            else:
                r[1] = k + 1
                below[pre].append(suffix[d + 1])
    templates: dict[tuple[tuple[str, ...], int], list[str]] = {}

    def template(pre: tuple[str, ...], a: int) -> list[str]:
        """Levels of the columns below ``pre[-1]`` for a row contributing ``a`` bridges there."""
        t = templates.get((pre, a))
        if t is None:
            kind = nodes[pre[-1]].get("kind")
            if kind == "numa":
                t = ["NODE"] * len(below[pre])
            elif kind == "host_bridge":
                t = ["PHB"] * len(below[pre])
            else:
                t = ["PIX" if a + b <= 1 else "PXB" for b in below[pre]]
            templates[(pre, a)] = t
        return t

    tops = sorted({paths[j][0] for j in fast})

    def numa_of(top: str):
        return nodes[top].get("numa") if nodes[top].get("kind") == "numa" else None

    order = [where.get(j, -1) for j in range(n)]
    sorted_rows: dict[str, list[str]] = {}
    rows: list[list[str]] = []
    for i, a in enumerate(ends):
        if i in slow or i not in paths:
            rows.append([])
            continue
        path = paths[i]
        p = path[-1]
        srow = sorted_rows.get(p)
        if srow is None:
            srow = [UNKNOWN] * len(fast)
            my_numa = numa_of(path[0])
            for top in tops:
                if top == path[0]:
                    continue
                their = numa_of(top)
                lvl = "SYS" if my_numa is not None and their is not None and my_numa != their else UNKNOWN
                lo, hi = ranges[(top,)]
                srow[lo:hi] = [lvl] * (hi - lo)
            suffix = 0
            mine = [0] * (len(path) + 1)
            for d in range(len(path) - 1, -1, -1):
                mine[d] = suffix = suffix + switch(path[d])
            for d in range(len(path)):
                pre = path[:d + 1]
                lo, hi = ranges[pre]
                # this row's bridges: switches below x on its side, plus x itself when a switch
                srow[lo:hi] = template(pre, mine[d + 1] + switch(path[d]))
            sorted_rows[p] = srow
        row = [srow[k] if k >= 0 else None for k in order] if slow else _pick(srow, order)
        row[i] = "X"
        rows.append(row)
    # cells the ranges do not answer: GPU pairs, slow rows and columns
    gpus = [j for j in range(n) if kinds[j] == "gpu"]
    for i in range(n):
        if i in slow or i not in paths:
            rows[i] = ["X" if i == j else topo.level(ends[i], ends[j]) for j in range(n)]
            continue
        row = rows[i]
        for j in slow:
            row[j] = "X" if i == j else topo.level(ends[i], ends[j])
        if kinds[i] == "gpu":
            for j in gpus:
                if j != i:
                    row[j] = topo.level(ends[i], ends[j])
    return rows


def _pick(srow: list[str], order: list[int]) -> list[str]:
    """``[srow[k] for k in order]`` at C speed."""
    if len(order) == 1:
        return [srow[order[0]]]
    return list(operator.itemgetter(*order)(srow)) if order else []
