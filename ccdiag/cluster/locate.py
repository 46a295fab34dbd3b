"""Group testing: the slow host or link among hundreds in a few rounds of ring tests, not N² pairs.

Why: ``bench pairs`` measures every pair in N-1 rounds; at 232 hosts that is 26,796 pairs. A fault
lives on a physical part (a host's NIC or cable, a leaf's uplink), and the fabric's layout says
which tests cover which parts, so a few rings suffice:

1. **Screen**: a ring per group (per leaf switch, NVLink domain or block; ⌈√N⌉ groups of
   consecutive ranks without a layout), then rings *across* the groups (the k-th host of every
   group), all rings of a round at once; with four groups or more and a suspect among them, the
   rings across once more with the groups in another order, so each group meets new neighbours.
   Every host's link is tested twice or more, with different peers, and every leaf's uplinks. Each ring is the ring allreduce with each hop timed (its first
   reduce-scatter step, every hop carrying one chunk at the same time), both ways round, so a test
   gives a figure for each pair of neighbours, the slower direction as in ``pairs``.
2. **Split**: a ring whose only figure is its bus bandwidth (no per-hop timing) and is slow is cut
   in halves, and halves again, down to its slow pair; when both halves of a slow ring pass, the
   two pairs that joined them are tested.
3. **Confirm**: before anything is named, each suspect is measured against known-good hosts (hosts
   with no slow pair), each test of its own: a host slow with two or more neighbours is measured with
   a good host from its own group, then, when slow again, with a second from another group; a slow
   pair is measured again three times, then each of its hosts with a good host. A figure that was slow
   once and fine again was noise (the better of two measurements is kept: noise only lowers a
   bandwidth). Of the pairs the rings across groups found slow, each group's two lowest are
   measured alone first; when both are fine, the group's other low figures were the screen's load.
   Tests of their own that cross groups are packed so that no two in a round share a group's
   uplinks.
4. **Verdict**: slow member vs slow pair by the project's one rule,
   :func:`ccdiag.core.outliers.classify_flags`, on every pair measured unloaded: a host slow with
   every peer it was measured with (and so with two good hosts) is a slow host; a slow pair whose
   two hosts are fine elsewhere, slow all four times it was measured, is a slow link; slow links
   that cross out of one group while no link inside it is slow are that group's uplinks.

A figure is judged against the reference of its context, :func:`ccdiag.core.outliers.classify`'s on
the screen: the rings across groups run with every leaf's uplinks loaded at once (an oversubscribed
spine, or flows hashed onto one spine, makes their figures lower and wider spread, which is no
fault), so they are held to their own reference and only pick suspects; everything else is held to
the rings inside groups and decides. Pure: the measuring is a callable
(:data:`Transport`) that runs one round of disjoint rings at once, the MPI ranks in
:mod:`.locate_mpi` or the fabric model of the simulator (``bench/bench_locate.py``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

from ccdiag.core import outliers

Pair = tuple[str, str]
WITHIN, ACROSS = "within", "across"
#: contexts of a figure: measured unloaded (inside a group, or a test of its own), or in the rings
#: across groups with every uplink loaded at once
DIRECT, LOADED = "direct", "loaded"
#: a host is named slow only when it is slow with this many known-good hosts, one after the other
CONFIRMATIONS = 2
#: a link is named slow only when it is slow this many more times after the test that flagged it
RETESTS = 3
#: of the pairs the rings across found slow, how many per group are measured again alone first
PER_GROUP = 2


@dataclass(frozen=True)
class RingTest:
    """One test: ``hosts`` in ring order, run both ways round. ``why``: screen, across, split,
    boundary, retest or confirm."""

    hosts: tuple[str, ...]
    why: str


@dataclass
class RingResult:
    """What a test measured: GB/s of each directed hop (``None``: not measured or did not complete),
    the ring allreduce's bus bandwidth when it ran, the elements it summed wrong."""

    hosts: tuple[str, ...]
    hops_gbyte_s: dict[Pair, float | None] = field(default_factory=dict)
    busbw_gbyte_s: float | None = None
    wrong: int = 0


