"""The fabric's layout: which hosts share a leaf switch (a block, an NVLink domain), as locate uses it.

Why: a slow host or link among hundreds is found in a few rounds only when the tests follow the
fabric: rings inside each leaf test the hosts and their leaf ports, rings across leaves test the
uplinks, and a ring order that keeps neighbours on one leaf keeps a job's traffic off the spine.
The layout comes from what the site already has, one reader per format (each a module of its own):
a Slurm ``topology.conf`` (:mod:`.layout_slurm`), Kubernetes node labels (:mod:`.layout_k8s`),
``ibnetdiscover`` output (:mod:`.layout_ibnet`), or the NVLink domain ids NVML gives a GB200's GPUs
(:mod:`.layout_nvlink`); :mod:`.layout_read` tells them apart and calls the one a file needs. Without one, ⌈√N⌉ groups of consecutive ranks stand in (:func:`square_groups`).

A reader returns a :class:`Layout`; :meth:`Layout.place` matches the run's host names to it (the
names MPI ranks report are often short names or FQDNs of the layout's), and the placement gives
the groups locate screens and the ring order that keeps traffic within groups (:func:`ring_order`).
Bad input is a :class:`ccdiag.core.errors.InputError` naming the file and line (exit 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Layout:
    """Hosts and the group each belongs to, in the order the source lists them.

    ``group_kind`` says what a group is ("leaf switch", "block", "NVLink domain", ...);
    ``parent_of`` the switch above a group where the source says (a spine), so groups under one
    spine sit together in a ring order; ``notes`` what the reader left out and why."""

    fmt: str
    sources: tuple[str, ...]
    group_of: dict[str, str]
    group_kind: str
    parent_of: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def groups(self) -> list[str]:
        """Group names in the source's order, groups under one parent together."""
        seen: dict[str, None] = {}
        for g in self.group_of.values():
            seen.setdefault(g)
        order = list(seen)
        first_of_parent: dict[str, int] = {}
        for i, g in enumerate(order):
            first_of_parent.setdefault(self.parent_of.get(g) or g, i)
        pos = {g: i for i, g in enumerate(order)}
        return sorted(order, key=lambda g: (first_of_parent[self.parent_of.get(g) or g], pos[g]))

    def place(self, hosts: list[str]) -> "Placement":
        """The run's ``hosts`` (as their ranks name them) in this layout's groups. A name matches
        exactly, else by its short name (before the first dot) on either side; hosts the layout does
        not name are ``unplaced`` (they still take part, as a group of their own)."""
        exact = self.group_of
        short: dict[str, str] = {}
        ambiguous: set[str] = set()
        for name in exact:
            s = name.split(".", 1)[0]
            if s in short and short[s] != name:
                ambiguous.add(s)
            short.setdefault(s, name)
        named: dict[str, str] = {}
        unplaced = []
        for h in hosts:
            s = h.split(".", 1)[0]
            if h in exact:
                named[h] = h
            elif s in short and s not in ambiguous:
                named[h] = short[s]
            else:
                unplaced.append(h)
        members: dict[str, list[str]] = {g: [] for g in self.groups()}
        for h in hosts:
            if h in named:
                members[exact[named[h]]].append(h)
        groups = [Group(g, tuple(m)) for g, m in members.items() if m]
        return Placement(groups=groups, unplaced=tuple(unplaced), layout_name=named, kind=self.group_kind,
                         parent_of={g.name: self.parent_of[g.name] for g in groups if g.name in self.parent_of})


