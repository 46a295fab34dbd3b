"""A leaf/spine fabric as a model, and a transport that measures ring tests on it.

Why: ``ccdiag bench locate`` must be shown to find one bad part among hundreds of hosts, and no
machine here has hundreds of hosts. The model stands in for the MPI ranks only: the real
localisation code (:class:`ccdiag.cluster.locate.Locator`) plans the rounds and judges, and
:class:`ModelTransport` answers each round as the fabric would. ``bench/bench_locate.py`` (the
figures at 64, 256 and 1,024 hosts) and ``tests/test_locate.py`` share it.

The fabric: hosts on leaves, every leaf with one uplink to every spine, each flow between leaves
on one spine chosen by a hash of its two ends (ECMP: a flow keeps its path). A round's rings all
run at once, each direction round in turn; every link's capacity is shared equally by the flows on
it, and a flow gets the smallest share along its path (host out, leaf up, spine down, host in).
The measurement adds noise that only ever lowers a figure: a few per cent of jitter on every run,
and now and then a host whose rank is held off the CPU for a whole test (all its hops in that test
read at a fraction of their rate), as on a loaded node.

Faults: a slow host (its NIC or cable, both directions or inbound only), a slow uplink (one leaf to
one spine), a slow pair path (the two hosts' flows only). All figures are GB/s.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from ccdiag.cluster.locate import RingResult, RingTest


@dataclass
class Fabric:
    hosts: list[str]
    leaf_of: dict[str, int]
    spines: int = 8
    nic_gbyte_s: float = 50.0
    #: uplink capacity as a fraction of the leaf's hosts' total, over all spines (1.0: non-blocking)
    uplink_ratio: float = 1.0
    host_out: dict[str, float] = field(default_factory=dict)  # host -> rate factor of what it sends
    host_in: dict[str, float] = field(default_factory=dict)  # host -> rate factor of what it receives
    uplink: dict[tuple[int, int], float] = field(default_factory=dict)  # (leaf, spine) -> factor
    pair: dict[frozenset, float] = field(default_factory=dict)  # pair path -> factor
    jitter: float = 0.03
    hash_seed: int = 0
    hiccup_p: float = 0.01
    rng: random.Random = field(default_factory=lambda: random.Random(1))

    def __post_init__(self) -> None:
        per_leaf: dict[int, int] = {}
        for leaf in self.leaf_of.values():
            per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
        self._uplink_cap = {leaf: self.nic_gbyte_s * n * self.uplink_ratio / self.spines
                            for leaf, n in per_leaf.items()}

    def spine_of(self, a: str, b: str) -> int:
        """The spine a flow from ``a`` to ``b`` takes: a hash of its two ends, salted per fabric
        (a switch's ECMP hash with its seed; a linear hash such as a bare CRC would send flows
        between similarly named hosts all one way, a fault of the model rather than of locate)."""
        key = f"{self.hash_seed}:{a}>{b}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % self.spines

    def _links(self, a: str, b: str) -> list[tuple]:
        la, lb = self.leaf_of[a], self.leaf_of[b]
        out = [("out", a), ("in", b)]
        if la != lb:
            s = self.spine_of(a, b)
            out += [("up", la, s), ("down", lb, s)]
        return out

    def _capacity(self, link: tuple) -> float:
        if link[0] == "out":
            return self.nic_gbyte_s * self.host_out.get(link[1], 1.0)
        if link[0] == "in":
            return self.nic_gbyte_s * self.host_in.get(link[1], 1.0)
        leaf, spine = link[1], link[2]
        return self._uplink_cap[leaf] * self.uplink.get((leaf, spine), 1.0)

    def flows(self, flows: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """Each flow's rate when all of ``flows`` run at once (equal shares, the smallest along the
        path), with the measurement's noise."""
        paths = {f: self._links(*f) for f in flows}
        load: dict[tuple, int] = {}
        for links in paths.values():
            for link in links:
                load[link] = load.get(link, 0) + 1
        out = {}
        for (a, b), links in paths.items():
            rate = min(self._capacity(link) / load[link] for link in links)
            out[(a, b)] = rate * self.pair.get(frozenset((a, b)), 1.0)
        return out

    def jittered(self, rate: float) -> float:
        """One run's reading of ``rate``: a few per cent lower, never higher."""
        return rate * (1.0 - abs(self.rng.gauss(0.0, self.jitter)))

    def starved(self, hosts) -> dict[str, float]:
        """The hosts whose rank is held off the CPU for a whole test (each with ``hiccup_p``), and
        the fraction of its rate every hop in or out of it then reads."""
        return {h: self.rng.uniform(0.3, 0.7) for h in hosts if self.rng.random() < self.hiccup_p}


@dataclass
class ModelTransport:
    """A round of ring tests on the model: every ring's hops, both ways round (each direction
    with all rings at once), and its bus bandwidth (the slowest forward hop). ``hops=False``
    reports the bus bandwidth alone, as a benchmark that prints one number per run would."""

    fabric: Fabric
    hops: bool = True
    rounds: int = 0

    def __call__(self, tests: list[RingTest]) -> list[RingResult]:
        self.rounds += 1
        fab = self.fabric
        fwd = [(t.hosts[k], t.hosts[(k + 1) % len(t.hosts)]) for t in tests for k in range(len(t.hosts))]
        rev = [(b, a) for a, b in fwd]
        got = fab.flows(list(dict.fromkeys(fwd)))
        got_rev = fab.flows(list(dict.fromkeys(rev)))
        out = []
        for t in tests:
            n = len(t.hosts)
            slow = fab.starved(t.hosts)

            def read(a: str, b: str, rate: float) -> float:
                return fab.jittered(rate) * slow.get(a, 1.0) * slow.get(b, 1.0)

            hops: dict[tuple[str, str], float] = {}
            for k in range(n):
                a, b = t.hosts[k], t.hosts[(k + 1) % n]
                # each direction round is its own run; a ring of two measures both hops in each
                for d, rate in (((a, b), got[(a, b)]), ((b, a), got_rev[(b, a)])):
                    hops[d] = max(hops.get(d, 0.0), read(*d, rate))
            fwd_hops = [hops[(t.hosts[k], t.hosts[(k + 1) % n])] for k in range(n)]
            busbw = min(fwd_hops) if n > 2 else min(hops.values())
            out.append(RingResult(hosts=t.hosts, hops_gbyte_s=hops if self.hops else {}, busbw_gbyte_s=busbw))
        return out


def leaf_spine(n_hosts: int, per_leaf: int = 16, spines: int = 8, seed: int = 1, **kw) -> Fabric:
    """``n_hosts`` named ``node0001``... on leaves of ``per_leaf`` in order."""
    hosts = [f"node{i + 1:04d}" for i in range(n_hosts)]
    return Fabric(hosts=hosts, leaf_of={h: i // per_leaf for i, h in enumerate(hosts)}, spines=spines,
                  rng=random.Random(seed), **kw)


def leaves(fabric: Fabric) -> list[list[str]]:
    out: dict[int, list[str]] = {}
    for h in fabric.hosts:
        out.setdefault(fabric.leaf_of[h], []).append(h)
    return [out[k] for k in sorted(out)]
