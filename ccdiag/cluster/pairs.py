"""The pairwise matrix: every host pair, in N-1 rounds of disjoint pairs measured at once.

Why a tournament schedule: N^2 serial pair runs take too long on a big allocation, while a round
of disjoint pairs loads each host's link with exactly one peer, so N-1 rounds (N rounds with a bye
when N is odd; the circle method) measure every pair under the same load. One rank per host (the
lowest rank on it) takes part; the other ranks only keep the rounds' barriers.

Why both directions are kept: a traffic shaper, a bad transceiver or a full switch buffer is often
one-directional. A pair's figure for a ring is its slower direction. A host slow with *every* peer
is a slow host (its NIC, its port, its own shaping); a pair slow while both hosts are fine with
everyone else is a slow link (the path between them).

The budget, shared out (every wait ends in its share, so a transfer that never completes costs its
share and is reported, never the run):

* the work (``--budget`` less the reserve for the report) is cut into one share per round plus one
  for the retests: each round takes what is left over the rounds left plus one;
* a round starts on a barrier that waits at most :data:`BARRIER_SHARE` of its share (a rank that is
  gone, or whose link swallows MPI's messages, no longer stops the others);
* in a pair's share, the TCP steps over each common subnet take ``1 - MPI_SHARE`` (split evenly
  over the steps), MPI's exchange the rest: first a :data:`~ccdiag.cluster.transfers.SMALL_BYTES`
  message, then :data:`PROBE_BYTES`, then the timed exchanges that fit what is left at the probe's
  rate. A transfer not done by the end of the pair's share is a failed transfer of that direction
  (with whether the small message arrived: size-dependent loss), and the round goes on;
* the retests (pairs flagged slow on any matrix, measured again) share the last share; the report
  lists each retested direction with both figures.

Beside the figures, each leader records what its kernel and NICs counted during each pair's MPI
exchange (:mod:`.netcounters`: TCP resent segments, interface drops and bytes, RDMA counters; the
TCP steps' are kept apart, since they cross every subnet), the interface that really carried MPI's
bytes, and how long its rank was on a CPU while it exchanged data
(:mod:`.cpuuse`).
"""

from __future__ import annotations

import time

from ccdiag.cluster import loss, netcounters, tcpsteps
from ccdiag.cluster.cpuuse import CpuTally
from ccdiag.cluster.mpictx import (Deadline, DeadlineExpired, Outstanding, bcast_obj, exchange_obj, gather_to_root,
                                   load_numpy, soft_barrier, wait_one)
from ccdiag.cluster.transfers import SMALL_BYTES

TAG_PAIR = 5000
#: each kind of message of a pair has tags of its own, so a message of one kind that arrives after
#: its receive was given up (a stalled partner, a black hole) can never match a receive of another
#: kind and size
TAG_SMALL = 60000
TAG_PROBE = 70000
#: per round: the partners' candidate lists and per-step listen ports (one tag per round keeps the
#: rounds apart; within a round MPI's non-overtaking order keeps the steps apart)
TAG_IFACE = 20000


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


#: the second exchange of every pair: large enough to need full-size frames, small enough that a
#: link at 1 % of its rate still answers quickly; the time it takes says how much of the requested
#: work fits the pair's share of the budget
PROBE_BYTES = 1 << 20
#: of a pair's share of the budget, what MPI's exchange may use when the TCP matrices run too
MPI_SHARE = 0.5
#: of a round's share, the most its starting barrier waits
BARRIER_SHARE = 0.25
#: the exchanges are planned to this fraction of what is left (a loaded node runs slower than its
#: probe said)
PLAN_MARGIN = 0.8
TAG_AGREE = 30000
#: the pair's first message (each side's share left and candidate addresses)
TAG_MEET = 50000
#: the mid-run gather of the first figures and rank 0's retest plan (tags of their own, apart from
#: the set-up's and the final report's)
TAG_RETEST_GATHER = 40000
TAG_RETEST_PLAN = 40001


