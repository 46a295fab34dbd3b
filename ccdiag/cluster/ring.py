"""ccdiag's own allreduce (ring, and halving-doubling for comparison) and the size sweep.

Why our own ring when MPI and NCCL have one: a library collective reports one number, but the ring
moves every chunk over every hop, so timing each hop of *our* ring says which link holds the whole
ring back. The same run measures the library's MPI_Allreduce (and NCCL where ranks have GPUs) on
the same buffers, so ccdiag's figure is reported as a ratio of the reference, not in a vacuum.

The ring: reduce-scatter then allgather, N-1 steps each, every chunk cut in segments and
pipelined: a received segment is reduced (``np.add(..., out=)``) and forwarded at once, while the
rest of the step is still on the wire. Transfers are Isend/Irecv on contiguous views; every wait
has the run's deadline (:func:`ccdiag.cluster.mpictx.wait_one`). Bus bandwidth follows
nccl-tests' definition for allreduce: ``busbw = algbw * 2(N-1)/N`` (doc/PERFORMANCE.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ccdiag.cluster.mpictx import Deadline, load_numpy, wait_all, wait_one

#: tag base of the ring's point-to-point messages; segment j of a step uses TAG_RING + j
TAG_RING = 1000
TAG_RAB = 3000
DEFAULT_SEGMENT_BYTES = 1 << 20


def bus_factor(n: int) -> float:
    """nccl-tests' allreduce bus-bandwidth factor, 2(N-1)/N."""
    return 2.0 * (n - 1) / n if n > 1 else 1.0


def sweep_sizes(begin_bytes: int, end_bytes: int, factor: int) -> list[int]:
    """nccl-tests' -b/-e/-f: begin, end, multiplied by ``factor`` each time (>= 2)."""
    if begin_bytes <= 0 or end_bytes < begin_bytes:
        raise ValueError("sizes: need 0 < begin <= end")
    if factor < 2:
        raise ValueError("sizes: the factor must be at least 2")
    out, size = [], begin_bytes
    while size <= end_bytes:
        out.append(size)
        size *= factor
    return out


def parse_size(text: str) -> int:
    """'64K', '16M', '1G', '4096' -> bytes (binary multiples, like nccl-tests)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMG" else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (examples: 8K, 16M, 1G)") from None
    if value <= 0:
        raise ValueError(f"not a positive size: {text!r}")
    return value


def chunk_bounds(count: int, n: int) -> list[tuple[int, int]]:
    """``n`` contiguous chunks of ``count`` elements, sizes differing by at most one."""
    base, extra = divmod(count, n)
    out, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def seg_bounds(start: int, stop: int, nseg: int) -> list[tuple[int, int]]:
    return [(start + a, start + b) for a, b in chunk_bounds(stop - start, nseg)]


@dataclass
class StepTimes:
    """One ring allreduce on one rank: when each step's last segment arrived, seconds after start."""

    recv_done_s: list[float] = field(default_factory=list)
    send_done_s: float = 0.0
    recv_bytes: list[int] = field(default_factory=list)


