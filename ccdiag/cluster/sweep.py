"""The allreduce size sweep (nccl-tests' -b/-e/-f) on every rank, and its table on rank 0.

Why one module drives all algorithms: the ring, halving-doubling and the references run on the
same buffers, sizes and iteration counts in one job, so their ratio compares algorithms and not
two different runs. Each size: one verified run (known values, exact float32 sums), warm-up,
then ``iters`` back-to-back timed runs; then a few barrier-aligned ring runs whose first step is
timed per hop (every link carries one chunk at the same time, so each hop's time is its own, see
:mod:`ccdiag.cluster.hops`). Rank 0 decides before each size whether the budget still holds it,
and every rank follows (one broadcast float, with a deadline).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ccdiag.cluster import ring
from ccdiag.cluster.mpictx import Deadline, DeadlineExpired, agree, barrier, load_mpi, load_numpy

ALGOS = ("ring", "halving-doubling", "MPI_Allreduce")
HOP_RUNS = 5
#: the per-hop timing moves at least this much per link, so a hop takes milliseconds, not the
#: tens of microseconds that scheduling noise and barrier skew are made of
HOP_MIN_CHUNK_BYTES = 4 << 20


@dataclass
class SweepConfig:
    sizes_bytes: list[int]
    iters: int = 20
    warmup: int = 3
    device: str = "host"  # host (NumPy) or gpu (CuPy)
    segment_bytes: int = ring.DEFAULT_SEGMENT_BYTES


def gpu_skip_reason() -> str | None:
    """Why GPU buffers (CuPy) cannot be used on this rank, or None."""
    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        return "CuPy is not installed (pip install '.[gpu]' in ccdiag's source tree)"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA GPU visible to this rank"
    except Exception as exc:  # noqa: BLE001 - no driver, no device
        return f"no usable CUDA GPU: {type(exc).__name__}: {exc}"
    return None


def _array_module(device: str):
    if device == "gpu":
        import cupy  # noqa: PLC0415

        return cupy
    return load_numpy()


def _nccl_comm(comm, xp):
    """A NCCL communicator over the same ranks (cupy.cuda.nccl), or (None, reason)."""
    try:
        from cupy.cuda import nccl  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        return None, f"cupy.cuda.nccl unavailable: {exc}"
    uid = nccl.get_unique_id() if comm.rank == 0 else None
    uid = comm.bcast(uid, root=0)
    return nccl.NcclCommunicator(comm.size, uid, comm.rank), None


def _time_loop(fn, iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / max(1, iters)


def run_sweep(comm, cfg: SweepConfig, deadline: Deadline, reserve_s: float, log=None, out: dict | None = None) -> dict:
    """Run the sweep on this rank; returns this rank's raw results (rank 0 merges them with
    :func:`merge`), filling ``out`` as it goes (so a watchdog can report what was done). Each size
    gets its share of what is left (the sizes left share it evenly); a wait that outlives it ends the
    sweep with what was measured and ``incomplete`` / ``waiting_on`` saying where it stopped."""
    out = out if out is not None else {}
    try:
        return _run_sweep(comm, cfg, deadline, reserve_s, log, out)
    except DeadlineExpired as exc:
        out["incomplete"] = str(exc)
        out["waiting_on"] = exc.waiting_on
        return out


def _run_sweep(comm, cfg: SweepConfig, deadline: Deadline, reserve_s: float, log, out: dict) -> dict:
    MPI = load_mpi()
    load_numpy()  # fails early, with its own message, where numpy is missing
    xp = _array_module(cfg.device)
    n, r = comm.size, comm.rank
    algos = list(ALGOS)
    nccl = None
    notes: list[str] = []
    if cfg.device == "gpu":
        nccl, why = _nccl_comm(comm, xp)
        if nccl is not None:
            algos.append("NCCL")
        else:
            notes.append(why)
    out.update({"rank": r, "sizes": {}, "skipped_sizes": [], "notes": notes})
    last_total_s = 0.0
    prev_size = 0
    whole = deadline
    for size_index, size in enumerate(cfg.sizes_bytes):
        # this size's share of what is left (less the reserve), in proportion to its bytes among the
        # sizes left, the hop timing at the end weighing a quarter of the largest: every wait of the
        # size ends by it
        weight = size / (sum(cfg.sizes_bytes[size_index:]) + cfg.sizes_bytes[-1] / 4)
        deadline = whole.sooner(max(0.0, whole.left_s() - reserve_s) * weight + reserve_s)
        # rank 0 predicts this size's time from the last one and stops the sweep when the budget
        # (less the reserve for the report) cannot hold it; every rank follows its word
        predicted = last_total_s * (size / prev_size) * 1.3 if prev_size else 0.0
        go = 1.0 if whole.left_s() - reserve_s > predicted else 0.0
        go = agree(comm, go, whole, f"sweep decision at {size} bytes")
        if not go:
            out["skipped_sizes"] = [s for s in cfg.sizes_bytes if s >= size]
            break
        t_size = time.perf_counter()
        count = max(n, size // 4)
        buf = xp.zeros(count, dtype=xp.float32)
        maxchunk = -(-count // n)
        tmp = xp.empty(max(2 * maxchunk, count), dtype=xp.float32)
        seg_elems = max(1, cfg.segment_bytes // 4)
        fns = {
            "ring": lambda: ring.ring_allreduce(comm, buf, tmp, deadline, seg_elems, xp),
            "halving-doubling": lambda: ring.rabenseifner_allreduce(comm, buf, tmp, deadline, xp),
            "MPI_Allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
        }
        if nccl is not None:
            from cupy.cuda import nccl as _nccl  # noqa: PLC0415

            stream = xp.cuda.Stream.null

            def _nccl_run():
                nccl.allReduce(buf.data.ptr, buf.data.ptr, count, _nccl.NCCL_FLOAT32, _nccl.NCCL_SUM, stream.ptr)
                stream.synchronize()

            fns["NCCL"] = _nccl_run
        res: dict = {"count": count}
        for algo in algos:
            fn = fns[algo]
            # verified run: known values, exact sums
            ring.fill_known(buf, r, xp)
            barrier(comm, deadline, f"{algo} {size} bytes")
            if algo == "ring":
                # the verified ring run also records each step's arrival (reported per rank)
                st = ring.StepTimes()
                ring.ring_allreduce(comm, buf, tmp, deadline, seg_elems, xp, times=st)
                res["ring_steps"] = {"recv_done_s": st.recv_done_s, "recv_bytes": st.recv_bytes,
                                     "send_done_s": st.send_done_s}
            else:
                fn()
            wrong = ring.count_wrong(buf, n, xp)
            buf.fill(0)
            for _ in range(cfg.warmup):
                fn()
            barrier(comm, deadline, f"{algo} {size} bytes")
            # iterations that fit this algorithm's share of what is left (agreed: every rank
            # must run the same number, or the collective never completes)
            probe_s = _time_loop(fn, 1)
            # (the size's own share, so the algorithms left of this size split it)
            slots_left = len(algos) - algos.index(algo)
            share_s = max(0.0, deadline.left_s() - reserve_s) / max(1, slots_left)
            iters = int(agree(comm, float(min(cfg.iters, max(1, int(share_s / max(probe_s, 1e-6))))), deadline,
                              f"{algo} {size} bytes"))
            barrier(comm, deadline, f"{algo} {size} bytes")
            res[algo] = {"time_s": _time_loop(fn, iters), "wrong": wrong, "iters": iters}
        out["sizes"][size] = res
        last_total_s = time.perf_counter() - t_size
        prev_size = size
        if log and r == 0:
            log(f"size {size} bytes done in {last_total_s:.2f} s")
        buf = tmp = None  # drop the arrays before the next size allocates (the lambdas above name them)
    if out["sizes"]:
        out["hops"] = _hop_timing(comm, xp, max(out["sizes"]), cfg, whole)
    return out


def _hop_timing(comm, xp, size: int, cfg: SweepConfig, deadline: Deadline) -> dict:
    """The ring's first step alone, barrier-aligned, HOP_RUNS times at the largest size done (at
    least HOP_MIN_CHUNK_BYTES per link); the fastest run per hop, since noise only adds time and
    a slow link is slow every time."""
    n = comm.size
    count = max(size // 4, n * HOP_MIN_CHUNK_BYTES // 4)
    buf = xp.ones(count, dtype=xp.float32)
    tmp = xp.empty(-(-count // n), dtype=xp.float32)
    seg_elems = max(1, cfg.segment_bytes // 4)
    runs = []
    for _ in range(HOP_RUNS):
        barrier(comm, deadline, "ring hop timing")
        runs.append(ring.ring_first_step(comm, buf, tmp, deadline, seg_elems))
    left = (comm.rank - 1) % n
    bounds = ring.chunk_bounds(count, n)
    return {"size_bytes": count * 4, "bytes": (bounds[left][1] - bounds[left][0]) * 4, "runs_s": runs}


def merge(per_rank: dict[int, dict], n: int) -> list[dict]:
    """Rows of the table: per size and algorithm the slowest rank's mean time (the collective
    ends when its last rank does), algbw, busbw, wrong elements, and ring/reference ratios."""
    sizes = sorted({s for d in per_rank.values() for s in d.get("sizes", {})})
    rows = []
    factor = ring.bus_factor(n)
    for size in sizes:
        row = {"size_bytes": size, "count": None, "algos": {}}
        for d in per_rank.values():
            res = d.get("sizes", {}).get(size)
            if not res:
                continue
            row["count"] = res["count"]
            for algo, v in res.items():
                if not isinstance(v, dict) or "time_s" not in v:
                    continue
                a = row["algos"].setdefault(algo, {"time_s": 0.0, "wrong": 0, "iters": v.get("iters")})
                a["time_s"] = max(a["time_s"], v["time_s"])
                a["wrong"] += v["wrong"]
        for algo, a in row["algos"].items():
            t = a["time_s"]
            a["algbw_gbyte_s"] = size / t / 1e9 if t > 0 else 0.0
            a["busbw_gbyte_s"] = a["algbw_gbyte_s"] * factor
        ringbw = row["algos"].get("ring", {}).get("busbw_gbyte_s")
        row["ring_ratio"] = {}
        for ref in ("MPI_Allreduce", "NCCL", "halving-doubling"):
            refbw = row["algos"].get(ref, {}).get("busbw_gbyte_s")
            if ringbw is not None and refbw:
                row["ring_ratio"][ref] = ringbw / refbw
        rows.append(row)
    return rows


def format_table(rows: list[dict], n: int) -> str:
    """nccl-tests' table layout: size, count, type, then time/algbw/busbw per algorithm."""
    algos = [a for a in ("ring", "halving-doubling", "MPI_Allreduce", "NCCL")
             if any(a in r["algos"] for r in rows)]
    short = {"ring": "ring", "halving-doubling": "halv-dbl", "MPI_Allreduce": "MPI", "NCCL": "NCCL"}
    head1 = f"#{'':>12} {'':>11} {'':>6} " + " ".join(f"{short[a] + ' (sum)':^26}" for a in algos)
    head2 = (f"#{'size':>12} {'count':>11} {'type':>6} "
             + " ".join(f"{'time':>8} {'algbw':>8} {'busbw':>8}" for _ in algos)
             + f" {'#wrong':>6} {'ring/MPI':>8}")
    head3 = (f"#{'(B)':>12} {'(elements)':>11} {'':>6} "
             + " ".join(f"{'(us)':>8} {'(GB/s)':>8} {'(GB/s)':>8}" for _ in algos) + f" {'':>6} {'':>8}")
    lines = [f"# allreduce over {n} ranks; busbw = algbw x 2(n-1)/n (nccl-tests)", head1, head2, head3]
    for r in rows:
        cells = []
        wrong = 0
        for a in algos:
            v = r["algos"].get(a)
            if v is None:
                cells.append(f"{'-':>8} {'-':>8} {'-':>8}")
                continue
            wrong += v["wrong"]
            cells.append(f"{v['time_s'] * 1e6:8.1f} {v['algbw_gbyte_s']:8.3f} {v['busbw_gbyte_s']:8.3f}")
        ratio = r["ring_ratio"].get("MPI_Allreduce")
        lines.append(f" {r['size_bytes']:>12} {r['count']:>11} {'float':>6} " + " ".join(cells)
                     + f" {wrong:>6} {ratio if ratio is None else f'{ratio:8.2f}':>8}")
    return "\n".join(lines)


def hop_records(per_rank: dict[int, dict]) -> tuple[int | None, dict[int, dict]]:
    """Per receiving rank: bytes of the ring's first step and its fastest time."""
    out, size = {}, None
    for rank, d in per_rank.items():
        h = d.get("hops")
        if not h or not h.get("runs_s"):
            continue
        size = h["size_bytes"]
        out[rank] = {"bytes": h["bytes"], "step0_s": min(h["runs_s"]), "runs_s": h["runs_s"]}
    return size, out
