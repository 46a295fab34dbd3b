"""The MPI side of every cluster command: lazy import, deadlines, waits and gathers that end.

Why: a rank that dies, hangs (SIGSTOP) or loses its interface must never leave the job hanging in
a blocking collective. So every wait here polls nonblocking requests against a deadline
(:class:`Deadline`); a wait that runs out raises :class:`DeadlineExpired` naming what it waited
for. :func:`gather_to_root` collects one Python object per rank with a deadline and says which
ranks never answered; :func:`finish` is the single exit path: rank 0 prints its report *first*,
then calls ``comm.Abort`` only when some rank did not answer (MPI_Finalize would wait for it).
A :class:`Watchdog` thread is the backstop for the one blocking call kept on purpose (the MPI
library's own ``MPI_Allreduce``, the reference being measured).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ccdiag.core.errors import NotEvaluated

#: tags of ccdiag's own point-to-point messages (collectives of the benchmark use their own)
TAG_GATHER = 7101
TAG_VERDICT = 7102


def load_mpi():
    """mpi4py's ``MPI`` module, or a one-line NotEvaluated (exit 3) saying how to get it."""
    try:
        from mpi4py import MPI  # noqa: PLC0415 - imported only where needed, on purpose
    except ImportError as exc:
        raise NotEvaluated(f"mpi4py is not installed ({exc}); install it with `pip install '.[mpi]'` in ccdiag's source tree "
                           f"and run under mpirun or srun") from None
    except Exception as exc:  # noqa: BLE001 - a broken MPI library fails at import/init
        raise NotEvaluated(f"MPI could not start: {type(exc).__name__}: {exc}") from None
    return MPI


def load_numpy():
    try:
        import numpy  # noqa: PLC0415
    except ImportError:
        raise NotEvaluated("numpy is not installed; install it with `pip install '.[mpi]'` in ccdiag's source tree") from None
    return numpy


class DeadlineExpired(Exception):
    """A wait ran past its deadline. ``waiting_on``: the peer ranks it waited for."""

    def __init__(self, stage: str, waiting_on: list[int], deadline_s: float):
        self.stage = stage
        self.waiting_on = sorted(set(waiting_on))
        self.deadline_s = deadline_s
        peers = ", ".join(f"rank {r}" for r in self.waiting_on) or "no peer"
        super().__init__(f"deadline passed in {stage} waiting on {peers}")


@dataclass
class Deadline:
    """An absolute end on the monotonic clock, shared by every wait of one run."""

    end: float
    budget_s: float

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(time.monotonic() + seconds, seconds)

    def left_s(self) -> float:
        return self.end - time.monotonic()

    def sooner(self, seconds: float) -> "Deadline":
        """This deadline or ``seconds`` from now, whichever comes first."""
        return Deadline(min(self.end, time.monotonic() + seconds), self.budget_s)


#: requests still pending when their deadline passed, with the buffers they reference (mpi4py's
#: request holds its buffer): kept for the life of the process, since MPI may still write into (or
#: read from) that memory. Freeing it is what made OpenMPI report ``readv ... Bad address`` after a
#: deadline. They are not cancelled: OpenMPI cannot cancel a send, and MPI_Cancel on a request to a
#: stopped peer was seen to block inside the library (holding the interpreter, so no watchdog ran).
_ABANDONED: list = []


def cancel_all(reqs: list) -> int:
    """Keep every request of ``reqs`` that has not completed (and so its buffer) alive until the
    process ends; returns how many. Call before leaving a function whose buffers would otherwise go
    while MPI still uses them."""
    pending = [r for r in reqs if r is not None and not _done(r)]
    _ABANDONED.extend(pending)
    return len(pending)


def _done(req) -> bool:
    try:
        return bool(req.Test())
    except Exception:  # noqa: BLE001 - a request in error is complete: MPI no longer uses its buffer
        return True


class Outstanding:
    """Every request a function posts, so that leaving it by an exception (a deadline) keeps the
    pending ones alive with their buffers (:func:`cancel_all`) instead of letting them go."""

    def __init__(self) -> None:
        self.reqs: list = []

    def add(self, req):
        self.reqs.append(req)
        return req

    def __enter__(self) -> "Outstanding":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            cancel_all(self.reqs)