def ring_allreduce(comm, buf, tmp, deadline: Deadline, seg_elems: int, xp=None, times: StepTimes | None = None):
    """Sum ``buf`` across ``comm`` in place by ring. ``tmp``: scratch of at least 2 x the largest
    chunk. ``xp``: the array module (numpy or cupy) whose ``add`` reduces."""
    n, r = comm.size, comm.rank
    if n == 1:
        return
    xp = xp or load_numpy()
    right, left = (r + 1) % n, (r - 1) % n
    bounds = chunk_bounds(buf.shape[0], n)
    maxchunk = max(b - a for a, b in bounds)
    nseg = max(1, -(-maxchunk // max(1, seg_elems)))
    segs = [seg_bounds(a, b, nseg) for a, b in bounds]
    t0 = time.perf_counter()
    sends: list = []
    # reduce-scatter: step s sends chunk r-s and receives chunk r-s-1, which it reduces and
    # forwards as step s+1's send; receive slots alternate between two halves of tmp
    recvs = []
    cr = (r - 1) % n
    for j, (a, b) in enumerate(segs[cr]):
        recvs.append(comm.Irecv(tmp[a - bounds[cr][0]:b - bounds[cr][0]], source=left, tag=TAG_RING + j))
    for j, (a, b) in enumerate(segs[r]):
        sends.append(comm.Isend(buf[a:b], dest=right, tag=TAG_RING + j))
    steps = 2 * (n - 1)
    for s in range(steps):
        reduce = s < n - 1
        cr = (r - s - 1) % n if reduce else (r - (s - (n - 1))) % n
        base = bounds[cr][0]
        slot = (s % 2) * maxchunk
        nxt = []
        last = s == steps - 1
        if s == n - 2 and sends:
            # the allgather receives into buf: the sends still reading it must be done first
            # (they are, in practice: the ring moved on only because they arrived)
            wait_all(sends, [right] * len(sends), deadline, "ring send")
            sends = []
        for j, (a, b) in enumerate(segs[cr]):
            wait_one(recvs[j], left, deadline, "ring reduce-scatter" if reduce else "ring allgather")
            if reduce:
                np_seg = buf[a:b]
                xp.add(np_seg, tmp[slot + a - base:slot + b - base], out=np_seg)
            if last:
                continue
            # what arrives in step s is sent on in step s+1 (the owned chunk starts the allgather)
            if s + 1 < n - 1:
                ncr = (r - s - 2) % n
                nslot = ((s + 1) % 2) * maxchunk
                na, nb = segs[ncr][j]
                nxt.append(comm.Irecv(tmp[nslot + na - bounds[ncr][0]:nslot + nb - bounds[ncr][0]],
                                      source=left, tag=TAG_RING + j))
            else:
                ncr = (r - (s + 1 - (n - 1))) % n
                na, nb = segs[ncr][j]
                nxt.append(comm.Irecv(buf[na:nb], source=left, tag=TAG_RING + j))
            sends.append(comm.Isend(buf[a:b], dest=right, tag=TAG_RING + j))
        if times is not None:
            times.recv_done_s.append(time.perf_counter() - t0)
            times.recv_bytes.append((bounds[cr][1] - bounds[cr][0]) * buf.itemsize)
        recvs = nxt
    wait_all(sends, [right] * len(sends), deadline, "ring send")
    if times is not None:
        times.send_done_s = time.perf_counter() - t0


def ring_first_step(comm, buf, tmp, deadline: Deadline, seg_elems: int) -> float:
    """The ring's first reduce-scatter step on its own: every rank sends its chunk to the right
    and receives the left one's, all links at once and independent of each other. Returns the
    seconds until the last segment arrived; the per-hop table is built from this."""
    n, r = comm.size, comm.rank
    right, left = (r + 1) % n, (r - 1) % n
    bounds = chunk_bounds(buf.shape[0], n)
    maxchunk = max(b - a for a, b in bounds)
    nseg = max(1, -(-maxchunk // max(1, seg_elems)))
    cr = (r - 1) % n
    base = bounds[cr][0]
    t0 = time.perf_counter()
    (recv_lo, recv_hi), (send_lo, send_hi) = bounds[cr], bounds[r]
    recvs = [comm.Irecv(tmp[a - base:b - base], source=left, tag=TAG_RING + j)
             for j, (a, b) in enumerate(seg_bounds(recv_lo, recv_hi, nseg))]
    sends = [comm.Isend(buf[a:b], dest=right, tag=TAG_RING + j)
             for j, (a, b) in enumerate(seg_bounds(send_lo, send_hi, nseg))]
    wait_all(recvs, [left] * len(recvs), deadline, "ring hop timing")
    took = time.perf_counter() - t0
    wait_all(sends, [right] * len(sends), deadline, "ring hop timing")
    return took


def rabenseifner_allreduce(comm, buf, tmp, deadline: Deadline, xp=None):
    """Halving-doubling (Rabenseifner): recursive-halving reduce-scatter, recursive-doubling
    allgather; lg N steps each. A non-power-of-two N first folds the extra ranks into their
    neighbours (MPICH's scheme), who send them the result at the end."""
    n, r = comm.size, comm.rank
    if n == 1:
        return
    xp = xp or load_numpy()
    count = buf.shape[0]
    p2 = 1
    while p2 * 2 <= n:
        p2 *= 2
    rem = n - p2
    stage = "halving-doubling"
    # fold: among the first 2*rem ranks, even ranks give their data to the odd rank above
    if r < 2 * rem:
        if r % 2 == 0:
            wait_one(comm.Isend(buf, dest=r + 1, tag=TAG_RAB), r + 1, deadline, stage)
            newrank = -1
        else:
            wait_one(comm.Irecv(tmp[:count], source=r - 1, tag=TAG_RAB), r - 1, deadline, stage)
            xp.add(buf, tmp[:count], out=buf)
            newrank = r // 2
    else:
        newrank = r - rem

    def real(nr: int) -> int:
        return nr * 2 + 1 if nr < rem else nr + rem

    if newrank >= 0:
        lo, hi = 0, count
        history = []
        mask = p2 // 2
        while mask >= 1:
            partner = real(newrank ^ mask)
            mid = lo + (hi - lo) // 2
            if newrank & mask:
                keep, give = (mid, hi), (lo, mid)
            else:
                keep, give = (lo, mid), (mid, hi)
            klen = keep[1] - keep[0]
            rq = comm.Irecv(tmp[:klen], source=partner, tag=TAG_RAB + 1)
            sq = comm.Isend(buf[give[0]:give[1]], dest=partner, tag=TAG_RAB + 1)
            wait_all([rq, sq], [partner, partner], deadline, stage)
            seg = buf[keep[0]:keep[1]]
            xp.add(seg, tmp[:klen], out=seg)
            history.append((partner, (lo, hi), keep, give))
            lo, hi = keep
            mask //= 2
        for partner, _, keep, give in reversed(history):
            rq = comm.Irecv(buf[give[0]:give[1]], source=partner, tag=TAG_RAB + 2)
            sq = comm.Isend(buf[keep[0]:keep[1]], dest=partner, tag=TAG_RAB + 2)
            wait_all([rq, sq], [partner, partner], deadline, stage)
    if r < 2 * rem:
        if r % 2 == 0:
            wait_one(comm.Irecv(buf, source=r + 1, tag=TAG_RAB + 3), r + 1, deadline, stage)
        else:
            wait_one(comm.Isend(buf, dest=r - 1, tag=TAG_RAB + 3), r - 1, deadline, stage)


def fill_known(buf, rank: int, xp) -> None:
    """Values whose sum over ranks is exact in float32: (rank+1) * (i % 13 + 1)."""
    idx = xp.arange(buf.shape[0], dtype=xp.int64) % 13 + 1
    buf[:] = (idx * (rank + 1)).astype(buf.dtype)


def count_wrong(buf, n: int, xp) -> int:
    """Elements that differ from the known sum N(N+1)/2 * (i % 13 + 1)."""
    idx = xp.arange(buf.shape[0], dtype=xp.int64) % 13 + 1
    expected = (idx * (n * (n + 1) // 2)).astype(buf.dtype)
    return int((buf != expected).sum())
