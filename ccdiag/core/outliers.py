"""Slow member or slow pair: the one rule for telling them apart in a matrix of pair figures.

Why: a matrix of pair measurements (GPU peer copies inside a node, host pairs across a cluster)
has two kinds of fault that look alike figure by figure. A member that is slow with *every* peer
(a GPU whose links trained down, a host with a bad NIC) makes a whole row and column slow; a
single bad link or path makes one pair slow. Naming the member instead of N pairs, or one pair
instead of a healthy member, is the difference between a useful finding and noise. Bench
localisation, ``bench import`` and cluster pairs all ask this question; this module answers it
once. Pure logic, standard library only, no I/O.

The rule, in two steps:

1. **Which pairs are slow.** Either the caller says so (:func:`classify_flags`: e.g. pairs below
   their path's expected value), or the peer-median rule decides (:func:`classify`): each member's
   median over its own pairs, the reference is the median of those medians (one bad member cannot
   drag it down: it owns only its own row), and a pair is slow below ``fraction`` x reference.
2. **Which members explain them.** A member is slow with every peer when it has at least two
   pairs, every one of them is slow, and at least one pair *without* it is not slow (when every
   pair is slow nothing singles a member out). Slow pairs that touch no slow member are slow pairs.

Keys are ``(a, b)`` tuples of member names; they may be directed (``a -> b`` and ``b -> a`` both
present). With ``symmetric=True`` the two directions of a pair count as one figure, the lower.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Pair = tuple[str, str]


@dataclass(frozen=True)
class Classification:
    """What the matrix says.

    ``slow_members``: members slow with every peer, in input order. ``slow_pairs``: slow pairs
    not explained by a slow member, in input order. ``reference`` and ``floor`` are set by the
    peer-median rule (:func:`classify`): the reference figure and the line below which a pair is
    slow. ``ratios``: each pair's figure / reference. ``member_medians``: each member's median
    over its own pairs."""

    slow_members: tuple[str, ...] = ()
    slow_pairs: tuple[Pair, ...] = ()
    reference: float | None = None
    floor: float | None = None
    ratios: Mapping[Pair, float] = field(default_factory=dict)
    member_medians: Mapping[str, float] = field(default_factory=dict)

    @property
    def judged(self) -> bool:
        """True when the matrix was large enough to compare members with each other."""
        return self.reference is not None


def _members(keys: Iterable[Pair]) -> list[str]:
    seen: dict[str, None] = {}
    for a, b in keys:
        seen.setdefault(a)
        seen.setdefault(b)
    return list(seen)


def classify_flags(slow: Mapping[Pair, bool]) -> Classification:
    """Members slow with every peer, and the slow pairs they do not explain, from pairs already
    marked slow (True) or not (False) by the caller's own rule."""
    keys = [k for k in slow if k[0] != k[1]]
    members = _members(keys)
    # one pass: each member's pairs, and how many fine pairs it touches (linear in the pairs, so a
    # matrix of a thousand hosts is judged in milliseconds)
    count: dict[str, int] = {}
    fine_of: dict[str, int] = {}
    fine_total = 0
    for k in keys:
        ok = not slow[k]
        fine_total += ok
        for m in set(k):
            count[m] = count.get(m, 0) + 1
            fine_of[m] = fine_of.get(m, 0) + ok
    bad_members = [m for m in members if count[m] >= 2 and fine_of[m] == 0 and fine_total - fine_of[m] > 0]
    bad = set(bad_members)
    pairs = tuple(k for k in keys if slow[k] and k[0] not in bad and k[1] not in bad)
    return Classification(tuple(bad_members), pairs)


def _merged(figures: Mapping[Pair, float], symmetric: bool) -> dict[Pair, float]:
    out: dict[Pair, float] = {}
    for (a, b), v in figures.items():
        if a == b or v is None:
            continue
        key = (a, b)
        if symmetric and (b, a) in out:
            key = (b, a)
        out[key] = min(v, out[key]) if key in out else float(v)
    return out


def classify(figures: Mapping[Pair, float], *, fraction: float, symmetric: bool = False,
             min_members: int = 3) -> Classification:
    """The peer-median rule on a matrix of figures (GB/s, or any "higher is better" number).

    ``fraction``: a pair below ``fraction`` x the reference is slow (0.7: 30 % below its peers).
    ``min_members``: fewer members than this cannot be compared (two GPUs: which one is slow?), and
    an unjudged :class:`Classification` (``judged`` False) comes back."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction {fraction!r} is not in (0, 1]")
    figs = _merged(figures, symmetric)
    members = _members(figs)
    if len(members) < min_members:
        return Classification()
    per_member: dict[str, list[float]] = {}
    for (a, b), v in figs.items():
        for m in {a, b}:
            per_member.setdefault(m, []).append(v)
    medians = {m: statistics.median(per_member[m]) for m in members}
    ref = statistics.median(medians.values())
    if ref <= 0:
        return Classification()
    floor = ref * fraction
    flags = classify_flags({k: v < floor for k, v in figs.items()})
    return Classification(flags.slow_members, flags.slow_pairs, ref, floor,
                          {k: v / ref for k, v in figs.items()}, medians)
