"""The pairwise matrix: every host pair, in N-1 rounds of disjoint pairs measured at once.

Why a tournament schedule: N^2 serial pair runs take too long on a big allocation, while a round
of disjoint pairs loads each host's link with exactly one peer, so N-1 rounds (N rounds with a bye
when N is odd; the circle method) measure every pair under the same load. One rank per host (the
lowest rank on it) takes part; the other ranks only keep the rounds' barriers.

Why both directions are kept: a traffic shaper, a bad transceiver or a full switch buffer is often
one-directional. A pair's figure for a ring is its slower direction. A host slow with *every* peer
is a slow host (its NIC, its port, its own shaping); a pair slow while both hosts are fine with
everyone else is a slow link (the path between them).
"""

from __future__ import annotations

import statistics
import time

from ccdiag.cluster.mpictx import Deadline, barrier, bcast_obj, gather_to_root, load_numpy, wait_one
from ccdiag.findings import FAIL, PASS, Component, Evidence, Finding

TAG_PAIR = 5000


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair of ``range(n)`` once (circle method): N-1
    rounds for even N, N rounds with one host resting per round for odd N."""
    if n < 2:
        return []
    ids = list(range(n)) + ([None] if n % 2 else [])
    m = len(ids)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for k in range(m // 2):
            a, b = ids[k], ids[m - 1 - k]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return rounds


def plan(hostnames: dict[int, str]) -> dict:
    """Hosts in order of their first rank, the leader rank and slot count of each, the rounds."""
    hosts: list[str] = []
    leader: dict[str, int] = {}
    slots: dict[str, int] = {}
    for rank in sorted(hostnames):
        h = hostnames[rank]
        if h not in leader:
            hosts.append(h)
            leader[h] = rank
        slots[h] = slots.get(h, 0) + 1
    return {"hosts": hosts, "leaders": [leader[h] for h in hosts], "slots": slots,
            "rounds": round_robin(len(hosts))}


def measure(comm, ident: dict, size_bytes: int, iters: int, warmup: int, work: Deadline) -> dict:
    """This rank's part of the matrix: as a host's leader, the bandwidth *into* it from each peer
    (bytes / time of its receive, both directions running at once), median over ``iters``."""
    np = load_numpy()
    got = gather_to_root(comm, ident.get("host", "?"), work.sooner(max(1.0, work.left_s() / 4)))
    the_plan = None
    if comm.rank == 0:
        if got.missing:
            from ccdiag.cluster.mpictx import DeadlineExpired

            raise DeadlineExpired("pairs set-up", got.missing, work.budget_s)
        the_plan = plan(got.objs)
    the_plan = bcast_obj(comm, the_plan, work, "pairs set-up")
    hosts, leaders = the_plan["hosts"], the_plan["leaders"]
    me = leaders.index(comm.rank) if comm.rank in leaders else None
    count = max(1, size_bytes // 4)
    sbuf = np.ones(count, dtype=np.float32)
    rbuf = np.empty(count, dtype=np.float32)
    into: dict[str, float] = {}
    for rnd, pairs in enumerate(the_plan["rounds"]):
        barrier(comm, work, f"pairs round {rnd + 1}")
        if me is None:
            continue
        partner = next((b if a == me else a for a, b in pairs if me in (a, b)), None)
        if partner is None:
            continue
        peer = leaders[partner]
        times = []
        for it in range(warmup + iters):
            t0 = time.perf_counter()
            rq = comm.Irecv(rbuf, source=peer, tag=TAG_PAIR + rnd)
            sq = comm.Isend(sbuf, dest=peer, tag=TAG_PAIR + rnd)
            wait_one(rq, peer, work, f"pairs round {rnd + 1}")
            t_recv = time.perf_counter() - t0
            wait_one(sq, peer, work, f"pairs round {rnd + 1}")
            if it >= warmup:
                times.append(t_recv)
        # the fastest exchange: noise only adds time, a slow link is slow every time
        into[hosts[partner]] = size_bytes / min(times) / 1e9
    out = {"host": ident.get("host"), "into_gbyte_s": into, "leader": me is not None}
    if comm.rank == 0:
        out.update(hosts=hosts, rounds=the_plan["rounds"], slots=the_plan["slots"])
        out["matrix"] = True
    return out


def merge_matrix(results: dict[int, dict], hosts: list[str]) -> list[list[float | None]]:
    """m[i][j]: GB/s from host i to host j, as host j's leader measured its receive."""
    idx = {h: i for i, h in enumerate(hosts)}
    m: list[list[float | None]] = [[None] * len(hosts) for _ in hosts]
    for res in results.values():
        if not res or not res.get("leader"):
            continue
        j = idx.get(res["host"])
        for src, v in res.get("into_gbyte_s", {}).items():
            if j is not None and src in idx:
                m[idx[src]][j] = v
    return m