def wait_all(reqs: list, peers: list[int], deadline: Deadline, stage: str) -> None:
    """Complete every request in ``reqs`` (``peers[i]`` is the rank ``reqs[i]`` talks to) or keep
    them (:func:`cancel_all`) and raise DeadlineExpired naming the peers still outstanding. Polls; yields the CPU while
    idle, which matters when ranks outnumber cores."""
    if not reqs:
        return
    MPI = load_mpi()
    if MPI.Request.Testall(reqs):
        return
    spins = 0
    while True:
        if MPI.Request.Testall(reqs):
            return
        spins += 1
        if spins & 63 == 0 and time.monotonic() >= deadline.end:
            pending = [p for r, p in zip(reqs, peers) if not r.Test()]
            if not pending:
                return
            cancel_all(reqs)
            raise DeadlineExpired(stage, pending, deadline.budget_s)
        os.sched_yield()


def wait_one(req, peer: int, deadline: Deadline, stage: str, keep: Any = None) -> None:
    """Complete one request or keep it (:func:`cancel_all`) and raise DeadlineExpired naming
    ``peer``. ``keep``: what else must outlive the request (a collective's buffer)."""
    if req.Test():
        return
    spins = 0
    while not req.Test():
        spins += 1
        if spins & 63 == 0 and time.monotonic() >= deadline.end:
            if keep is None:
                cancel_all([req])
            else:
                _ABANDONED.append((req, keep))
            raise DeadlineExpired(stage, [peer], deadline.budget_s)
        os.sched_yield()


def barrier(comm, deadline: Deadline, stage: str) -> None:
    """A barrier that ends at ``deadline`` (MPI_Ibarrier, polled). On expiry the ranks it waited
    for are not known to MPI: the caller's gather names them."""
    req = comm.Ibarrier()
    try:
        wait_one(req, -1, deadline, stage, keep=comm)
    except DeadlineExpired:
        raise DeadlineExpired(stage, [], deadline.budget_s) from None


def agree(comm, value: float, deadline: Deadline, stage: str) -> float:
    """Rank 0's ``value`` on every rank (MPI_Ibcast of one float, polled against the deadline)."""
    np = load_numpy()
    buf = np.array([value], dtype=np.float64)
    req = comm.Ibcast(buf, root=0)
    try:
        wait_one(req, 0, deadline, stage, keep=buf)
    except DeadlineExpired:
        raise DeadlineExpired(stage, [0] if comm.rank else [], deadline.budget_s) from None
    return float(buf[0])


@dataclass
class Gathered:
    """What rank 0 collected: one object per rank that answered, and the ranks that did not."""

    objs: dict[int, Any] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)


def gather_to_root(comm, obj: Any, deadline: Deadline, tag: int = TAG_GATHER) -> Gathered | None:
    """Every rank sends ``obj`` to rank 0, which collects them until ``deadline``.

    Rank 0 probes for whatever has arrived (``improbe``) instead of posting one blocking receive
    per rank, so a rank that never sends delays nothing past the deadline and is named in
    ``missing``. Returns the Gathered on rank 0, None elsewhere (a non-root rank waits for its send
    until the deadline and then gives up quietly: rank 0 may be the one that is gone)."""
    MPI = load_mpi()
    if comm.rank != 0:
        req = comm.isend(obj, dest=0, tag=tag)
        try:
            wait_one(req, 0, deadline, "gather")
        except DeadlineExpired:
            pass
        return None
    got = Gathered(objs={0: obj})
    status = MPI.Status()
    while len(got.objs) < comm.size and time.monotonic() < deadline.end:
        msg = comm.improbe(source=MPI.ANY_SOURCE, tag=tag, status=status)
        if msg is None:
            time.sleep(0.0005)
            continue
        src = status.Get_source()
        try:
            got.objs[src] = msg.recv()
        except Exception as exc:  # noqa: BLE001 - a rank that sent garbage is reported, not raised
            got.objs[src] = {"error": f"unreadable answer: {type(exc).__name__}: {exc}"}
    got.missing = [r for r in range(comm.size) if r not in got.objs]
    return got


