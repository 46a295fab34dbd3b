"""``ccdiag bench locate`` on MPI ranks: the transport of :mod:`.locate`, one round of rings at a time.

Every round: rank 0 (which holds the :class:`~ccdiag.cluster.locate.Locator`) sends every rank the
rings to run (host indices in ring order); the leader rank of each host in a ring runs that ring
with ccdiag's own ring code (:func:`ccdiag.cluster.ring.ring_first_step` for the per-hop timing,
both ways round, the fastest of ``runs`` each; then one :func:`ccdiag.cluster.ring.ring_allreduce`
on known values, timed and checked, for the ring's bus bandwidth) through :class:`RingView`, which
lets those functions address the ring's members as ranks 0..n-1 of the world communicator. Every
rank, in a ring or not, passes the same barriers (through rank 0, :func:`barrier`), so all the
round's rings run at the same time (the load a ring across leaves is meant to put on the uplinks);
each run has its share of the budget, and a hop that does not arrive in it is cut, counted at most
its bytes over that time. Rank 0 gathers each leader's
figures, records them and plans the next round; every wait has the run's deadline.

Why a view and not ``comm.Split``: a split is a blocking collective with no deadline, and a rank
that stopped answering would hang every other one in it.
"""

from __future__ import annotations

import os
import time

from ccdiag.cluster import ring
from ccdiag.cluster.mpictx import Deadline, DeadlineExpired, bcast_obj, gather_to_root, load_numpy

TAG_SETUP = 50000
TAG_PLAN = 50001
TAG_ROUND = 50002
TAG_STEP_IN = 50003
TAG_STEP_OUT = 50004
#: the most memory one ring's buffer may take on a rank (a ring of n hosts holds n chunks)
MAX_BUFFER_BYTES = 256 << 20
#: what launchers set to this process's rank, read before MPI starts
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launcher_rank(env: dict | None = None) -> int | None:
    """This process's rank as the launcher set it (before MPI starts), or None."""
    where = dict(os.environ) if env is None else env
    for var in RANK_VARS:
        try:
            return int(where[var])
        except (KeyError, ValueError):
            continue
    return None


class RingView:
    """The world communicator seen by one ring: ``rank`` and ``size`` within the ring, and
    ``Isend``/``Irecv`` whose peers are ring positions, mapped to the world ranks of ``members``.
    ``tag_offset`` keeps one round's messages apart from another's: a hop cut short by its deadline
    leaves its message on the way, and the next round between the same two hosts must not take it."""

    def __init__(self, comm, members: list[int], tag_offset: int = 0):
        self.comm = comm
        self.members = list(members)
        self.size = len(members)
        self.rank = self.members.index(comm.rank)
        self.tag_offset = tag_offset

    def Isend(self, buf, dest: int, tag: int):  # noqa: N802 - the MPI name the ring code calls
        return self.comm.Isend(buf, dest=self.members[dest], tag=tag + self.tag_offset)

    def Irecv(self, buf, source: int, tag: int):  # noqa: N802
        return self.comm.Irecv(buf, source=self.members[source], tag=tag + self.tag_offset)


#: the ring's segments per chunk are capped, so one round's tags (TAG_RING + segment) stay below the
#: next round's offset; offsets repeat every TAG_ROUNDS rounds, all below MPI's smallest tag bound
MAX_SEGMENTS = 1000
TAG_STRIDE = 2048
TAG_ROUNDS = 14


def barrier(comm, work: Deadline, stage: str) -> None:
    """Every rank at the same step, through rank 0 alone (each sends it a word, it answers all).

    Why not MPI's barrier: its messages travel between many pairs of ranks, and a path that swallows
    data (a black-holed link, a port dropping large frames) stalls every message queued on it behind
    the stuck transfer; then no round could start again and nothing would be named. Here only the
    rings' own messages cross between hosts, so a broken path cuts the hops that use it, and the
    search goes on around it."""
    got = gather_to_root(comm, 1, work, TAG_STEP_IN)
    if comm.rank != 0:
        bcast_obj(comm, None, work, stage, TAG_STEP_OUT)
        return
    if got is not None and got.missing:
        raise DeadlineExpired(stage, got.missing, work.budget_s)
    # rank 0 sends the word and goes on without waiting for each send to complete: a send queued
    # behind a slow transfer to one host would start rank 0's own hops late, and its neighbours'
    # figures would carry that wait
    _RELEASES[:] = [q for q in _RELEASES if not q.Test()]
    _RELEASES.extend(comm.isend(1, dest=r, tag=TAG_STEP_OUT) for r in range(1, comm.size))