#: runs one round (disjoint rings, all at once) and returns one result per test, in order
Transport = Callable[[list[RingTest]], list[RingResult]]


def stripes(groups: list[list[str]]) -> list[list[str]]:
    """Rings across groups: the k-th host of every group; a ring of one host joins the one before."""
    width = max((len(g) for g in groups), default=0)
    out = [[g[k] for g in groups if len(g) > k] for k in range(width)]
    merged: list[list[str]] = []
    for s in out:
        if len(s) < 2 and merged:
            merged[-1] += s
        elif s:
            merged.append(s)
    return [s for s in merged if len(s) >= 2]


def pack(items: list[tuple[str, ...]], group_of: dict[str, int] | None = None) -> list[list[tuple[str, ...]]]:
    """Tests packed into rounds in which no host appears twice (first fit, in order). With
    ``group_of``, a round also holds at most one test that spans groups per group: two such tests
    from one leaf would share its uplinks (and, hashed onto one spine, collide there), and a test
    of its own must measure the pair, not the company it keeps."""
    rounds: list[list[tuple[str, ...]]] = []
    used: list[set[str]] = []
    spans: list[set[int]] = []
    for it in items:
        gs = {group_of.get(h, -1) for h in it} if group_of is not None else set()
        across = gs if len(gs) > 1 else set()
        k = next((i for i, u in enumerate(used) if not u & set(it) and not spans[i] & across), None)
        if k is None:
            rounds.append([it])
            used.append(set(it))
            spans.append(set(across))
        else:
            rounds[k].append(it)
            used[k] |= set(it)
            spans[k] |= across
    return rounds


@dataclass
class Outcome:
    """The verdict: confirmed slow hosts, slow links, slow uplinks (group -> its slow pairs), the
    suspects left unconfirmed, and what was measured to get there."""

    slow_hosts: list[str] = field(default_factory=list)
    slow_links: list[Pair] = field(default_factory=list)
    slow_uplinks: dict[str, list[Pair]] = field(default_factory=dict)
    unconfirmed: list[str] = field(default_factory=list)
    reference_gbyte_s: dict[str, float | None] = field(default_factory=dict)
    floor_gbyte_s: dict[str, float | None] = field(default_factory=dict)
    pair_gbyte_s: dict[Pair, float] = field(default_factory=dict)
    rounds: int = 0
    tests: int = 0
    host_tests: int = 0
    judged: bool = False
    #: pairs the rings across found slow that their group's retests put down to the screen's load
    dismissed: int = 0
    why_not: str | None = None
    stopped: str | None = None
    wrong: int = 0
    log: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"slow_hosts": self.slow_hosts, "slow_links": [list(p) for p in self.slow_links],
                "slow_uplinks": {g: [list(p) for p in ps] for g, ps in self.slow_uplinks.items()},
                "unconfirmed": self.unconfirmed, "reference_gbyte_s": self.reference_gbyte_s,
                "floor_gbyte_s": self.floor_gbyte_s, "rounds": self.rounds, "tests": self.tests,
                "host_tests": self.host_tests, "judged": self.judged, "dismissed": self.dismissed, "why_not": self.why_not,
                "stopped": self.stopped, "wrong_elements": self.wrong, "log": self.log}