def finish(comm, ok_to_finalize: bool, deadline: Deadline, code: int) -> None:
    """End the run on every rank without hanging.

    Rank 0 (after printing its report) tells every rank whether to finalize; when a rank did not
    answer, it calls ``comm.Abort(code)`` instead, since MPI_Finalize would wait for that rank.
    A non-root rank that hears nothing by the deadline aborts too (rank 0 is gone)."""
    MPI = load_mpi()
    sys.stdout.flush()
    sys.stderr.flush()
    if comm.rank == 0:
        if not ok_to_finalize:
            comm.Abort(code)
        reqs = [comm.isend(1, dest=r, tag=TAG_VERDICT) for r in range(1, comm.size)]
        try:
            wait_all(reqs, list(range(1, comm.size)), deadline, "finish")
        except DeadlineExpired:
            comm.Abort(code)
        return
    status = MPI.Status()
    while time.monotonic() < deadline.end:
        msg = comm.improbe(source=0, tag=TAG_VERDICT, status=status)
        if msg is not None:
            msg.recv()
            return
        time.sleep(0.001)
    print(f"ccdiag: rank {comm.rank}: no word from rank 0 by the deadline; aborting", file=sys.stderr, flush=True)
    comm.Abort(code)


class Watchdog:
    """Calls ``on_expire`` (which prints and aborts) if still armed ``seconds`` from now.

    The backstop for a blocking MPI call that cannot take a deadline; disarm after it returns."""

    def __init__(self, seconds: float, on_expire: Callable[[], None]):
        self._done = threading.Event()
        self._on_expire = on_expire
        self._thread = threading.Thread(target=self._run, args=(seconds,), daemon=True, name="ccdiag-watchdog")
        self._thread.start()

    def _run(self, seconds: float) -> None:
        if not self._done.wait(max(0.0, seconds)):
            self._on_expire()

    def disarm(self) -> None:
        self._done.set()


def host_identity() -> dict:
    """This rank's host name, its IPv4 interfaces (name -> [addresses]) to name links, their MTUs
    (``mtus``: to name the host whose MTU differs when large transfers fail), and the line
    rate of each physical one (``speeds``: name -> Mbit/s) to hold figures to their path's
    capability. A virtual interface (veth, bridge, tunnel: no ``device`` in sysfs) reports a speed
    the kernel made up, so it has none here. ``provider``: the cloud it runs on (DMI), whose flow
    limit may bound a path below its line rate (:mod:`ccdiag.cluster.flowlimits`)."""
    ifaces: dict[str, list[str]] = {}
    speeds: dict[str, int] = {}
    mtus: dict[str, int] = {}
    try:
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            v4 = [a.address for a in addrs if a.family == socket.AF_INET]
            if v4 and name != "lo":
                ifaces[name] = v4
        for name, st in psutil.net_if_stats().items():
            if name in ifaces and st.mtu:
                mtus[name] = int(st.mtu)
            if name in ifaces and st.speed and st.speed > 0 and os.path.exists(f"/sys/class/net/{name}/device"):
                speeds[name] = int(st.speed)
    except Exception:  # noqa: BLE001 - a missing interface list only blurs the "interface" column
        pass
    try:
        from ccdiag.cluster.flowlimits import local_provider

        provider = local_provider()
    except Exception:  # noqa: BLE001 - an unreadable identity only leaves the line rate unbounded
        provider = None
    return {"host": socket.gethostname(), "ifaces": ifaces, "speeds": speeds, "mtus": mtus, "pid": os.getpid(),
            "provider": provider}


TAG_NEIGHBOUR = 7106


def right_neighbour_ident(comm, ident: dict, deadline: Deadline) -> dict:
    """The identity (host, interfaces) of the rank to this one's right in the ring: each rank sends
    its own to the left and receives the right one's, with the run's deadline."""
    MPI = load_mpi()
    n, r = comm.size, comm.rank
    left, right = (r - 1) % n, (r + 1) % n
    req = comm.isend(ident, dest=left, tag=TAG_NEIGHBOUR)
    status = MPI.Status()
    got = None
    while got is None:
        msg = comm.improbe(source=right, tag=TAG_NEIGHBOUR, status=status)
        if msg is not None:
            got = msg.recv()
            break
        if time.monotonic() >= deadline.end:
            cancel_all([req])
            raise DeadlineExpired("ring neighbours", [right], deadline.budget_s)
        time.sleep(0.0005)
    wait_one(req, left, deadline, "ring neighbours")
    return got if isinstance(got, dict) else {}


TAG_PING = 7103
TAG_PONG = 7104