class Stuck(DeadlineExpired):
    """An exchange's receive (``way`` "recv") or send ("send") did not complete in its share."""

    def __init__(self, way: str, stage: str, peer: int, budget_s: float):
        super().__init__(stage, [peer], budget_s)
        self.way = way


def _agree_plan(comm, ident: dict, work: Deadline) -> dict:
    """Rank 0 groups the ranks by host and tells everyone: hosts, leaders, rounds, and each
    leader's identity (its addresses, so partners can name the link between them)."""
    slim = {"host": ident.get("host", "?"), "ifaces": ident.get("ifaces", {}), "speeds": ident.get("speeds", {})}
    got = gather_to_root(comm, slim, work.sooner(max(1.0, work.left_s() / 4)))
    the_plan = None
    if comm.rank == 0:
        assert got is not None  # the root holds every rank's answer
        if got.missing:
            raise DeadlineExpired("pairs set-up", got.missing, work.budget_s)
        the_plan = plan({r: o.get("host", "?") for r, o in got.objs.items()})
        the_plan["idents"] = [got.objs[r] for r in the_plan["leaders"]]
    return bcast_obj(comm, the_plan, work, "pairs set-up")


def measure(comm, ident: dict, size_bytes: int, iters: int, warmup: int, work: Deadline,
            per_iface: bool = False, only_ifaces: list[str] | None = None, margin: float = 0.5) -> dict:
    """This rank's part of the matrix: as a host's leader, for each peer, the bandwidth *into* it
    (bytes / time of its receive, both directions running at once, the fastest exchange) or the
    transfer that did not complete; what its counters moved; its CPU time. Each round in its share
    of the budget (module docstring); with ``per_iface`` the partners of each round also measure
    TCP between every pair of their candidate addresses on a common subnet (:mod:`.tcpsteps`).
    The pairs any matrix flags as slow (below ``1 - margin`` of its reference) are measured once
    more before anything is reported (:func:`retest`)."""
    from ccdiag.cluster import ifaces as ifacemod

    np = load_numpy()
    the_plan = _agree_plan(comm, ident, work)
    hosts, leaders = the_plan["hosts"], the_plan["leaders"]
    me = leaders.index(comm.rank) if comm.rank in leaders else None
    out: dict = {"host": ident.get("host"), "into_gbyte_s": {}, "leader": me is not None, "links": {},
                 "size_bytes": {}, "failed_into": {}, "failed_out": {}, "used_iface": {}, "cpu": {}, "counters": {},
                 "late_rounds": [], "round_share_s": []}
    mine = ifacemod.local_candidates(only_ifaces) if per_iface and me is not None else []
    if per_iface:
        out.update(candidates=mine, tcp_rows=[])
    if comm.rank == 0:
        out.update(hosts=hosts, rounds=the_plan["rounds"], slots=the_plan["slots"], matrix=True)
    bufs = (np.ones(max(1, size_bytes // 4), dtype=np.float32), np.empty(max(1, size_bytes // 4), dtype=np.float32))
    n_rounds = len(the_plan["rounds"])
    run_before = netcounters.read_local() if me is not None else None
    try:
        for rnd, pairs in enumerate(the_plan["rounds"]):
            stage = f"pairs round {rnd + 1}"
            # one share more than there are rounds left: the last is the retests'
            round_dl = work.sooner(max(0.0, work.left_s()) / (n_rounds - rnd + 1))
            out["round_share_s"].append(round(round_dl.left_s(), 3))
            if not soft_barrier(comm, round_dl.sooner(BARRIER_SHARE * max(0.0, round_dl.left_s())), stage):
                out["late_rounds"].append(rnd + 1)
            partner = _partner(pairs, me) if me is not None else None
            if me is None or partner is None:
                continue
            rec = _measure_pair(comm, the_plan, me, partner, bufs, (size_bytes, iters, warmup), round_dl, rnd, stage,
                                mine if per_iface else None, work)
            _keep(out, the_plan, ident, partner, rec)
        retest(comm, the_plan, me, out, bufs, (size_bytes, iters, warmup), margin, work, mine if per_iface else None)
    except DeadlineExpired as exc:
        out["incomplete"] = str(exc)
        out["waiting_on"] = exc.waiting_on
    if run_before is not None:
        out["run_counters"] = netcounters.delta(netcounters.read_local(), run_before)
    return out


def _keep(out: dict, the_plan: dict, ident: dict, partner: int, rec: dict) -> None:
    """One pair's record into this leader's result."""
    from ccdiag.cluster.route import link_to

    peer = the_plan["hosts"][partner]
    if rec.get("gbyte_s") is not None:
        out["into_gbyte_s"][peer] = rec["gbyte_s"]
        out["size_bytes"][peer] = rec["size_bytes"]
    failed = rec.get("failed")
    if failed:
        entry = {k: v for k, v in failed.items() if k != "way"} | {"share_s": max(0.0, rec["share_s"])}
        (out["failed_into"] if failed.get("way") == "recv" else out["failed_out"])[peer] = entry
    out["links"][peer] = link_to(ident, the_plan["idents"][partner])
    if rec.get("used_iface"):
        out["used_iface"][peer] = rec["used_iface"]
    out["cpu"][peer] = rec["cpu"]
    out["counters"][peer] = rec["counters"]
    out.setdefault("tcp_steps_counters", {})[peer] = rec.get("tcp_steps_counters")
    if "tcp_rows" in rec:
        out["tcp_rows"] += rec["tcp_rows"]


def _partner(pairs: list, me: int) -> int | None:
    """This host's partner in a round of disjoint pairs (indices into the leaders), or None."""
    return next((b if a == me else a for a, b in pairs if me in (a, b)), None)


def _measure_pair(comm, the_plan: dict, me: int, partner: int, bufs, work_req: tuple[int, int, int],
                  pair_dl: Deadline, tag_round: int, stage: str, mine: list[dict] | None, work: Deadline) -> dict:
    """One pair in its share (what is left of ``pair_dl`` when the partners meet; they wait for each
    other until ``work`` ends): with ``mine`` (this host's candidate addresses) first
    the TCP steps over every common subnet in ``1 - MPI_SHARE`` of the share, then MPI's exchange in
    the rest; the counters read around both. The record: ``gbyte_s`` into this host (or None),
    ``failed`` (a transfer that did not complete), ``cpu``, ``counters``, ``used_iface``,
    ``tcp_rows``, ``share_s``."""
    hosts, leaders = the_plan["hosts"], the_plan["leaders"]
    size_bytes, iters, warmup = work_req
    before = netcounters.read_local()
    # the partners meet: each says its share of the round and its candidate addresses, and both
    # take the smaller share from the moment they meet (never past the work's end), so every later
    # wait of the pair ends at the same moment on both sides: a partner late from a transfer that
    # held its whole share delays the pair, it neither shortens nor desynchronises it
    share_s = pair_dl.left_s()
    try:
        theirs = exchange_obj(comm, leaders[partner], {"share_s": share_s, "candidates": mine},
                              work, stage, TAG_MEET + tag_round)
    except DeadlineExpired:
        return {"share_s": round(max(0.0, pair_dl.left_s()), 3), "gbyte_s": None,
                "failed": {"stage": "meeting the partner (its first message never came)", "bytes": 0,
                           "small_ok": False, "way": "recv"},
                "cpu": CpuTally().to_json(), "counters": netcounters.delta(netcounters.read_local(), before)}
    pair_dl = work.sooner(max(0.0, min(share_s, float(theirs.get("share_s") or 0.0))))
    rec: dict = {"share_s": round(pair_dl.left_s(), 3)}
    if mine is not None:
        steps_dl = pair_dl.sooner(max(0.0, pair_dl.left_s()) * (1 - MPI_SHARE))
        rec["tcp_rows"] = tcpsteps.measure_ifaces(comm, leaders[partner], me < partner, hosts[me], hosts[partner],
                                                  mine, theirs.get("candidates") or [], size_bytes, iters, warmup,
                                                  steps_dl, pair_dl, TAG_IFACE + tag_round, f"{stage} interfaces")
    mid = netcounters.read_local()
    rec.update(_pair_exchange(comm, leaders[partner], bufs, size_bytes, iters, warmup, pair_dl, tag_round, stage))
    after = netcounters.read_local()
    # MPI's exchange alone, over the one interface that carried it (the TCP steps before it cross
    # every subnet, and the host's counters cannot tell their resent segments apart)
    rec["counters"] = netcounters.delta(after, mid)
    rec["used_iface"] = netcounters.busiest_iface(rec["counters"])
    rec["tcp_steps_counters"] = netcounters.delta(mid, before)
    return rec


def flagged_pairs(into: dict[str, dict[str, float]], hosts: list[str], margin: float) -> list[tuple[int, int]]:
    """Every pair below ``1 - margin`` of the reference by the matrix's relative rule (the fleet
    with three hosts or more, also the pairs a slow host explains; one direction against the other
    with two), as index pairs in plan order; none when nothing can be judged.
    ``into[h][src]``: what ``h``'s leader measured coming in from ``src``."""
    from ccdiag.cluster import pairmatrix as pmx
    from ccdiag.core import outliers

    idx = {h: i for i, h in enumerate(hosts)}
    m = pmx.merge_matrix({k: {"leader": True, "host": h, "into_gbyte_s": row or {}} for k, (h, row) in enumerate(into.items())},
                         hosts)
    if len(hosts) == 2:
        return [(0, 1)] if pmx.directions(m, hosts, margin)["slow_links"] else []
    res = outliers.classify(pmx.pair_figures(m, hosts), fraction=1 - margin)
    if not res.judged:
        return []
    return [(idx[a], idx[b]) for (a, b), ratio in res.ratios.items() if ratio < 1 - margin]


def flagged_iface_pairs(tcp_into: dict[str, list], hosts: list[str], margin: float) -> list[tuple[int, int]]:
    """:func:`flagged_pairs` on each subnet's TCP matrix. ``tcp_into[h]``: ``(net, src, MB/s)`` of
    every transfer into ``h``; a transfer that failed (None) counts as 0 here, so its pair is
    measured again (a stall once is not a fault)."""
    nets: dict[str, dict[str, dict[str, float]]] = {}
    for dst, rows in tcp_into.items():
        for net, src, mbyte_s in rows or []:
            nets.setdefault(net, {}).setdefault(dst, {})[src] = (mbyte_s or 0.0) / 1000
    return sorted({p for into in nets.values() for p in flagged_pairs(into, hosts, margin)})


def keep_better_rows(rows: list[dict], again: list[dict]) -> None:
    """Merge a retest's TCP rows into ``rows``: per transfer the better figure (a failure is the
    worst), with both figures and the first error kept on the row."""
    def key(r):
        return r["net"], r["src_host"], r["dst_host"], r["src_iface"], r["dst_iface"]

    where = {key(r): i for i, r in enumerate(rows)}
    for r in again:
        i = where.get(key(r))
        if i is None:
            rows.append(dict(r, first_mbyte_s=None, retest_mbyte_s=r["mbyte_s"]))
            continue
        old = rows[i]
        better = r if (r["mbyte_s"] or -1.0) > (old["mbyte_s"] or -1.0) else old
        rows[i] = dict(better, first_mbyte_s=old["mbyte_s"], retest_mbyte_s=r["mbyte_s"], first_error=old.get("error"))


def disjoint_rounds(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``pairs`` packed into rounds in which no member appears twice (first fit, in order)."""
    rounds: list[list[tuple[int, int]]] = []
    for p in pairs:
        slot = next((r for r in rounds if not any(set(p) & set(q) for q in r)), None)
        if slot is None:
            rounds.append([p])
        else:
            slot.append(p)
    return rounds


def retest(comm, the_plan: dict, me: int | None, out: dict, bufs, work_req: tuple[int, int, int], margin: float,
           work: Deadline, mine: list[dict] | None = None) -> None:
    """Measure the flagged pairs once more, in rounds of disjoint pairs within the share of the
    budget kept for it, and keep each direction's better figure.

    A pair whose sender resent more than :data:`ccdiag.cluster.loss.LOSS_FRACTION` is measured
    again too, its counters kept apart (``retest_counters``): loss seen once, the tail of another
    pair's traffic resent in this one's window, is not a lossy link.

    Why: on a node whose CPUs are shared (a loaded login-class node, a container on a busy host), a
    rank the scheduler leaves waiting for a few seconds makes one direction of one pair read half
    its rate; a slow link or host is slow every time it is measured. Noise only ever lowers a
    bandwidth figure, so the better of two measurements is the honest one, and a fault that shows
    twice is a fault. Both figures are kept (``first_gbyte_s``, ``retest_gbyte_s``) so the report
    can say which pair is unstable rather than slow. Rank 0 gathers the first figures from the
    leaders that answer in time and decides; a pair flagged on any matrix is measured again on all,
    except a pair whose MPI exchange did not complete: its MPI messages may still sit behind the
    transfer that is stuck, and a black hole would hold a second share just the same."""
    hosts = the_plan["hosts"]
    # long enough for the slowest leader's last round to end; a rank that never comes costs a third
    # of what is left, and the report still names it
    sub = work.sooner(max(1.0, work.left_s() / 3))
    tcp = [(r["net"], r["src_host"], r["mbyte_s"]) for r in out.get("tcp_rows", [])]
    failed_peers = sorted(set(out["failed_into"]) | set(out["failed_out"]))
    lossy_peers = sorted(p for p, d in (out.get("counters") or {}).items()
                         if (loss.loss_fraction((d or {}).get("tcp") or {}) or 0.0) > loss.LOSS_FRACTION)
    got = gather_to_root(comm, (out["host"], out["into_gbyte_s"], tcp, failed_peers, lossy_peers)
                         if me is not None else None, sub, TAG_RETEST_GATHER)
    plan_rounds: list = []
    if comm.rank == 0 and got is not None:
        plan_rounds = retest_plan([o for o in got.objs.values() if o], hosts, margin)
    try:
        plan_rounds = bcast_obj(comm, plan_rounds, sub, "pairs retest plan", TAG_RETEST_PLAN) or []
    except DeadlineExpired:
        # rank 0 could not reach every rank, or this rank heard nothing: the ones that heard go on,
        # a partner that did not costs its pair's share, and no figure is replaced
        if comm.rank != 0:
            plan_rounds = []
    out["retest_rounds"] = len(plan_rounds)
    base = len(the_plan["rounds"])
    for k, pairs in enumerate(plan_rounds):
        stage = f"pairs retest {k + 1}"
        round_dl = work.sooner(max(0.0, work.left_s()) / (len(plan_rounds) - k))
        soft_barrier(comm, round_dl.sooner(BARRIER_SHARE * max(0.0, round_dl.left_s())), stage)
        partner = _partner(pairs, me) if me is not None else None
        if me is None or partner is None:
            continue
        rec = _measure_pair(comm, the_plan, me, partner, bufs, work_req, round_dl, base + k, stage, mine, work)
        _keep_retest(out, hosts[partner], rec, mine is not None)


def retest_plan(answers: list[tuple], hosts: list[str], margin: float) -> list[list[tuple[int, int]]]:
    """Rank 0: from each leader's (host, figures into it, TCP rows, peers whose transfer stuck,
    peers it resent too much to), the pairs to measure again, in rounds of disjoint pairs."""
    into = {o[0]: o[1] for o in answers}
    tcp_into = {o[0]: o[2] for o in answers}
    stuck = {frozenset((o[0], p)) for o in answers for p in o[3]}
    idx = {h: i for i, h in enumerate(hosts)}
    lossy = {(min(idx[o[0]], idx[p]), max(idx[o[0]], idx[p])) for o in answers for p in o[4]
             if o[0] in idx and p in idx}
    flagged = set(flagged_pairs(into, hosts, margin)) | set(flagged_iface_pairs(tcp_into, hosts, margin)) | lossy
    return disjoint_rounds(sorted(p for p in flagged if frozenset((hosts[p[0]], hosts[p[1]])) not in stuck))


def _keep_retest(out: dict, peer: str, rec: dict, per_iface: bool) -> None:
    """A retested pair's record into this leader's result: each direction's better figure, both
    figures, the TCP rows' better figures, the CPU tally, the counters kept apart."""
    if per_iface:
        keep_better_rows(out.setdefault("tcp_rows", []), rec.get("tcp_rows") or [])
    first = out["into_gbyte_s"].get(peer)
    gbyte_s = rec.get("gbyte_s")
    out.setdefault("first_gbyte_s", {})[peer] = first
    out.setdefault("retest_gbyte_s", {})[peer] = gbyte_s
    if gbyte_s is not None and (first is None or gbyte_s > first):
        out["into_gbyte_s"][peer] = gbyte_s
        out["size_bytes"][peer] = rec["size_bytes"]
    _add_tally(out["cpu"], peer, rec["cpu"])
    # kept apart from the first: loss seen once and not again is not a lossy link
    out.setdefault("retest_counters", {})[peer] = rec["counters"]


def _add_tally(cpu: dict, peer: str, more: dict) -> None:
    old = cpu.get(peer)
    if not old:
        cpu[peer] = more
        return
    t = CpuTally(**old)
    t.add(CpuTally(**more))
    cpu[peer] = t.to_json()


def _exchange(comm, peer: int, sbuf, rbuf, dl: Deadline, tag: int, stage: str, tally: CpuTally) -> float:
    """One simultaneous exchange with ``peer``; the seconds until this rank's receive completed.
    A receive or send not done by ``dl`` is :class:`Stuck` (its requests kept alive with their
    buffers, :func:`ccdiag.cluster.mpictx.cancel_all`); the CPU this rank got meanwhile is tallied."""
    began = tally.start()
    try:
        with Outstanding() as live:
            t0 = time.perf_counter()
            rq = live.add(comm.Irecv(rbuf, source=peer, tag=tag))
            sq = live.add(comm.Isend(sbuf, dest=peer, tag=tag))
            try:
                wait_one(rq, peer, dl, stage)
            except DeadlineExpired:
                raise Stuck("recv", stage, peer, dl.budget_s) from None
            except Exception as exc:  # noqa: BLE001 - an MPI error on this transfer is this pair's failure
                raise Stuck("recv", f"{stage} ({type(exc).__name__}: {exc})", peer, dl.budget_s) from None
            took = time.perf_counter() - t0
            try:
                wait_one(sq, peer, dl, stage)
            except DeadlineExpired:
                raise Stuck("send", stage, peer, dl.budget_s) from None
            except Exception as exc:  # noqa: BLE001
                raise Stuck("send", f"{stage} ({type(exc).__name__}: {exc})", peer, dl.budget_s) from None
    finally:
        tally.stop(began)
    return took


def plan_work(per_byte_s: float, size_bytes: int, iters: int, warmup: int, share_s: float) -> tuple[int, int, int]:
    """(message bytes, warm-up exchanges, timed exchanges) that fit ``share_s`` at ``per_byte_s``:
    the requested work when it fits; else fewer timed exchanges (at least 2), one warm-up; then
    smaller messages (down to :data:`PROBE_BYTES`). Pure, so both partners of a pair, given the same
    figures, plan the same work."""
    t_one = max(per_byte_s * size_bytes, 1e-9)
    if t_one * (warmup + iters) <= share_s:
        return size_bytes, warmup, iters
    fit = int(share_s / t_one) - 1
    if fit >= 2:
        return size_bytes, 1, min(iters, fit)
    size = int(share_s / 3 / max(per_byte_s, 1e-15))
    size = max(PROBE_BYTES, min(size_bytes, size - size % 4096))
    return size, 1, 2 if size > PROBE_BYTES else 1


def _pair_exchange(comm, peer: int, bufs, size_bytes: int, iters: int, warmup: int, dl: Deadline, rnd: int,
                   stage: str | None = None) -> dict:
    """MPI's exchange with ``peer`` within ``dl``: a small message, the probe, then the timed
    exchanges both partners plan alike (each sends its probe time and what is left of its share;
    both plan from the slower probe and the smaller share). Returns ``gbyte_s`` into this rank (the
    fastest timed exchange; None when none completed), ``size_bytes``, ``per_byte_s``, ``cpu`` (the
    tally), and ``failed`` with the first transfer that did not complete: what it was, whether the
    small message had arrived (``small_ok``), its size and which way (``recv``: into this rank)."""
    stage = stage or f"pairs round {rnd + 1}"
    sbuf, rbuf = bufs
    tally = CpuTally()
    res: dict = {"gbyte_s": None, "size_bytes": None, "per_byte_s": None, "failed": None}

    def stuck(what: str, nbytes: int, small_ok: bool, way: str) -> dict:
        res["failed"] = {"stage": what, "bytes": nbytes, "small_ok": small_ok, "way": way}
        res["cpu"] = tally.to_json()
        return res

    small = SMALL_BYTES // 4
    try:
        _exchange(comm, peer, sbuf[:small], rbuf[:small], dl, TAG_SMALL + rnd, stage, tally)
    except Stuck as exc:
        return stuck(f"a {SMALL_BYTES}-byte message", SMALL_BYTES, False, exc.way)
    probe = PROBE_BYTES // 4
    try:
        t_probe = _exchange(comm, peer, sbuf[:probe], rbuf[:probe], dl, TAG_PROBE + rnd, stage, tally)
    except Stuck as exc:
        return stuck(f"the {PROBE_BYTES}-byte probe", PROBE_BYTES, True, exc.way)
    left_s = max(0.0, dl.left_s())
    try:
        theirs = exchange_obj(comm, peer, (t_probe, left_s), dl, stage, TAG_AGREE + rnd)
    except DeadlineExpired:
        return stuck("agreeing the exchanges (the partner's plan did not arrive)", PROBE_BYTES, True, "recv")
    # both plan from the same two pairs of figures (never a fresh reading of the clock), so both
    # post exchanges of the same size and number
    per_byte_s = max(t_probe, float(theirs[0])) / PROBE_BYTES
    size, n_warm, n_timed = plan_work(per_byte_s, min(size_bytes, sbuf.shape[0] * 4), iters, warmup,
                                      PLAN_MARGIN * min(left_s, float(theirs[1])))
    count = size // 4
    times: list[float] = []
    for _ in range(n_warm + n_timed):
        try:
            times.append(_exchange(comm, peer, sbuf[:count], rbuf[:count], dl, TAG_PAIR + rnd, stage, tally))
        except Stuck as exc:
            if len(times) > n_warm:
                res["cut_short"] = True
                break
            return stuck(f"a {size}-byte exchange", size, True, exc.way)
    timed = times[n_warm:] or times
    # the fastest exchange: noise only adds time, a slow link is slow every time
    res.update(gbyte_s=size / min(timed) / 1e9, size_bytes=size, per_byte_s=per_byte_s, cpu=tally.to_json())
    return res


def run(size_bytes: int, iters: int, warmup: int, budget_s: float, as_json: bool, hostfile_out: str | None,
        margin: float, only_ifaces: list[str] | None = None, line_rate_gbit_s: float | None = None,
        layout=None) -> int:
    """``ccdiag bench pairs``: MPI's own matrix, then one TCP matrix per candidate subnet, each
    judged once (:mod:`.judgement`); the report is :mod:`ccdiag.cluster.pairs_report`'s."""
    from ccdiag.cluster.pairs_report import PairsReport
    from ccdiag.cluster.runner import run_ranks

    def body(comm, work, ident):
        return measure(comm, ident, size_bytes, iters, warmup, work, per_iface=True, only_ifaces=only_ifaces,
                       margin=margin)

    rep = PairsReport(size_bytes=size_bytes, margin=margin, as_json=as_json, hostfile_out=hostfile_out,
                      only_ifaces=list(only_ifaces or []), line_rate_gbit_s=line_rate_gbit_s, budget_s=budget_s,
                      layout=layout)
    return run_ranks(budget_s, body, rep.report)
