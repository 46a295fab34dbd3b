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
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from ccdiag.topology.levels import UNKNOWN

Path = tuple[str, ...]


class Topology(Protocol):
    """What the rows are computed from: :class:`ccdiag.topology.model.Topology`'s graph, its PCIe
    tree (parent of each node, the nodes that are someone's parent, a node's ancestors) and its
    ``level``. Named here, not imported, because the model calls this module: data flows one way."""

    @property
    def graph(self) -> Any: ...
    @property
    def _parent(self) -> Mapping[str, str]: ...
    @property
    def _inner(self) -> frozenset[str]: ...
    def _ancestors(self, node: str) -> list[str]: ...
    def level(self, a: str, b: str) -> str: ...


def level_rows(topo: Topology, ends: list[str]) -> list[list[str]]:
    """``[[topo.level(a, b) or "X" on the diagonal for b in ends] for a in ends]``, quickly."""
    n = len(ends)
    slow, paths = _root_paths(topo, ends)
    fast = sorted(paths, key=lambda j: paths[j])  # columns in root-path order: subtrees contiguous
    forest = _Forest(topo)
    forest.add_columns([paths[j] for j in fast])
    where = {j: k for k, j in enumerate(fast)}
    order = [where.get(j, -1) for j in range(n)]
    rows: list[list[str]] = []
    for i in range(n):
        if i in slow or i not in paths:
            rows.append([])
            continue
        srow = forest.sorted_row(paths[i])
        # a slow column's cell ("") is filled from level() below
        row = [srow[k] if k >= 0 else "" for k in order] if slow else _pick(srow, order)
        row[i] = "X"
        rows.append(row)
    _fill_cells_by_level(topo, ends, rows, slow, paths)
    return rows


def _root_paths(topo: Topology, ends: list[str]) -> tuple[set[int], dict[int, Path]]:
    """The ends the ranges cannot answer (no parent, inner nodes, a chain ending in a cycle, or any
    duplicated end), and each other end's ancestor chain from the top down."""
    parent, inner = topo._parent, topo._inner
    slow: set[int] = set()
    paths: dict[int, Path] = {}
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
    if len(set(ends)) != len(ends):
        return set(range(len(ends))), {}
    return slow, paths


@dataclass
class _Forest:
    """The PCIe forest seen from the sorted columns: for each root path prefix (root .. x), the
    columns [lo, hi) below x and, for each, how many switches lie strictly below x on its side."""

    topo: Topology
    ranges: dict[Path, list[int]] = field(default_factory=dict)
    below: dict[Path, list[int]] = field(default_factory=dict)
    tops: list[str] = field(default_factory=list)
    _switch: dict[str, int] = field(default_factory=dict)
    _templates: dict[tuple[Path, int], list[str]] = field(default_factory=dict)
    _rows: dict[str, list[str]] = field(default_factory=dict)
    _width: int = 0

    def switch(self, x: str) -> int:
        v = self._switch.get(x)
        if v is None:
            v = self._switch[x] = 1 if self.topo.graph.nodes[x].get("kind") == "switch" else 0
        return v

    def add_columns(self, sorted_paths: list[Path]) -> None:
        for k, path in enumerate(sorted_paths):
            suffix = self._switches_below(path)
            for d in range(len(path)):
                pre = path[:d + 1]
                r = self.ranges.get(pre)
                if r is None:
                    self.ranges[pre] = [k, k + 1]
                    self.below[pre] = [suffix[d + 1]]
                else:
                    r[1] = k + 1
                    self.below[pre].append(suffix[d + 1])
        self.tops = sorted({path[0] for path in sorted_paths})
        self._width = len(sorted_paths)

    def _switches_below(self, path: Path) -> list[int]:
        """``out[d]``: the switches at depths d.. of ``path``."""
        out = [0] * (len(path) + 1)
        for d in range(len(path) - 1, -1, -1):
            out[d] = out[d + 1] + self.switch(path[d])
        return out

    def template(self, pre: Path, a: int) -> list[str]:
        """Levels of the columns below ``pre[-1]`` for a row contributing ``a`` bridges there."""
        t = self._templates.get((pre, a))
        if t is None:
            kind = self.topo.graph.nodes[pre[-1]].get("kind")
            if kind == "numa":
                t = ["NODE"] * len(self.below[pre])
            elif kind == "host_bridge":
                t = ["PHB"] * len(self.below[pre])
            else:
                t = ["PIX" if a + b <= 1 else "PXB" for b in self.below[pre]]
            self._templates[(pre, a)] = t
        return t

    def _numa_of(self, top: str) -> object:
        node = self.topo.graph.nodes[top]
        return node.get("numa") if node.get("kind") == "numa" else None

    def sorted_row(self, path: Path) -> list[str]:
        """The levels from an end whose root path is ``path`` to every column, in column order;
        shared by the ends under the same parent."""
        srow = self._rows.get(path[-1])
        if srow is not None:
            return srow
        srow = [UNKNOWN] * self._width
        my_numa = self._numa_of(path[0])
        for top in self.tops:
            if top == path[0]:
                continue
            their = self._numa_of(top)
            lvl = "SYS" if my_numa is not None and their is not None and my_numa != their else UNKNOWN
            lo, hi = self.ranges[(top,)]
            srow[lo:hi] = [lvl] * (hi - lo)
        mine = self._switches_below(path)
        for d in range(len(path)):
            pre = path[:d + 1]
            lo, hi = self.ranges[pre]
            # deeper ancestors overwrite shallower ones; this row's bridges: switches below x on its
            # side, plus x itself when a switch
            srow[lo:hi] = self.template(pre, mine[d + 1] + self.switch(path[d]))
        self._rows[path[-1]] = srow
        return srow


def _fill_cells_by_level(topo: Topology, ends: list[str], rows: list[list[str]], slow: set[int],
                         paths: dict[int, Path]) -> None:
    """The cells the ranges do not answer, from ``topo.level``: GPU pairs, slow rows and columns."""
    n = len(ends)
    kinds = [topo.graph.nodes[e].get("kind") for e in ends]
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


def _pick(srow: list[str], order: list[int]) -> list[str]:
    """``[srow[k] for k in order]`` at C speed."""
    if len(order) == 1:
        return [srow[order[0]]]
    return list(operator.itemgetter(*order)(srow)) if order else []