class Liveness:
    """Names the ranks that are gone or hung, at any moment, even while the main thread of every
    rank is inside a blocking MPI call.

    Each non-root rank runs a small responder thread on a duplicated communicator that answers
    rank 0's pings; :meth:`roll_call` (rank 0) pings every rank and returns those that did not
    answer in time. A stopped (SIGSTOP), dead or unreachable rank never answers."""

    def __init__(self, comm):
        self.comm = comm.Dup()
        self.rank = self.comm.rank
        self.size = self.comm.size
        self._stop = threading.Event()
        self._seq = 0
        self._thread = None
        if self.rank != 0:
            self._thread = threading.Thread(target=self._respond, daemon=True, name="ccdiag-liveness")
            self._thread.start()

    def _respond(self) -> None:
        MPI = load_mpi()
        status = MPI.Status()
        while not self._stop.is_set():
            try:
                msg = self.comm.improbe(source=0, tag=TAG_PING, status=status)
                if msg is None:
                    time.sleep(0.02)
                    continue
                seq = msg.recv()
                if seq is None:
                    return
                self.comm.isend(seq, dest=0, tag=TAG_PONG)
            except Exception:  # noqa: BLE001 - the job is going down; the main thread reports
                return

    def roll_call(self, timeout_s: float = 2.0) -> list[int]:
        """Rank 0: the ranks that do not answer a ping within ``timeout_s``."""
        MPI = load_mpi()
        self._seq += 1
        seq = self._seq
        for r in range(1, self.size):
            self.comm.isend(seq, dest=r, tag=TAG_PING)
        answered = {0}
        status = MPI.Status()
        end = time.monotonic() + timeout_s
        while len(answered) < self.size and time.monotonic() < end:
            msg = self.comm.improbe(source=MPI.ANY_SOURCE, tag=TAG_PONG, status=status)
            if msg is None:
                time.sleep(0.005)
                continue
            got = msg.recv()
            if got == seq:
                answered.add(status.Get_source())
        return [r for r in range(self.size) if r not in answered]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.2)


TAG_BCAST = 7105


def bcast_obj(comm, obj: Any, deadline: Deadline, stage: str, tag: int = TAG_BCAST) -> Any:
    """Rank 0's ``obj`` on every rank, point to point with a deadline (a non-root rank that hears
    nothing raises DeadlineExpired naming rank 0; rank 0 names the ranks its sends never reached)."""
    MPI = load_mpi()
    if comm.rank == 0:
        reqs = [comm.isend(obj, dest=r, tag=tag) for r in range(1, comm.size)]
        wait_all(reqs, list(range(1, comm.size)), deadline, stage)
        return obj
    status = MPI.Status()
    spins = 0
    while True:
        msg = comm.improbe(source=0, tag=tag, status=status)
        if msg is not None:
            return msg.recv()
        spins += 1
        if time.monotonic() >= deadline.end:
            raise DeadlineExpired(stage, [0], deadline.budget_s)
        time.sleep(0.0002 if spins < 1000 else 0.002)


def exchange_obj(comm, peer: int, obj, deadline: Deadline, stage: str, tag: int):
    """Send ``obj`` to ``peer`` and receive its object, both ending by ``deadline``.

    Why not ``sendrecv``: it blocks without a deadline; a partner that died would hang this rank.
    Probes (``improbe``) instead of a pickled ``irecv`` whose object cannot be read after a ``Test``.
    A send still pending at the deadline is kept with its buffer (:func:`cancel_all`)."""
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
            cancel_all([sreq])
            raise DeadlineExpired(stage, [peer], deadline.budget_s)
        time.sleep(0.0002 if spins < 1000 else 0.002)
    wait_one(sreq, peer, deadline, stage)
    return got


def soft_barrier(comm, deadline: Deadline, stage: str) -> bool:
    """A barrier that gives up at ``deadline`` and says whether every rank came (MPI_Ibarrier,
    polled). Why: rounds of pairs start together so each host's link carries one pair at a time,
    but a rank that is gone, or whose link swallows MPI's messages, must not stop the rest from
    measuring; a barrier not reached in time is left pending (a later one matches the next call)."""
    req = comm.Ibarrier()
    try:
        wait_one(req, -1, deadline, stage, keep=comm)
    except DeadlineExpired:
        return False
    return True
