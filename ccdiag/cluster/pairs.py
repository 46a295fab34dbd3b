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

import dataclasses
import socket
import time

from ccdiag.core import outliers
from ccdiag.cluster import ifaces as ifacemod
from ccdiag.cluster.mpictx import (Deadline, DeadlineExpired, Outstanding, barrier, bcast_obj, gather_to_root,
                                   load_numpy, wait_one)
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, Component, Evidence, Finding

TAG_PAIR = 5000
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


#: the first exchange of every pair: small, so a link at 1 % of its rate still answers quickly, and
#: the time it takes says how much of the requested work fits the pair's share of the budget
PROBE_BYTES = 1 << 20
#: of a round's share of the budget, what MPI's exchange may use when the TCP matrices run too
MPI_SHARE = 0.5
TAG_AGREE = 30000
#: the mid-run gather of the first figures and rank 0's retest plan (tags of their own, apart from
#: the set-up's and the final report's)
TAG_RETEST_GATHER = 40000
TAG_RETEST_PLAN = 40001


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
    """This rank's part of the matrix: as a host's leader, the bandwidth *into* it from each peer
    (bytes / time of its receive, both directions running at once), the fastest exchange.

    The work fits the budget: each round gets its share of what is left, and each pair first
    exchanges :data:`PROBE_BYTES`, from which both partners agree how many exchanges of which size
    fit (fewer iterations first, then smaller messages). A deadline that passes anyway ends the
    measuring, not the report: what was measured is returned with ``incomplete`` saying what is
    missing. With ``per_iface`` the partners of each round then measure TCP between every pair of
    their candidate addresses on a common subnet (:func:`measure_ifaces`).

    One round's share of the budget is kept for :func:`retest`: the pairs the matrix flags as slow
    (below ``1 - margin`` of the fleet reference) are measured once more before anything is
    reported."""
    from ccdiag.cluster.route import link_to

    np = load_numpy()
    the_plan = _agree_plan(comm, ident, work)
    hosts, leaders = the_plan["hosts"], the_plan["leaders"]
    me = leaders.index(comm.rank) if comm.rank in leaders else None
    out: dict = {"host": ident.get("host"), "into_gbyte_s": {}, "leader": me is not None, "links": {},
                 "size_bytes": {}}
    mine = ifacemod.local_candidates(only_ifaces) if per_iface and me is not None else []
    if per_iface:
        out.update(candidates=mine, tcp_rows=[])
    if comm.rank == 0:
        out.update(hosts=hosts, rounds=the_plan["rounds"], slots=the_plan["slots"], matrix=True)
    bufs = (np.ones(max(1, size_bytes // 4), dtype=np.float32), np.empty(max(1, size_bytes // 4), dtype=np.float32))
    n_rounds = len(the_plan["rounds"])
    try:
        for rnd, pairs in enumerate(the_plan["rounds"]):
            stage = f"pairs round {rnd + 1}"
            barrier(comm, work, stage)
            partner = _partner(pairs, me) if me is not None else None
            if me is None or partner is None:
                continue
            # one share more than there are rounds: the last is the retests'
            gbyte_s, size, rows = _measure_pair(comm, the_plan, me, partner, bufs, (size_bytes, iters, warmup), work,
                                                n_rounds + 1 - rnd, rnd, stage, mine if per_iface else None)
            out["into_gbyte_s"][hosts[partner]] = gbyte_s
            out["size_bytes"][hosts[partner]] = size
            out["links"][hosts[partner]] = link_to(ident, the_plan["idents"][partner])
            if per_iface:
                out["tcp_rows"] += rows
        retest(comm, the_plan, me, out, bufs, (size_bytes, iters, warmup), margin, work,
               mine if per_iface else None)
    except DeadlineExpired as exc:
        out["incomplete"] = str(exc)
        out["waiting_on"] = exc.waiting_on
    return out


def _partner(pairs: list, me: int) -> int | None:
    """This host's partner in a round of disjoint pairs (indices into the leaders), or None."""
    return next((b if a == me else a for a, b in pairs if me in (a, b)), None)


def _measure_pair(comm, the_plan: dict, me: int, partner: int, bufs, work_req: tuple[int, int, int], work: Deadline,
                  rounds_left: int, tag_round: int, stage: str, mine: list[dict] | None) -> tuple[float, int, list]:
    """One round between this host's leader and ``partner``'s, in its share of what is left (one of
    ``rounds_left``, planned at 80 %: a loaded node runs slower than its probe said): MPI's exchange,
    then with ``mine`` (this host's candidate addresses) TCP between every pair of their addresses in
    a share of the same size. (GB/s into this host, the message size used, the TCP rows.)"""
    hosts, leaders = the_plan["hosts"], the_plan["leaders"]
    size_bytes, iters, warmup = work_req
    share_s = 0.8 * max(0.0, work.left_s()) / rounds_left
    gbyte_s, size, per_byte_s = _pair_exchange(comm, leaders[partner], bufs, size_bytes, iters, warmup,
                                               share_s * (MPI_SHARE if mine is not None else 1.0), work, tag_round,
                                               stage)
    rows: list = []
    if mine is not None:
        step_dl = work.sooner(max(0.5, work.left_s() / rounds_left))
        rows = measure_ifaces(comm, leaders[partner], me < partner, hosts[me], hosts[partner], mine, size, iters,
                              warmup, step_dl, TAG_IFACE + tag_round, f"{stage} interfaces", work=work,
                              per_byte_s=per_byte_s)
    return gbyte_s, size, rows


def flagged_pairs(into: dict[str, dict[str, float]], hosts: list[str], margin: float) -> list[tuple[int, int]]:
    """Every pair below ``1 - margin`` of the fleet reference by :func:`classify`'s rule (also the
    pairs a slow host explains), as index pairs in plan order; none when the fleet cannot be judged.
    ``into[h][src]``: what ``h``'s leader measured coming in from ``src``."""
    idx = {h: i for i, h in enumerate(hosts)}
    m = merge_matrix({k: {"leader": True, "host": h, "into_gbyte_s": row or {}} for k, (h, row) in enumerate(into.items())},
                     hosts)
    res = outliers.classify(pair_figures(m, hosts), fraction=1 - margin)
    if not res.judged:
        return []
    return [(idx[a], idx[b]) for (a, b), ratio in res.ratios.items() if ratio < 1 - margin]


def flagged_iface_pairs(tcp_into: dict[str, list], hosts: list[str], margin: float) -> list[tuple[int, int]]:
    """:func:`flagged_pairs` on each subnet's TCP matrix. ``tcp_into[h]``: ``(net, src, MB/s)`` of
    every transfer into ``h``; a transfer that failed (None) counts as 0, as in the report."""
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

    Why: on a node whose CPUs are shared (a loaded login-class node, a container on a busy host), a
    rank the scheduler leaves waiting for a few seconds makes one direction of one pair read half
    its rate; a slow link or host is slow every time it is measured. Noise only ever lowers a
    bandwidth figure, so the better of two measurements is the honest one, and a fault that shows
    twice is a fault. Both figures are kept (``first_gbyte_s``, ``retest_gbyte_s``) so the report
    can show what was retested. Rank 0 gathers the first figures and decides; a rank missing from
    that gather means no retest (the report then names the missing rank as before). With ``mine``
    (this host's candidate addresses) the per-interface TCP matrices are retested the same way: a
    pair flagged on either matrix is measured again on both."""
    hosts = the_plan["hosts"]
    # long enough for the slowest leader's last round to end; a rank that never comes costs a third
    # of what is left, and the report still names it
    sub = work.sooner(max(1.0, work.left_s() / 3))
    tcp = [(r["net"], r["src_host"], r["mbyte_s"]) for r in out.get("tcp_rows", [])]
    got = gather_to_root(comm, (out["host"], out["into_gbyte_s"], tcp) if me is not None else None, sub,
                         TAG_RETEST_GATHER)
    plan_rounds: list = []
    if comm.rank == 0 and got is not None and not got.missing:
        into = {o[0]: o[1] for o in got.objs.values() if o}
        tcp_into = {o[0]: o[2] for o in got.objs.values() if o}
        flagged = set(flagged_pairs(into, hosts, margin)) | set(flagged_iface_pairs(tcp_into, hosts, margin))
        plan_rounds = disjoint_rounds(sorted(flagged))
    plan_rounds = bcast_obj(comm, plan_rounds, work, "pairs retest plan", TAG_RETEST_PLAN) or []
    base = len(the_plan["rounds"])
    for k, pairs in enumerate(plan_rounds):
        stage = f"pairs retest {k + 1}"
        barrier(comm, work, stage)
        partner = _partner(pairs, me) if me is not None else None
        if me is None or partner is None:
            continue
        gbyte_s, size, again = _measure_pair(comm, the_plan, me, partner, bufs, work_req, work,
                                             len(plan_rounds) - k, base + k, stage, mine)
        peer = hosts[partner]
        if mine is not None:
            keep_better_rows(out.setdefault("tcp_rows", []), again)
        first = out["into_gbyte_s"].get(peer)
        out.setdefault("first_gbyte_s", {})[peer] = first
        out.setdefault("retest_gbyte_s", {})[peer] = gbyte_s
        if first is None or gbyte_s > first:
            out["into_gbyte_s"][peer] = gbyte_s
            out["size_bytes"][peer] = size


def _exchange(comm, peer: int, sbuf, rbuf, work: Deadline, tag: int, stage: str) -> float:
    """One simultaneous exchange with ``peer``; the seconds until this rank's receive completed.
    A deadline cancels both requests before the buffers can go."""
    with Outstanding() as live:
        t0 = time.perf_counter()
        rq = live.add(comm.Irecv(rbuf, source=peer, tag=tag))
        sq = live.add(comm.Isend(sbuf, dest=peer, tag=tag))
        wait_one(rq, peer, work, stage)
        took = time.perf_counter() - t0
        wait_one(sq, peer, work, stage)
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


def _pair_exchange(comm, peer: int, bufs, size_bytes: int, iters: int, warmup: int, share_s: float,
                   work: Deadline, rnd: int, stage: str | None = None) -> tuple[float, int, float]:
    """The bandwidth into this rank from ``peer`` (GB/s, fastest timed exchange), the message size
    used and the agreed seconds per byte. Both partners send their probe time and share; each then
    plans from the slower probe and the smaller share, so both run the same exchanges."""
    stage = stage or f"pairs round {rnd + 1}"
    sbuf, rbuf = bufs
    probe = PROBE_BYTES // 4
    t_probe = _exchange(comm, peer, sbuf[:probe], rbuf[:probe], work, TAG_PAIR + rnd, stage)
    theirs = exchange_obj(comm, peer, (t_probe, share_s), work, stage, TAG_AGREE + rnd)
    per_byte_s = max(t_probe, float(theirs[0])) / PROBE_BYTES
    size, n_warm, n_timed = plan_work(per_byte_s, min(size_bytes, sbuf.shape[0] * 4), iters, warmup,
                                      min(share_s, float(theirs[1])))
    count = size // 4
    times = [_exchange(comm, peer, sbuf[:count], rbuf[:count], work, TAG_PAIR + rnd, stage)
             for _ in range(n_warm + n_timed)][n_warm:]
    # the fastest exchange: noise only adds time, a slow link is slow every time
    return size / min(times) / 1e9, size, per_byte_s


def exchange_obj(comm, peer: int, obj, deadline: Deadline, stage: str, tag: int):
    """Send ``obj`` to ``peer`` and receive its object, both ending by ``deadline``.

    Why not ``sendrecv``: it blocks without a deadline; a partner that died would hang this rank.
    Probes (``improbe``) instead of a pickled ``irecv`` whose object cannot be read after a ``Test``."""
    load_numpy()  # the same clear error as the rest of the run when the MPI extras are missing
    sreq = comm.isend(obj, dest=peer, tag=tag)
    spins = 0
    while True:
        msg = comm.improbe(source=peer, tag=tag)
        if msg is not None:
            got = msg.recv()
            break
        spins += 1
        if time.monotonic() >= deadline.end:
            raise DeadlineExpired(stage, [peer], deadline.budget_s)
        time.sleep(0.0002 if spins < 1000 else 0.002)
    wait_one(sreq, peer, deadline, stage)
    return got


_CHUNK_BYTES = 1 << 20


def _left_s(dl: Deadline) -> float:
    """A socket timeout from what is left of ``dl``: never 0 (which would mean non-blocking)."""
    left = dl.left_s()
    if left <= 0:
        raise socket.timeout("the step's share of the budget ran out")
    return max(0.01, left)


def _listen(addr: str) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.bind((addr, 0))
        srv.listen(1)
    except OSError:
        srv.close()
        raise
    return srv


def _tcp_receive(srv: socket.socket, blocks: int, size_bytes: int, warmup: int, dl: Deadline) -> float:
    """Accept one connection, read ``blocks`` blocks of ``size_bytes`` and return the fastest timed
    block's bandwidth in MB/s. The first ``warmup`` blocks are left out (TCP slow start); the stream
    stays full between blocks, so a block's time is the link's steady rate. A 1-byte answer at the
    end tells the sender every byte arrived, so the next step starts on an idle link."""
    srv.settimeout(_left_s(dl))
    conn, _ = srv.accept()
    with conn:
        buf = bytearray(_CHUNK_BYTES)
        view = memoryview(buf)
        fastest_s = None
        t_block = time.perf_counter()
        for k in range(blocks):
            got = 0
            while got < size_bytes:
                conn.settimeout(_left_s(dl))
                n = conn.recv_into(view[:min(_CHUNK_BYTES, size_bytes - got)])
                if n == 0:
                    raise ConnectionError(f"the sender closed after {got} of {size_bytes} bytes")
                got += n
            now = time.perf_counter()
            if k >= warmup:
                dt = now - t_block
                fastest_s = dt if fastest_s is None else min(fastest_s, dt)
            t_block = now
        conn.settimeout(_left_s(dl))
        conn.sendall(b"k")
    return size_bytes / max(fastest_s or 1e-9, 1e-9) / 1e6


def _tcp_send(src: dict, dst_addr: str, port: int, blocks: int, size_bytes: int, dl: Deadline) -> None:
    """Connect from ``src``'s address, bound to its interface (SO_BINDTODEVICE, where allowed), so
    the bytes leave through the interface under test even when a route would pick another one."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with s:
        try:
            s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_BINDTODEVICE", 25), src["name"].encode() + b"\0")
        except OSError:
            pass  # no CAP_NET_RAW: the source address alone still selects the interface on a flat subnet
        s.bind((src["address"], 0))
        s.settimeout(_left_s(dl))
        s.connect((dst_addr, port))
        payload = memoryview(bytes(_CHUNK_BYTES))
        for _ in range(blocks):
            sent = 0
            while sent < size_bytes:
                s.settimeout(_left_s(dl))
                n = min(_CHUNK_BYTES, size_bytes - sent)
                s.sendall(payload[:n])
                sent += n
        s.settimeout(_left_s(dl))
        s.recv(1)


def measure_ifaces(comm, peer: int, first: bool, my_host: str, peer_host: str, mine: list[dict],
                   size_bytes: int, iters: int, warmup: int, round_dl: Deadline, tag: int, stage: str,
                   work: Deadline | None = None, per_byte_s: float | None = None) -> list[dict]:
    """TCP between this host and its partner of the round over every common subnet, one direction
    at a time (``first`` sends first), the rows measured *into* this host.

    Every step starts with an MPI exchange (the receiver's listen port), so both hosts walk the
    same steps in lockstep even when a transfer fails or times out on one side only: a failure is
    a row with ``mbyte_s`` None and the error, never a hung rank. Socket waits end at this step's
    share of ``round_dl``; the MPI exchanges end at ``work`` (a silent partner is a fault, named)."""
    work = work or round_dl
    theirs = exchange_obj(comm, peer, mine, work, stage, tag)
    common = ifacemod.common_pairs(mine, theirs if isinstance(theirs, list) else [])
    steps = [(mc, pc, sender_first) for mc, pc in common for sender_first in (True, False)]
    rows = []
    for k, (mc, pc, sender_first) in enumerate(steps):
        step_dl = round_dl.sooner(max(0.2, round_dl.left_s() / (len(steps) - k)))
        i_send = sender_first == first
        net = ifacemod.network_of(mc)
        if i_send:
            reply = exchange_obj(comm, peer, {"step": k, "port": None}, work, stage, tag)
            ok = isinstance(reply, dict) and reply.get("step") == k
            port, blocks = (reply.get("port"), int(reply.get("blocks") or 0)) if ok else (None, 0)
            if port and blocks:
                try:
                    _tcp_send(mc, pc["address"], int(port), blocks, size_bytes, step_dl)
                except OSError:
                    pass  # the receiver records the failure: its row is the one reported
            continue
        row = {"src_host": peer_host, "dst_host": my_host, "net": net, "src_iface": pc["name"],
               "dst_iface": mc["name"], "src_addr": pc["address"], "dst_addr": mc["address"],
               "bytes": size_bytes, "mbyte_s": None, "error": None}
        srv = None
        try:
            srv = _listen(mc["address"])
            port = srv.getsockname()[1]
        except OSError as exc:
            row["error"] = f"cannot listen on {mc['address']}: {exc}"
            port = None
        tcp_warm, blocks = tcp_blocks(per_byte_s, size_bytes, iters, warmup, step_dl.left_s())
        exchange_obj(comm, peer, {"step": k, "port": port, "blocks": blocks}, work, stage, tag)
        if srv is not None:
            try:
                row["mbyte_s"] = _tcp_receive(srv, blocks, size_bytes, tcp_warm, step_dl)
            except (OSError, ConnectionError) as exc:
                row["error"] = ("timed out: not done within this step's share of the budget"
                                if isinstance(exc, socket.timeout) else f"{type(exc).__name__}: {exc}")
            finally:
                srv.close()
        rows.append(row)
    return rows


def tcp_blocks(per_byte_s: float | None, size_bytes: int, iters: int, warmup: int, left_s: float) -> tuple[int, int]:
    """(warm-up blocks, all blocks) of one TCP step that fit ``left_s`` at the MPI probe's rate (the
    receiver decides and tells the sender): the requested count when it fits, else at least one
    warm-up block (TCP slow start) and one timed block."""
    want = warmup + iters
    if not per_byte_s:
        return warmup, want
    fit = int(left_s * 0.8 / max(per_byte_s * size_bytes, 1e-9))
    if fit >= want:
        return warmup, want
    return 1, max(2, fit)


def iface_matrices(results: dict[int, dict], hosts: list[str]) -> list[dict]:
    """One matrix per subnet from the leaders' ``tcp_rows``: the hosts on it (in plan order), the
    interface each uses there, m[i][j] in GB/s from host i to host j (0.0 for a transfer that
    failed: an interface that carries nothing is the slowest there is), and the label findings use
    (the interface name, or ``a|b`` when the hosts name it differently)."""
    rows = [r for res in results.values() if res and res.get("leader") for r in res.get("tcp_rows", [])]
    nets: dict[str, list[dict]] = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    out = []
    for net in sorted(nets):
        names: dict[str, str] = {}
        for r in nets[net]:
            names.setdefault(r["src_host"], r["src_iface"])
            names.setdefault(r["dst_host"], r["dst_iface"])
        on = [h for h in hosts if h in names]
        idx = {h: i for i, h in enumerate(on)}
        m: list[list[float | None]] = [[None] * len(on) for _ in on]
        for r in nets[net]:
            v = r["mbyte_s"]
            m[idx[r["src_host"]]][idx[r["dst_host"]]] = (v / 1000) if v is not None else 0.0
        label = "|".join(sorted(set(names.values())))
        out.append({"net": net, "label": label, "hosts": on, "ifaces": {h: names[h] for h in on},
                    "matrix_gbyte_s": m, "rows": nets[net]})
    return out


_IFACE_CHECK = {"cluster.host_slow": "cluster.iface_host_slow", "cluster.link_slow": "cluster.iface_link_slow",
                "cluster.pairs": "cluster.iface_pairs"}


def iface_findings(mat: dict, margin: float) -> tuple[dict, list[Finding]]:
    """Slow host vs slow link on one subnet's matrix: the same analysis as MPI's matrix, findings
    under their own check names (``cluster.iface_*``) naming the interface and subnet, so "eth1 is
    slow into nodeh2" stands apart from a healthy eth0 and from MPI's own figures."""
    hosts = mat["hosts"]
    cls = classify(mat["matrix_gbyte_s"], hosts, margin)
    where = f"{mat['label']} ({mat['net']})"
    out = []
    for f in findings(cls, hosts, where, margin):
        details = dict(f.details, net=mat["net"], iface=mat["label"])
        if f.check == "cluster.host_slow":
            details["iface"] = mat["ifaces"].get(f.details.get("host"), mat["label"])
        comp = dataclasses.replace(f.component, name=f"{f.component.name} over {where}", device=mat["label"])
        out.append(dataclasses.replace(f, check=_IFACE_CHECK.get(f.check, f.check), component=comp,
                                       details=details))
    return cls, out


def format_iface_rows(rows: list[dict]) -> str:
    """The failed transfers, one line each (the matrix shows them as 0.0)."""
    return "\n".join(f"# {r['src_host']} ({r['src_addr']}) -> {r['dst_host']} ({r['dst_addr']}) over "
                     f"{r['dst_iface']}: {r['error']}" for r in rows if r.get("error"))


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


def pair_figures(m, hosts: list[str]) -> dict[tuple[str, str], float]:
    """Each measured pair's figure: its slower direction. Pairs never measured (a run cut short)
    are left out, never taken for slow ones."""
    n = len(hosts)
    return {(hosts[a], hosts[b]): min(vals) for a in range(n) for b in range(a + 1, n)
            if (vals := [v for v in (m[a][b], m[b][a]) if v is not None])}


def classify(m, hosts: list[str], margin: float) -> dict:
    """Slow hosts (slow with every peer) apart from slow links (slow with one peer only), by the
    project's one rule for that question, :func:`ccdiag.core.outliers.classify`: each pair's figure is its
    slower direction, the reference is the median of the hosts' own median pair bandwidths (one bad
    host cannot drag it down), and a pair below ``1 - margin`` of it is slow.

    Where that rule differs from a plain "every pair of this host is slow": a host is named only when
    at least one pair without it is fine, so when every pair is slow no host is singled out and the
    pairs stay slow links; the absolute judgement against each path's line rate
    (:func:`ccdiag.cluster.capability.judge`, its whole-fabric finding) is what covers that case.
    Fewer than three measured hosts, or a reference of nothing, cannot be compared:
    ``reference_gbyte_s`` is None then and :func:`findings` says UNKNOWN."""
    res = outliers.classify(pair_figures(m, hosts), fraction=1 - margin)
    idx = {h: i for i, h in enumerate(hosts)}
    links = [{"a": a, "b": b, "a_to_b_gbyte_s": m[idx[a]][idx[b]], "b_to_a_gbyte_s": m[idx[b]][idx[a]]}
             for a, b in res.slow_pairs]
    return {"reference_gbyte_s": res.reference, "floor_gbyte_s": res.floor,
            "host_median_gbyte_s": dict(res.member_medians),
            "slow_hosts": sorted(res.slow_members, key=idx.__getitem__), "slow_links": links}


def findings(cls: dict, hosts: list[str], iface: str, margin: float) -> list[Finding]:
    ref, floor = cls["reference_gbyte_s"], cls["floor_gbyte_s"]
    if ref is None:
        return [Finding(check="cluster.pairs", status=UNKNOWN, component=Component(kind="node", name="all hosts"),
                        summary=(f"no fleet reference over {iface}: fewer than three of {len(hosts)} hosts have a "
                                 "measured pair, or every measured pair carried nothing, so a slow host cannot be "
                                 "told from a slow link"),
                        remedy="measure at least three hosts; a transfer that failed is listed with the matrix")]
    out = []
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


def run(size_bytes: int, iters: int, warmup: int, budget_s: float, as_json: bool, hostfile_out: str | None,
        margin: float, only_ifaces: list[str] | None = None, line_rate_gbit_s: float | None = None) -> int:
    """``ccdiag bench pairs``: MPI's own matrix, then one TCP matrix per candidate subnet, each with
    its own slow host / slow link analysis, every figure also held to its path's line rate; the
    report is :mod:`ccdiag.cluster.pairs_report`'s."""
    from ccdiag.cluster.pairs_report import PairsReport
    from ccdiag.cluster.runner import run_ranks

    def body(comm, work, ident):
        return measure(comm, ident, size_bytes, iters, warmup, work, per_iface=True, only_ifaces=only_ifaces,
                       margin=margin)

    rep = PairsReport(size_bytes=size_bytes, margin=margin, as_json=as_json, hostfile_out=hostfile_out,
                      only_ifaces=list(only_ifaces or []), line_rate_gbit_s=line_rate_gbit_s, budget_s=budget_s)
    return run_ranks(budget_s, body, rep.report)