def classify(m, hosts: list[str], margin: float) -> dict:
    """Slow hosts (slow with every peer) apart from slow links (slow with one peer only).

    The reference is the median of the hosts' own median pair bandwidths, which one bad host cannot
    drag down (it would be half the pairs of a 4-host matrix)."""
    n = len(hosts)

    def pair(a: int, b: int) -> float:
        vals = [v for v in (m[a][b], m[b][a]) if v is not None]
        return min(vals) if vals else 0.0

    per_host = {hosts[a]: statistics.median([pair(a, b) for b in range(n) if b != a]) for a in range(n)} if n > 1 else {}
    ref = statistics.median(per_host.values()) if per_host else 0.0
    floor = ref * (1 - margin)
    slow_pairs = {(a, b) for a in range(n) for b in range(a + 1, n) if pair(a, b) < floor}
    slow_hosts = [hosts[a] for a in range(n)
                  if n >= 3 and all((min(a, b), max(a, b)) in slow_pairs for b in range(n) if b != a)]
    links = []
    for a, b in sorted(slow_pairs):
        if hosts[a] in slow_hosts or hosts[b] in slow_hosts:
            continue
        links.append({"a": hosts[a], "b": hosts[b], "a_to_b_gbyte_s": m[a][b], "b_to_a_gbyte_s": m[b][a]})
    return {"reference_gbyte_s": ref, "floor_gbyte_s": floor, "host_median_gbyte_s": per_host,
            "slow_hosts": slow_hosts, "slow_links": links}


def findings(cls: dict, hosts: list[str], iface: str, margin: float) -> list[Finding]:
    out = []
    ref, floor = cls["reference_gbyte_s"], cls["floor_gbyte_s"]
    for h in cls["slow_hosts"]:
        med = cls["host_median_gbyte_s"][h]
        out.append(Finding(
            check="cluster.host_slow", status=FAIL, component=Component(kind="node", name=h, device=iface),
            summary=(f"host {h} is slow with every peer over {iface}: median {med * 1000:.1f} MB/s per pair "
                     f"vs {ref * 1000:.1f} MB/s for the fleet"),
            evidence=(Evidence("median pair bandwidth", round(med, 6), "ccdiag pairs"),
                      Evidence("fleet reference", round(ref, 6), "median of every host's median")),
            expected=f">= {floor * 1000:.1f} MB/s ({1 - margin:.0%} of the fleet reference)",
            expected_source="pairwise matrix and --margin",
            remedy=f"look at {h} itself: its NIC {iface} (speed, errors, shaping), its switch port, its CPU load; "
                   f"drain it or run without it",
            details={"host": h, "iface": iface, "median_gbyte_s": med, "reference_gbyte_s": ref}))
    for link in cls["slow_links"]:
        a, b = link["a"], link["b"]
        ab, ba = link["a_to_b_gbyte_s"] or 0.0, link["b_to_a_gbyte_s"] or 0.0
        out.append(Finding(
            check="cluster.link_slow", status=FAIL,
            component=Component(kind="host_link", name=f"{a} <-> {b} ({iface})", device=iface, peer=b),
            summary=(f"link {a} <-> {b} over {iface} is slow while both hosts are fine with their other peers: "
                     f"{a}->{b} {ab * 1000:.1f} MB/s, {b}->{a} {ba * 1000:.1f} MB/s vs {ref * 1000:.1f} MB/s"),
            evidence=(Evidence(f"{a}->{b}", round(ab, 6), "ccdiag pairs"),
                      Evidence(f"{b}->{a}", round(ba, 6), "ccdiag pairs"),
                      Evidence("fleet reference", round(ref, 6), "median of every host's median")),
            expected=f">= {floor * 1000:.1f} MB/s", expected_source="pairwise matrix and --margin",
            remedy=f"check the path between {a} and {b} (routing, a switch or uplink between them, per-flow "
                   f"shaping); put them apart in the ring order (--hostfile-out)",
            details=dict(link, iface=iface)))
    if not out:
        out.append(Finding(check="cluster.pairs", status=PASS, component=Component(kind="node", name="all hosts"),
                           summary=f"every pair of {len(hosts)} hosts within {margin:.0%} of "
                                   f"{ref * 1000:.1f} MB/s over {iface}"))
    return out


def format_matrix(m, hosts: list[str], iface: str, size_bytes: int, rounds: int) -> str:
    w = max(8, *(len(h) for h in hosts)) if hosts else 8
    corner = "from/to"
    lines = [f"# pairwise bandwidth (MB/s, row sends to column) over {iface}, {size_bytes} bytes, "
             f"{rounds} rounds of disjoint pairs",
             f"#{corner:<{w}} " + " ".join(f"{h:>{w}}" for h in hosts)]
    for i, h in enumerate(hosts):
        cells = [f"{'-':>{w}}" if v is None else f"{v * 1000:>{w}.1f}" for v in m[i]]
        lines.append(f" {h:<{w}} " + " ".join(cells))
    return "\n".join(lines)