class Locator:
    """The search, one round at a time: :meth:`next_round` says which rings to run together,
    :meth:`record` takes what they measured, :meth:`outcome` judges. ``max_tests`` bounds the
    tests (rings run); suspects the bound leaves unconfirmed are said so, never named.

    Two contexts of figure: the rings *across* groups run with every leaf's uplinks loaded at once
    (on a real fabric flows also collide on one spine by their hash), so their figures spread and
    only pick suspects, judged against the across screen's own reference (``loaded``); everything
    else (the rings inside groups, and every retest, confirmation and split, each a test of its
    own) measures what a pair delivers unloaded (``direct``), judged against the rings inside
    groups, and only these figures decide the verdict."""

    def __init__(self, hosts: list[str], groups: list[list[str]], margin: float = 0.5,
                 max_tests: int | None = None, fabric_groups: bool = True):
        if not 0.05 <= margin <= 0.95:
            raise ValueError(f"margin {margin!r} is not in [0.05, 0.95]")
        self.hosts = list(hosts)
        self.pos = {h: i for i, h in enumerate(self.hosts)}
        self.groups = [list(g) for g in groups if g]
        self.group_of = {h: i for i, g in enumerate(self.groups) for h in g}
        self.margin = margin
        self.max_tests = max_tests
        #: the groups are the fabric's (leaves, blocks, NVLink domains), so slow pairs crossing one
        #: group's boundary are its uplinks; ⌈√N⌉ groups of consecutive ranks are no such thing
        self.fabric_groups = fabric_groups
        #: context -> directed hop -> the best figure seen (noise only lowers a bandwidth)
        self.best: dict[str, dict[Pair, float]] = {DIRECT: {}, LOADED: {}}
        self.times: dict[frozenset, int] = {}  # pair -> how many tests measured it
        self.measured: set[str] = set()
        self.rounds = 0
        self.tests = 0
        self.host_tests = 0
        self.wrong = 0
        self.log: list[dict] = []
        self.screen_busbw: dict[str, list[float]] = {DIRECT: [], LOADED: []}
        self.screen_pairs: dict[str, dict[Pair, float]] = {DIRECT: {}, LOADED: {}}
        self.confirms: dict[str, list[str]] = {}  # suspect -> the good hosts it was measured with
        self.retested: dict[frozenset, int] = {}  # pair -> retests run
        self.from_loaded: set[frozenset] = set()  # pairs the rings across flagged, chosen to measure alone
        self.dismissed: set[frozenset] = set()  # pairs the rings across flagged, put down to their load
        self.split_queue: list[tuple[str, ...]] = []
        self.halves: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self.stopped: str | None = None
        #: what each group is called in findings (a leaf switch's name); "group N" otherwise
        self.group_names: list[str] = []
        self._plan: list[list[RingTest]] = []
        self._phase = "screen"
        self._ref: dict[str, float | None] | None = None
        self._uplink_groups: set[int] = set()

    # -- figures, references, floors -------------------------------------------------------------
    def kind(self, a: str, b: str) -> str:
        return WITHIN if self.group_of.get(a) == self.group_of.get(b) else ACROSS

    def references(self) -> dict[str, float | None]:
        """Per context, the reference the screen gives: the peer-median rule's reference
        (:func:`ccdiag.core.outliers.classify`) on its hop figures; without hop figures, the median
        bus bandwidth of its rings (three or more). A context without one borrows the other's."""
        if self._ref is not None:
            return self._ref
        ref: dict[str, float | None] = {}
        for k in (DIRECT, LOADED):
            res = outliers.classify(self.screen_pairs[k], fraction=1 - self.margin, symmetric=True)
            ref[k] = res.reference
            if ref[k] is None and len(self.screen_busbw[k]) >= 3:
                ref[k] = statistics.median(self.screen_busbw[k]) or None
        for k, other in ((DIRECT, LOADED), (LOADED, DIRECT)):
            if ref[k] is None:
                ref[k] = ref[other]
        self._ref = ref
        return ref

    def figure(self, a: str, b: str) -> tuple[float | None, str]:
        """A pair's figure (its slower direction, each direction's best) and its context: the
        unloaded measurements where there are any."""
        for ctx in (DIRECT, LOADED):
            got = self.best[ctx]
            vals = [got[d] for d in ((a, b), (b, a)) if d in got]
            if vals:
                return min(vals), ctx
        return None, DIRECT

    def floor_of(self, ctx: str) -> float | None:
        r = self.references()[ctx]
        return None if r is None else r * (1 - self.margin)

    def is_slow(self, a: str, b: str, direct_only: bool = False) -> bool | None:
        fig, ctx = self.figure(a, b)
        fl = self.floor_of(ctx)
        if fig is None or fl is None or (direct_only and ctx != DIRECT):
            return None
        return fig < fl

    def measured_pairs(self) -> list[Pair]:
        seen: dict[frozenset, Pair] = {}
        for got in self.best.values():
            for a, b in got:
                seen.setdefault(frozenset((a, b)), (a, b) if self.pos[a] < self.pos[b] else (b, a))
        return list(seen.values())

    def slow_pairs(self) -> list[Pair]:
        return [p for p in self.measured_pairs() if self.is_slow(*p)]

    # -- rounds -----------------------------------------------------------------------------------
    def next_round(self) -> list[RingTest] | None:
        if self.stopped:
            return None
        if not self._plan:
            self._plan = self._next_plan()
        if not self._plan:
            return None
        tests = self._plan.pop(0)
        if self.max_tests is not None and self.tests + len(tests) > self.max_tests:
            left = self.max_tests - self.tests
            if left <= 0:
                self.stopped = f"the test budget ({self.max_tests} tests) was spent"
                self._plan = []
                return None
            self._plan.insert(0, tests[left:])
            tests = tests[:left]
        return tests

    def _next_plan(self) -> list[list[RingTest]]:
        if self._phase == "screen":
            self._phase = "across"
            rings = [g for g in self.groups if len(g) >= 2]
            return [[RingTest(tuple(g), "screen") for g in rings]] if rings else self._next_plan()
        if self._phase == "across":
            self._phase = "across2"
            across = stripes(self.groups) if len(self.groups) > 1 else []
            if across:
                return [[RingTest(tuple(s), "across") for s in across]]
            return self._next_plan()
        if self._phase == "across2":
            # with four groups or more, the rings across once more in another order of the groups
            # (every other group first), so each group meets two other neighbours: a slow uplink
            # then shows with more peers than any one neighbouring group, and more of its flows
            # take the slow spine
            self._phase = "split"
            if len(self.groups) >= 4 and self.loaded_suspects():
                order = self.groups[0::2] + self.groups[1::2]
                return [[RingTest(tuple(s), "across") for s in stripes(order)]]
            return self._next_plan()
        if self._phase == "split":
            if self.split_queue:
                return self._split_plan()
            self._phase = "confirm"
        if self._phase == "confirm":
            return self._confirm_plan()
        return []

    def _rounds(self, items: list[RingTest]) -> list[list[RingTest]]:
        why = {t.hosts: t.why for t in items}
        return [[RingTest(h, why[h]) for h in r] for r in pack([t.hosts for t in items], self.group_of)]

    def _split_plan(self) -> list[list[RingTest]]:
        items: list[RingTest] = []
        for ring in self.split_queue:
            if len(ring) >= 4:
                h = len(ring) // 2
                self.halves[ring] = (ring[:h], ring[h:])
                items += [RingTest(ring[:h], "split"), RingTest(ring[h:], "split")]
            elif len(ring) == 3:
                a, b, c = ring
                items += [RingTest((a, b), "split"), RingTest((b, c), "split"), RingTest((c, a), "split")]
            elif len(ring) == 2 and frozenset(ring) not in self.times:
                items.append(RingTest(ring, "boundary"))
        self.split_queue = []
        return self._rounds(items)

    def loaded_suspects(self) -> list[Pair]:
        """Pairs the rings across groups found slow."""
        return [p for p in self.slow_pairs() if self.figure(*p)[1] == LOADED]

    def _good_hosts(self, exclude: set[str]) -> list[str]:
        """Hosts with no slow pair measured unloaded (a suspicion from the rings across groups alone
        does not make a host a poor partner inside its own group)."""
        bad = {h for p in self.slow_pairs() if self.figure(*p)[1] == DIRECT and frozenset(p) not in self.dismissed
               for h in p}
        return [h for h in self.hosts if h in self.measured and h not in bad and h not in exclude]

    def host_state(self, x: str) -> str:
        """``untested``; ``pending`` (slow with one good host, the second to come); ``slow`` (slow
        with two good hosts); ``fine`` (fine with a good host); ``alone`` (no good host to test with)."""
        conf = self.confirms.get(x)
        if conf is None:
            return "untested"
        if conf == [""]:
            return "alone"
        verdicts = [self.is_slow(x, g) for g in conf]
        if any(v is False for v in verdicts):
            return "fine"
        slow = sum(1 for v in verdicts if v)
        return "slow" if slow >= CONFIRMATIONS else "pending"

    def cleared_groups(self) -> set[int]:
        """Groups whose :data:`PER_GROUP` lowest pairs across, measured again alone, were all fine:
        their other low figures in the rings across were the screen's load, not a fault."""
        checked: dict[int, list[bool]] = {}
        for key, n in self.retested.items():
            a, b = tuple(key)
            if n and self.kind(a, b) == ACROSS and key in self.from_loaded:
                slow = bool(self.is_slow(a, b))
                for g in (self.group_of.get(a), self.group_of.get(b)):
                    checked.setdefault(g, []).append(slow)  # type: ignore[arg-type]
        return {g for g, v in checked.items() if len(v) >= PER_GROUP and not any(v)}

    def _loaded_to_retest(self, loaded: list[Pair]) -> tuple[list[Pair], set[frozenset]]:
        """Of the pairs the rings across found slow, the ones to measure again alone: the lowest
        first, each group's with different partner groups first (a slow uplink then shows towards
        two groups, not one), until each group has :data:`PER_GROUP` of them measured fine, or
        that many slow; the pairs of a group whose chosen pairs were all fine alone are dismissed
        as the screen's load."""
        cleared = self.cleared_groups()
        dismissed = {frozenset(p) for p in loaded
                     if self.group_of.get(p[0]) in cleared or self.group_of.get(p[1]) in cleared}
        tally: dict[int, list[int]] = {}  # group -> [pending, fine, slow]
        partners: dict[int, set[int]] = {}
        for key in self.from_loaded:
            a, b = tuple(key)
            fig, ctx = self.figure(a, b)
            state = 0 if ctx != DIRECT else (2 if self.is_slow(a, b) else 1)
            for g, o in ((self.group_of.get(a, -1), self.group_of.get(b, -1)),
                         (self.group_of.get(b, -1), self.group_of.get(a, -1))):
                tally.setdefault(g, [0, 0, 0])[state] += 1
                partners.setdefault(g, set()).add(o)

        def room(g: int) -> bool:
            pending, fine, slow = tally.setdefault(g, [0, 0, 0])
            return pending + fine < PER_GROUP + slow and slow < PER_GROUP

        order = sorted((p for p in loaded if frozenset(p) not in dismissed and frozenset(p) not in self.from_loaded),
                       key=lambda q: self.figure(*q)[0] or 0.0)
        pick: list[Pair] = []
        for new_partner_only in (True, False):
            for p in order:
                key = frozenset(p)
                if key in self.from_loaded:
                    continue
                ga, gb = self.group_of.get(p[0], -1), self.group_of.get(p[1], -1)
                if not (room(ga) and room(gb)):
                    continue
                if new_partner_only and (gb in partners.get(ga, ()) or ga in partners.get(gb, ())):
                    continue
                pick.append(p)
                self.from_loaded.add(key)
                for g, o in ((ga, gb), (gb, ga)):
                    tally[g][0] += 1
                    partners.setdefault(g, set()).add(o)
        return pick, dismissed

    def _confirm_plan(self) -> list[list[RingTest]]:
        """The last phase's rounds: slow pairs measured again, and hosts slow with two peers (or still
        pending) measured against good hosts; done when nothing is left to measure."""
        slow = self._slow_to_settle()
        per_host = self._direct_peers(slow)
        want_confirm, want_retest = self._confirms_and_retests(slow, per_host)
        items = self._retest_items(want_retest) + self._confirm_items(want_confirm, set(per_host))
        if not items:
            self._phase = "done"
            return []
        return self._rounds(items)

    def _slow_to_settle(self) -> list[Pair]:
        """The slow pairs still to settle: those measured unloaded, and those the rings across groups chose to
        measure again (the rest of theirs dismissed, kept in ``self.dismissed``)."""
        slow = self.slow_pairs()
        loaded = [p for p in slow if self.figure(*p)[1] == LOADED]
        _, self.dismissed = self._loaded_to_retest(loaded)
        return [p for p in slow if frozenset(p) not in self.dismissed and (
            self.figure(*p)[1] == DIRECT or frozenset(p) in self.from_loaded)]

    def _direct_peers(self, slow: list[Pair]) -> dict[str, set[str]]:
        """Each host's peers it was slow with measured unloaded: a host slow with two peers measured unloaded
        is measured against good hosts first; the rings across groups only choose pairs to measure again (a
        leaf's slow uplink makes its hosts slow with every peer across, and they are fine inside it)."""
        per_host: dict[str, set[str]] = {}
        for a, b in slow:
            if self.figure(a, b)[1] == DIRECT:
                per_host.setdefault(a, set()).add(b)
                per_host.setdefault(b, set()).add(a)
        return per_host

    def _confirms_and_retests(self, slow: list[Pair], per_host: dict[str, set[str]]) -> tuple[list[str], list[Pair]]:
        """The hosts to measure against good hosts and the pairs to measure again: a pair is measured again
        until it has had its retests, then its untested or pending hosts are confirmed; a pair a slow host
        explains, or whose host is being confirmed, waits."""
        state = {x: self.host_state(x) for x in {h for p in slow for h in p}}
        want_confirm = [x for x in self.hosts if x in per_host and (
            state[x] == "pending" or (state[x] == "untested" and len(per_host[x]) >= 2))]
        want_retest: list[Pair] = []
        for a, b in slow:
            if state[a] == "slow" or state[b] == "slow":
                continue  # explained by a host confirmed slow
            if any(x in want_confirm for x in (a, b)):
                continue  # that host's confirmation comes first
            if self._retest_due(a, b):
                want_retest.append((a, b))
            else:
                want_confirm += [x for x in (a, b) if state[x] in ("untested", "pending") and x not in want_confirm]
        return want_confirm, want_retest

    def _retest_due(self, a: str, b: str) -> bool:
        """Whether a slow pair is measured again: fewer retests than RETESTS, and either measured unloaded
        fewer than 1 + RETESTS times or known from the rings across groups alone."""
        key = frozenset((a, b))
        return self.retested.get(key, 0) < RETESTS and (self.times.get(key, 0) < 1 + RETESTS
                                                          or self.figure(a, b)[1] != DIRECT)

    def _retest_items(self, pairs: list[Pair]) -> list[RingTest]:
        """The pairs measured again, each retest counted."""
        items: list[RingTest] = []
        for a, b in pairs:
            key = frozenset((a, b))
            self.retested[key] = self.retested.get(key, 0) + 1
            items.append(RingTest((a, b), "retest"))
        return items

    def _confirm_items(self, hosts: list[str], suspects: set[str]) -> list[RingTest]:
        """Each host to confirm measured against a good host it has not met yet: the first from its own group
        (its leaf port and nothing else on the path), the second from another group where there is one, the
        least used first; a host with no good host to meet stays unconfirmed."""
        items: list[RingTest] = []
        used: dict[str, int] = {}
        good = self._good_hosts(suspects) if hosts else []
        for x in hosts:
            before = self.confirms.get(x, [])
            pool = [g for g in good if g != x and g not in before]
            if not pool:
                if not before:
                    self.confirms[x] = [""]  # nothing to compare with: stays unconfirmed
                continue
            mine = [g for g in pool if (self.group_of.get(g) == self.group_of.get(x)) == (not before)]
            g = min(mine or pool, key=lambda h: (used.get(h, 0), self.pos[h]))
            used[g] = used.get(g, 0) + 1
            self.confirms[x] = before + [g]
            items.append(RingTest((x, g), "confirm"))
        return items

    def record(self, tests: list[RingTest], results: list[RingResult]) -> None:
        self.rounds += 1
        self.tests += len(tests)
        self.host_tests += sum(len(t.hosts) for t in tests)
        entry: dict = {"round": self.rounds, "tests": [{"hosts": list(t.hosts), "why": t.why} for t in tests]}
        busbw_only: list[tuple[str, ...]] = []
        for t, r in zip(tests, results):
            ctx = LOADED if t.why == "across" else DIRECT
            screen = t.why in ("screen", "across")
            if screen:
                self._ref = None  # the screen's figures set the references: judge again with these
            self.wrong += r.wrong
            self.measured.update(t.hosts)
            seen: set[frozenset] = set()
            hops = {d: v for d, v in r.hops_gbyte_s.items() if v is not None}
            if not hops and r.busbw_gbyte_s is not None:
                busbw_only.append(t.hosts)
                if len(t.hosts) == 2:
                    a, b = t.hosts  # a pair known by one figure: both ways at once
                    hops = {(a, b): r.busbw_gbyte_s, (b, a): r.busbw_gbyte_s}
            for (a, b), v in hops.items():
                self.best[ctx][(a, b)] = max(v, self.best[ctx].get((a, b), 0.0))
                seen.add(frozenset((a, b)))
                if screen:
                    self.screen_pairs[ctx][(a, b)] = v
            for key in seen:
                self.times[key] = self.times.get(key, 0) + 1
            if screen and r.busbw_gbyte_s is not None:
                self.screen_busbw[ctx].append(r.busbw_gbyte_s)
        self._after_round(tests, results, busbw_only, entry)
        self.log.append(entry)

    def _after_round(self, tests: list[RingTest], results: list[RingResult], busbw_only: list[tuple[str, ...]],
                     entry: dict) -> None:
        """Rings known by their bus bandwidth alone go to the split queue when slow; a split ring
        whose two halves both pass sends the two pairs that joined the halves to be tested."""
        slow_now: set[tuple[str, ...]] = set()
        for t, r in zip(tests, results):
            if t.hosts not in busbw_only:
                continue
            if len(t.hosts) == 2:
                if self.is_slow(*t.hosts):
                    slow_now.add(t.hosts)
                continue
            fl = self.floor_of(LOADED if t.why == "across" else DIRECT)
            if fl is not None and r.busbw_gbyte_s is not None and r.busbw_gbyte_s < fl:
                self.split_queue.append(t.hosts)
                slow_now.add(t.hosts)
        tested = {t.hosts for t in tests}
        for ring, (h1, h2) in list(self.halves.items()):
            if h1 not in tested and h2 not in tested:
                continue
            del self.halves[ring]
            if h1 not in slow_now and h2 not in slow_now:
                self.split_queue += [(ring[len(h1) - 1], ring[len(h1)]), (ring[-1], ring[0])]
        entry["slow_pairs"] = [list(p) for p in self.slow_pairs()]
        if slow_now:
            entry["slow_rings"] = [list(r) for r in sorted(slow_now)]

    # -- verdict ----------------------------------------------------------------------------------
    def outcome(self) -> Outcome:
        out = Outcome(rounds=self.rounds, tests=self.tests, host_tests=self.host_tests, log=self.log,
                      stopped=self.stopped, wrong=self.wrong)
        ref = self.references()
        out.reference_gbyte_s = dict(ref)
        out.floor_gbyte_s = {k: self.floor_of(k) for k in ref}
        pairs = self.measured_pairs()
        out.pair_gbyte_s = {p: f for p in pairs if (f := self.figure(*p)[0]) is not None}
        if ref[DIRECT] is None:
            out.why_not = ("no reference: fewer than three hosts were measured in the screen, or every figure "
                           "was nothing")
            return out
        out.judged = True
        flags = {p: s for p in pairs if (s := self.is_slow(*p, direct_only=True)) is not None}
        cls = outliers.classify_flags(flags)
        unconfirmed: set[str] = set()
        for x in cls.slow_members:
            if self.host_state(x) == "slow":
                out.slow_hosts.append(x)
            else:
                unconfirmed.add(x)
        links = []
        for a, b in cls.slow_pairs:
            if self.times.get(frozenset((a, b)), 0) >= 1 + RETESTS:
                links.append((a, b))
            else:
                unconfirmed.update((a, b))
        # suspects the screen flagged whose direct measurement never came (the budget ran out)
        out.slow_uplinks, out.slow_links = self._uplinks(links)
        named_groups = self._uplink_groups
        for a, b in self.slow_pairs():
            if self.figure(a, b)[1] != LOADED or frozenset((a, b)) in self.dismissed:
                continue
            if a in out.slow_hosts or b in out.slow_hosts:
                continue
            if self.group_of.get(a) in named_groups or self.group_of.get(b) in named_groups:
                continue  # crosses uplinks already named
            unconfirmed.update((a, b))
        out.dismissed = len(self.dismissed)
        out.unconfirmed = [h for h in self.hosts if h in unconfirmed and h not in out.slow_hosts]
        return out

    def _uplinks(self, links: list[Pair]) -> tuple[dict[str, list[Pair]], list[Pair]]:
        """Slow links across groups gathered by the group they share: a group two or more of them
        cross into, with no slow link inside it, has slow uplinks, said once (the group with the most
        first). Slow links that all run between the same two groups are that path (either group's
        uplinks or the spine between them), named ``A <-> B``; the rest stay links."""
        left = [p for p in links if self.kind(*p) == ACROSS] if self.fabric_groups else []
        found: dict[str, list[Pair]] = {}
        self._uplink_groups = set()
        inside_slow = {self.group_of.get(a) for a, b in links if self.kind(a, b) == WITHIN}
        while len(left) >= 2:
            count: dict[int, list[Pair]] = {}
            for a, b in left:
                for g in {self.group_of.get(a), self.group_of.get(b)}:
                    if g is not None and g not in inside_slow:
                        count.setdefault(g, []).append((a, b))
            if not count:
                break
            best = max(count.values(), key=len)
            tops = [g for g, ps in count.items() if len(ps) == len(best)]
            if len(best) < 2:
                break
            if len(tops) == 2 and all({self.group_of.get(a), self.group_of.get(b)} == set(tops) for a, b in best):
                name = f"{self._group_name(min(tops))} <-> {self._group_name(max(tops))}"
                self._uplink_groups.update(tops)
            else:
                name = self._group_name(min(tops))
                self._uplink_groups.add(min(tops))
            found[name] = best
            left = [p for p in left if p not in best]
        return found, [p for p in links if not any(p in ps for ps in found.values())]

    def _group_name(self, i: int) -> str:
        return self.group_names[i] if i < len(self.group_names) else f"group {i + 1}"


def run(locator: Locator, transport: Transport, should_stop: Callable[[], str | None] | None = None) -> Outcome:
    """Drive ``locator`` with ``transport`` until it has nothing left to test (or ``should_stop``
    gives a reason: the time budget), then judge."""
    while True:
        why = should_stop() if should_stop else None
        if why:
            locator.stopped = why
            break
        tests = locator.next_round()
        if not tests:
            break
        locator.record(tests, transport(tests))
    return locator.outcome()