#: rank 0's barrier sends still on their way (kept alive with their buffers until they complete)
_RELEASES: list = []


def _chunk_elems(size_bytes: int, n: int) -> int:
    per = min(size_bytes, MAX_BUFFER_BYTES // max(1, n))
    return max(1024, per // 4)


def _timed(fn, *args) -> tuple[float, bool]:
    """Seconds until this rank's part of ``fn`` arrived, and whether it did: ``fn``'s own answer when
    it returns one (the ring's hop step times its receive alone, not this rank's sends, which are the
    next host's hop), else the time it took. A step cut at its deadline took at least as long as it
    ran (the hop's rate was at most its bytes over that), and the run goes on."""
    t0 = time.perf_counter()
    try:
        got = fn(*args)
    except DeadlineExpired:
        return time.perf_counter() - t0, False
    return (got if isinstance(got, float) else time.perf_counter() - t0), True


def round_on_rank(comm, me: int | None, rings: list[list[int]], leaders: list[int], size_bytes: int,
                  runs: int, seg_bytes: int, work: Deadline, step_s: float, round_no: int = 0) -> dict:
    """This rank's part of one round: the same barriers on every rank; a host's leader in a ring
    measures it, each run within ``step_s``. ``me``: this rank's host index when it leads one.
    Returns ``{"hops": {(src, dst): GB/s}, "busbw": GB/s or None, "wrong": n, "cut": runs cut short}``
    (host indices)."""
    np = load_numpy()
    mine = next((r for r in rings if me is not None and me in r), None)
    out: dict = {"hops": {}, "busbw": None, "wrong": 0, "ring": mine, "cut": 0}
    stage = "locate round"
    if mine is None or me is None:
        for _ in range(2 * runs + 1):
            barrier(comm, work, stage)
        return out
    n = len(mine)
    chunk = _chunk_elems(size_bytes, n)
    buf = np.ones(n * chunk, dtype=np.float32)
    tmp = np.empty(2 * chunk, dtype=np.float32)
    seg = max(1, seg_bytes // 4, -(-chunk // MAX_SEGMENTS))
    offset = TAG_STRIDE * (round_no % TAG_ROUNDS)
    for order in (mine, mine[::-1]):
        view = RingView(comm, [leaders[h] for h in order], offset)
        left = order[(order.index(me) - 1) % n]
        fastest = None
        for _ in range(runs):
            barrier(comm, work, stage)
            took, done = _timed(ring.ring_first_step, view, buf, tmp, work.sooner(step_s), seg)
            out["cut"] += not done
            fastest = took if fastest is None else min(fastest, took)
        into = chunk * 4 / max(fastest or 1e-9, 1e-9) / 1e9
        key = (left, me)
        out["hops"][key] = max(into, out["hops"].get(key, 0.0))
    view = RingView(comm, [leaders[h] for h in mine], offset + TAG_STRIDE // 2)
    ring.fill_known(buf, view.rank, np)
    barrier(comm, work, stage)
    took, done = _timed(ring.ring_allreduce, view, buf, tmp, work.sooner(step_s), seg, np)
    if done:
        if not out["cut"]:  # a cut run's message may still land in the scratch buffer: no sum to check then
            out["wrong"] = ring.count_wrong(buf, n, np)
        out["busbw"] = buf.nbytes / max(took, 1e-9) / 1e9 * ring.bus_factor(n)
    else:
        out["cut"] += 1
    return out


def _set_up(comm, ident: dict, work: Deadline, nvml: bool) -> dict:
    """Rank 0 learns every rank's host (and, with ``nvml``, its NVLink domain) and tells every
    rank the hosts in order of their first rank and each host's leader."""
    mine = {"host": ident.get("host", "?")}
    if nvml:
        mine["nvlink"] = _nvlink_domain()
    got = gather_to_root(comm, mine, work.sooner(max(1.0, work.left_s() / 4)), TAG_SETUP)
    plan = None
    if comm.rank == 0:
        assert got is not None  # the root holds every rank's answer
        if got.missing:
            raise DeadlineExpired("locate set-up", got.missing, work.budget_s)
        hosts: list[str] = []
        leaders: list[int] = []
        slots: dict[str, int] = {}
        domains: dict[str, tuple] = {}
        for r in sorted(got.objs):
            h = got.objs[r].get("host", "?")
            if h not in hosts:
                hosts.append(h)
                leaders.append(r)
                domains[h] = tuple(got.objs[r].get("nvlink") or (None, None))
            slots[h] = slots.get(h, 0) + 1
        plan = {"hosts": hosts, "leaders": leaders, "slots": slots, "nvlink": domains}
    return bcast_obj(comm, plan, work, "locate set-up", TAG_PLAN)


def _nvlink_domain() -> tuple[str | None, str | None]:
    """This host's NVLink domain from NVML (live), as :mod:`.layout_nvlink` reads it from a report."""
    try:
        from ccdiag.cluster.layout_nvlink import domain_of_gpus
        from ccdiag.core.probenames import PROBE_NVML
        from ccdiag.host.door import LiveHost
        from ccdiag.run.observe import observe

        obs = observe(LiveHost(), [PROBE_NVML], time.monotonic() + 20, close=True)
        run = obs.runs.get(PROBE_NVML)
        gpus = getattr(getattr(run, "data", None), "gpus", None)
        if gpus is None:
            return None, f"the nvml probe read nothing ({getattr(run, 'error', None) or 'no NVIDIA driver'})"
        return domain_of_gpus(list(gpus))
    except Exception as exc:  # noqa: BLE001 - no NVML on this host: it has no NVLink domain, said so
        return None, f"NVML: {type(exc).__name__}: {exc}"


def measure(comm, ident: dict, work: Deadline, cfg: dict) -> dict:
    """Every rank's body: set-up, then rounds until rank 0 says none is left. Rank 0's result holds
    the outcome; every rank's says where it stopped when a deadline passed."""
    the_plan = _set_up(comm, ident, work, cfg.get("layout") == ["nvml"])
    hosts, leaders = the_plan["hosts"], the_plan["leaders"]
    me = leaders.index(comm.rank) if comm.rank in leaders else None
    out: dict = {"host": ident.get("host"), "leader": me is not None}
    search = None
    if comm.rank == 0:
        search = _start_search(hosts, the_plan, cfg)
        out["search"] = search
    runs = cfg["runs"]
    k = 0
    try:
        while True:
            k += 1
            tests = None
            if search is not None:
                why = _out_of_time(work, search)
                if why:
                    search["locator"].stopped = why
                else:
                    tests = search["locator"].next_round()
            msg = None
            if search is not None and tests:
                idx = {h: i for i, h in enumerate(hosts)}
                msg = {"rings": [[idx[h] for h in t.hosts] for t in tests], "runs": search["runs"],
                       "step_s": _step_s(work, search)}
            msg = bcast_obj(comm, msg, work, f"locate round {k} plan", TAG_PLAN)
            if not msg:
                break
            t0 = time.monotonic()
            res = round_on_rank(comm, me, msg["rings"], leaders, cfg["size_bytes"], msg["runs"], cfg["segment_bytes"],
                                work, msg["step_s"], k)
            got = gather_to_root(comm, res if me is not None else None, work, TAG_ROUND)
            if comm.rank == 0:
                assert got is not None and search is not None and tests is not None
                if got.missing:
                    raise DeadlineExpired(f"locate round {k}", got.missing, work.budget_s)
                results = _results(tests, got.objs, hosts)
                search["cut"] += sum(int((o or {}).get("cut") or 0) for o in got.objs.values())
                search["locator"].record(tests, results)
                search["round_s"].append(time.monotonic() - t0)
                search["runs"] = _runs_next(work, search, runs)
    except DeadlineExpired as exc:
        out["incomplete"] = str(exc)
        out["waiting_on"] = exc.waiting_on
    if search is not None:
        loc = search.pop("locator")
        out["outcome"] = loc.outcome()
        out["hosts"] = hosts
        out["slots"] = the_plan["slots"]
    return out


def _results(tests, objs: dict, hosts: list[str]):
    from ccdiag.cluster.locate import RingResult

    per_ring: dict[tuple, dict] = {}
    for o in objs.values():
        if not o or not o.get("ring"):
            continue
        key = tuple(o["ring"])
        r = per_ring.setdefault(key, {"hops": {}, "busbw": [], "wrong": 0})
        for (a, b), v in o["hops"].items():
            r["hops"][(hosts[a], hosts[b])] = v
        if o.get("busbw") is not None:
            r["busbw"].append(o["busbw"])
        r["wrong"] += int(o.get("wrong") or 0)
    idx = {h: i for i, h in enumerate(hosts)}
    out = []
    for t in tests:
        r = per_ring.get(tuple(idx[h] for h in t.hosts), {"hops": {}, "busbw": [], "wrong": 0})
        # the collective ends when its slowest member does: the ring's figure is the lowest
        out.append(RingResult(hosts=t.hosts, hops_gbyte_s=r["hops"], busbw_gbyte_s=min(r["busbw"]) if r["busbw"] else None,
                              wrong=r["wrong"]))
    return out


def _start_search(hosts: list[str], the_plan: dict, cfg: dict) -> dict:
    from ccdiag.cluster.layout import Layout, square_groups
    from ccdiag.cluster.locate import Locator

    layout = cfg.get("layout_obj")
    notes: list[str] = []
    if cfg.get("layout") == ["nvml"]:
        from ccdiag.cluster.layout_nvlink import from_domains

        per_host = {h: tuple(v) for h, v in the_plan["nvlink"].items()}
        if any(d for d, _ in per_host.values()):
            layout = from_domains(per_host, ("nvml (live, every rank)",))
        else:
            notes.append("no host has an NVLink domain id from NVML: "
                         + next((n for _, n in per_host.values() if n), "no GPU data"))
    if isinstance(layout, Layout):
        placement = layout.place(hosts)
        groups = placement.screening_groups()
        names = [g.name for g in placement.groups] + (["(not in the layout)"] if placement.unplaced else [])
        fabric = True
    else:
        placement = None
        groups = square_groups(hosts)
        names = [f"ranks {hosts.index(g[0])}-{hosts.index(g[-1])}" for g in groups]
        fabric = False
    loc = Locator(hosts, groups, margin=cfg["margin"], max_tests=cfg.get("max_tests"), fabric_groups=fabric)
    loc.group_names = names if len(names) == len(groups) else [f"group {i + 1}" for i in range(len(groups))]
    return {"locator": loc, "layout": layout, "placement": placement, "groups": groups, "notes": notes,
            "group_names": loc.group_names, "runs": cfg["runs"], "round_s": [], "cut": 0}


#: rounds a search is planned for when its time is shared out (screens, confirmations, a margin)
ROUNDS_PLANNED = 10


def _step_s(work: Deadline, search: dict) -> float:
    """The seconds one run of a round may take: what is left shared over the rounds still planned and
    each round's runs (both ways round, and the allreduce). A hop that does not arrive within it is
    cut: its figure is then at most its bytes over that time, low enough to make it a suspect."""
    rounds_left = max(3, ROUNDS_PLANNED - len(search["round_s"]))
    return max(0.5, work.left_s() / rounds_left / (2 * search["runs"] + 2))


def _out_of_time(work: Deadline, search: dict) -> str | None:
    """Why no round should start now: the last round took longer than what is left."""
    last = search["round_s"][-1] if search["round_s"] else 0.0
    if search["round_s"] and work.left_s() < 1.5 * last:
        return (f"the time budget ran out: {work.left_s():.1f} s left, the last round took {last:.1f} s; "
                f"give a larger --budget or a smaller --size")
    return None


def _runs_next(work: Deadline, search: dict, runs: int) -> int:
    """Timed runs per direction for the next round: the requested count while the budget holds
    the planned rounds at the pace so far, fewer (at least one) when it does not."""
    done = len(search["round_s"])
    per_run = search["round_s"][-1] / max(1, 2 * search["runs"] + 1)
    left_rounds = max(1, ROUNDS_PLANNED - done)
    fit = int(work.left_s() / left_rounds / max(per_run, 1e-6) - 1) // 2
    return max(1, min(runs, fit))


def run(cfg: dict) -> int:
    """``ccdiag bench locate``: the ranks' bodies, then rank 0's report."""
    from ccdiag.cluster.locate_report import LocateReport
    from ccdiag.cluster.runner import run_ranks

    def body(comm, work, ident):
        return measure(comm, ident, work, cfg)

    rep = LocateReport(cfg)
    return run_ranks(cfg["budget_s"], body, rep.report)