@dataclass(frozen=True)
class Group:
    name: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    """The run's hosts by group (run order within each group), those the layout does not name, and
    what each run name was matched to."""

    groups: list[Group]
    unplaced: tuple[str, ...] = ()
    layout_name: dict[str, str] = field(default_factory=dict)
    kind: str = "group"
    parent_of: dict[str, str] = field(default_factory=dict)

    def group_of(self) -> dict[str, str]:
        out = {h: g.name for g in self.groups for h in g.hosts}
        out.update({h: f"(not in the layout) {h}" for h in self.unplaced})
        return out

    def screening_groups(self) -> list[list[str]]:
        """The groups locate rings over: every host in exactly one, each group of at least two (a
        group of one host joins the next group under the same parent, else the next group; the
        unplaced hosts form one group of their own, or join the last)."""
        raw = [list(g.hosts) for g in self.groups]
        parents = [self.parent_of.get(g.name) for g in self.groups]
        if self.unplaced:
            raw.append(list(self.unplaced))
            parents.append(None)
        return merge_small(raw, parents)


def merge_small(groups: list[list[str]], parents: list[str | None] | None = None) -> list[list[str]]:
    """Groups of one host merged into a neighbour (same parent first), so every group can be a ring."""
    parents = parents or [None] * len(groups)
    items = [(list(g), p) for g, p in zip(groups, parents) if g]
    changed = True
    while changed and len(items) > 1:
        changed = False
        for i, (g, p) in enumerate(items):
            if len(g) >= 2:
                continue
            same = [j for j, (_, q) in enumerate(items) if j != i and p is not None and q == p]
            j = same[0] if same else (i + 1 if i + 1 < len(items) else i - 1)
            items[j] = ((g + items[j][0]) if j > i else (items[j][0] + g), items[j][1])  # hosts keep their order
            del items[i]
            changed = True
            break
    return [g for g, _ in items]


def square_groups(hosts: list[str]) -> list[list[str]]:
    """⌈√N⌉ groups of consecutive hosts, sizes differing by at most one: the grouping without a
    layout (every group a ring of about √N hosts, and ⌈√N⌉ rings across them)."""
    n = len(hosts)
    if n < 2:
        return [list(hosts)] if hosts else []
    k = min(math.ceil(math.sqrt(n)), n // 2)
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        stop = start + base + (1 if i < extra else 0)
        out.append(list(hosts[start:stop]))
        start = stop
    return out


def crossings(order: list[str], group_of: dict[str, str]) -> int:
    """Hops of the ring ``order`` (last back to first) whose two hosts are in different groups."""
    n = len(order)
    if n < 2:
        return 0
    return sum(1 for k in range(n) if group_of.get(order[k]) != group_of.get(order[(k + 1) % n]))


def ring_order(placement: Placement, run_order: list[str], avoid: list[str] | None = None) -> dict:
    """The ring order that keeps traffic within groups: every group's hosts consecutive, groups
    under one parent next to each other, so the ring crosses between groups once per group (the
    fewest any order can) instead of at almost every hop. Beside it the run's own order and its
    crossings; ``avoid`` (slow hosts) are left out of a second order, with the crossings that
    costs nothing: a ring without a host is still grouped."""
    gof = placement.group_of()
    order = [h for g in placement.groups for h in g.hosts] + list(placement.unplaced)
    out = {"order": order, "crossings": crossings(order, gof), "run_order": list(run_order),
           "run_crossings": crossings(list(run_order), gof), "groups": len(placement.groups) + (1 if placement.unplaced else 0),
           "group_kind": placement.kind}
    bad = [h for h in (avoid or []) if h in order]
    if bad and len(order) - len(bad) >= 2:
        rest = [h for h in order if h not in bad]
        out["without_slow_hosts"] = {"order": rest, "crossings": crossings(rest, gof), "left_out": bad}
    return out


def format_ring_order(rec: dict) -> str:
    lines = [f"# ring order from the layout ({rec['groups']} {rec['group_kind']} groups): "
             f"{rec['crossings']} hops cross between groups, the run's rank order {rec['run_crossings']}",
             f"#   {' -> '.join(rec['order'])}"]
    wo = rec.get("without_slow_hosts")
    if wo:
        lines.append(f"# without {', '.join(wo['left_out'])}: {' -> '.join(wo['order'])}")
    return "\n".join(lines)
