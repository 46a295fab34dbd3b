"""Before the allreduce sweep: does every hop of the ring carry a small message and a large one?

Why: a ring allreduce moves every chunk over every hop and waits for each; one hop that black-holes
large frames (an MTU mismatch on a switch port, a tunnel) lets the small messages of MPI's set-up
through and then holds the ring, and the library's own ``MPI_Allreduce`` with it, until the budget
is gone: no table, no finding, at best "all alive but slow". So each rank first sends its right
neighbour a :data:`~ccdiag.cluster.transfers.SMALL_BYTES` message, then a
:data:`~ccdiag.cluster.pairs.PROBE_BYTES` one, each within :func:`share_s` of the budget. Rank 0
gathers what arrived, and the sweep runs only when every hop carried both; otherwise the report
names the hops (or the host both of whose hops failed) with what arrived, and the sweep is left out.
"""

from __future__ import annotations

import time

from ccdiag.cluster.mpictx import Deadline, DeadlineExpired, Outstanding, bcast_obj, gather_to_root, load_numpy, wait_one
from ccdiag.cluster.transfers import SMALL_BYTES

#: the large message: needs full-size frames on any MTU up to 9000, takes a millisecond at 1 GB/s
LARGE_BYTES = 1 << 20
TAG_SMALL = 80000
TAG_LARGE = 80001
TAG_GATHER = 80004
TAG_GO = 80005
#: of the work's time, what the check may use at most (and at least :data:`MIN_SHARE_S`)
SHARE = 0.15
MIN_SHARE_S = 2.0


def share_s(work_s: float) -> float:
    """Seconds for each of the two messages of the check."""
    return max(MIN_SHARE_S, SHARE * work_s) / 2


def _one(comm, left: int, right: int, nbytes: int, tag: int, dl: Deadline, bufs) -> tuple[bool, bool, float | None]:
    """(received from the left in time, sent to the right in time, seconds the receive took)."""
    sbuf, rbuf = bufs
    count = max(1, nbytes // 4)
    got = sent = False
    took = None
    with Outstanding() as live:
        t0 = time.perf_counter()
        rq = live.add(comm.Irecv(rbuf[:count], source=left, tag=tag))
        sq = live.add(comm.Isend(sbuf[:count], dest=right, tag=tag))
        try:
            wait_one(rq, left, dl, "ring hop check")
            got, took = True, time.perf_counter() - t0
        except DeadlineExpired:
            pass
        try:
            wait_one(sq, right, dl, "ring hop check")
            sent = True
        except DeadlineExpired:
            pass
    return got, sent, took


def run(comm, work: Deadline) -> tuple[dict, dict | None, bool]:
    """This rank's check (``small_in``, ``large_in``, ``small_out``, ``large_out``, ``share_s``),
    rank 0's gather of every rank's (None elsewhere), and whether the sweep goes on (every hop
    carried both messages; a rank that hears nothing from rank 0 does not go on)."""
    np = load_numpy()
    n, r = comm.size, comm.rank
    left, right = (r - 1) % n, (r + 1) % n
    bufs = (np.ones(LARGE_BYTES // 4, dtype=np.float32), np.empty(LARGE_BYTES // 4, dtype=np.float32))
    each = share_s(max(0.0, work.left_s()))
    mine: dict = {"rank": r, "left": left, "right": right, "share_s": round(each, 3)}
    small_in, small_out, _ = _one(comm, left, right, SMALL_BYTES, TAG_SMALL, work.sooner(each), bufs)
    large_in = large_out = False
    took = None
    if small_in and small_out:
        large_in, large_out, took = _one(comm, left, right, LARGE_BYTES, TAG_LARGE, work.sooner(each), bufs)
    mine.update(small_in=small_in, small_out=small_out, large_in=large_in, large_out=large_out,
                large_in_gbyte_s=(LARGE_BYTES / took / 1e9) if took else None)
    # long enough for a rank that waited its whole share on a message that never came
    got = gather_to_root(comm, mine, work.sooner(2 * each), TAG_GATHER)
    every = None
    go = False
    if comm.rank == 0:
        assert got is not None
        every = {k: v for k, v in got.objs.items() if isinstance(v, dict)}
        go = not got.missing and all(v.get("large_in") and v.get("large_out") for v in every.values())
    try:
        go = bool(bcast_obj(comm, go, work.sooner(each), "ring hop check", TAG_GO))
    except DeadlineExpired:
        go = False  # rank 0 could not tell every rank: none may start a ring some would not join
    return mine, every, go


def failed_hops(every: dict[int, dict], hosts: dict[int, str], n: int) -> tuple[dict, set]:
    """From rank 0's gather: the failed directions between hosts (``(src host, dst host)`` ->
    ``{"small_ok", "bytes", "share_s", "stage"}``) and the hops that carried both messages, in
    :func:`ccdiag.cluster.transfers.findings`' terms. A hop is known from its receiver, or, when the
    receiver never answered (its answer queues behind the transfer that is stuck), from its sender."""
    failed: dict = {}
    ok: set = set()
    for dst in range(n):
        src = (dst - 1) % n
        a, b = hosts.get(src, f"rank {src}"), hosts.get(dst, f"rank {dst}")
        if a == b:
            continue
        rx, tx = every.get(dst), every.get(src)
        if rx is None:
            # the receiver never reported (its answer did not come: held up by what it waited for);
            # its sender's "sent" only says MPI took the data, not that it arrived
            failed[(a, b)] = {"small_ok": None, "bytes": LARGE_BYTES, "share_s": (tx or {}).get("share_s"),
                              "stage": "the receiver never reported its check", "src_rank": src, "dst_rank": dst,
                              "receiver_reported": False}
            continue
        small, large = rx.get("small_in"), rx.get("large_in")
        if tx is not None and not (tx.get("small_out") and tx.get("large_out")):
            small, large = small and tx.get("small_out"), large and tx.get("large_out")
        share = rx.get("share_s")
        if small and large:
            ok.add((a, b))
        else:
            failed[(a, b)] = {"small_ok": bool(small), "bytes": LARGE_BYTES if small else SMALL_BYTES,
                              "share_s": share, "stage": (f"a {LARGE_BYTES}-byte message" if small
                                                          else f"a {SMALL_BYTES}-byte message"),
                              "src_rank": src, "dst_rank": dst, "receiver_reported": rx is not None}
    return failed, ok
