"""Run collection work in a forked child process, so nothing it does can stall the endpoint.

Why a child process and not a thread (measured, ``bench/bench_daemon_stall.py``): a probe parsing a
pathological input spends its time inside one C call (a backtracking regular expression over a
100,000-character ``nvidia-smi topo -p2p`` legend runs ~90 s in a single ``re.match``), and a C call
holds the interpreter lock until it returns. No thread in the same process runs meanwhile, the
HTTP threads included: in-process, 39 of 40 scrapes timed out. A "bounded worker that yields"
cannot yield from inside ``re``. A child process has its own interpreter lock, can be killed at its
deadline (a thread cannot), and whatever it allocates is returned to the system when it exits,
so a cycle that bloats cannot grow the daemon. With the child, the scrape latency while such a
cycle runs is the same as on an idle daemon (p99 a few ms; numbers in
``bench/results/daemon_stall.json``).

Why ``fork`` per cycle rather than a long-lived worker: the child starts with the daemon's state
(configuration, policy, an open replay snapshot) without serialising any of it, costs a few ms
on a 15 s interval, and exits after one cycle, so a stuck probe thread dies with it instead of
piling up. The parent never touches NVML, so nothing NVML holds is inherited; each child
initialises it afresh. A child whose probe sits in the kernel (a wedged GPU, ``D`` state) cannot
exit even when killed; the daemon keeps such children in view and does not start their probes
again until they are gone (:class:`Job` reports ``exited``).

The child sends length-prefixed pickles on a pipe: each probe's first run as soon as it completes
(so a child killed later still delivers the probes that finished), every process group a command
of it started (commands run in sessions of their own, out of reach of a signal to the child), then
the result or the error. The parent reads them through a ``selectors`` poller (never ``select()``,
which fails outright once a descriptor number passes 1,023) against the deadline, bounded in size;
whatever way :func:`wait` ends, every child it was given is killed if still running, its command
groups with it, and reaped.

The parent that forks these children is the daemon's collection process (:mod:`.collection`): a
single-threaded process started before any server thread, so no lock another thread held at the
moment of the fork can be inherited locked by a child.
"""

from __future__ import annotations

import copyreg
import os
import pickle
import selectors
import signal
import threading
import struct
import time
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ccdiag.host import procgroups

if TYPE_CHECKING:
    from ccdiag.host.door import Host
    from ccdiag.probes.registry import ProbeRun

#: the most the parent reads from one child (a 64-GPU node's result is a few MB)
MAX_MESSAGE_BYTES = 256 << 20
_HEADER = struct.Struct("!Q")


def _mappingproxy(d: dict) -> types.MappingProxyType:
    return types.MappingProxyType(d)


# the topology keeps its indexes read-only in mapping proxies; they travel from the child as dicts
copyreg.pickle(types.MappingProxyType, lambda m: (_mappingproxy, (dict(m),)))


def supported() -> bool:
    """Whether cycles can run in a child here (``fork`` exists: Linux and the other Unixes)."""
    return hasattr(os, "fork")


@dataclass
class Job:
    """One child: what it delivered, and how it ended."""

    pid: int
    fd: int
    probes: tuple[str, ...] = ()  # the probes it was asked to run (for what a stuck child holds)
    runs: dict[str, Any] = field(default_factory=dict)  # probe -> ProbeRun, as each completed
    result: Any = None
    error: str | None = None
    killed: bool = False  # still running at its deadline (or sent too much) and killed
    exited: bool = False  # reaped; False: stuck in the kernel, still holding what its probes held
    groups: set = field(default_factory=set)  # process groups its commands run in, not yet reaped
    _buf: bytearray = field(default_factory=bytearray)
    _total: int = 0

    @property
    def done(self) -> bool:
        return self.fd < 0


#: probes run on threads of their own in the child, and a large frame takes several writes: one
#: frame at a time, or two threads' frames interleave on the pipe and the parent reads garbage
_SEND_LOCK = threading.Lock()


def _send(fd: int, kind: str, payload: Any) -> None:
    try:
        data = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - an unpicklable result is reported, not lost silently
        data = pickle.dumps(("error", f"cannot send {kind} from the collection child: {type(exc).__name__}: {exc}"))
    view = memoryview(_HEADER.pack(len(data)) + data)
    with _SEND_LOCK:
        while view:
            n = os.write(fd, view)
            view = view[n:]


def _child(fd: int, fn: Callable[[], Any]) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
    # the listening socket and the scrapers' connections belong to the parent: a child that cannot
    # exit must not keep the port bound or a connection open
    try:
        max_fd = os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        max_fd = 4096
    os.closerange(3, fd)
    os.closerange(fd + 1, max_fd)
    from ccdiag.host import procgroups
    from ccdiag.probes import registry

    procgroups.reset_after_fork()
    procgroups.add_listener(lambda pgid, gone=False: _send(fd, "ungroup" if gone else "group", pgid))

    real_run_one = registry.run_one
    sent: set[str] = set()

    def run_one(host: Host, name: str) -> ProbeRun:
        run = real_run_one(host, name)
        if name not in sent:  # the first sample; a second one (counters) comes with the result
            sent.add(name)
            try:
                _send(fd, "probe", (name, run))
            except OSError:  # the parent is gone (stopping): nothing left to tell
                os._exit(0)
        return run

    registry.run_one = run_one
    try:
        result = fn()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent in one line
        _send(fd, "error", f"{type(exc).__name__}: {exc}")
        return
    _send(fd, "result", result)


def start(fn: Callable[[], Any], probes: tuple[str, ...] = ()) -> Job:
    """Fork a child that runs ``fn()`` and sends back what it returns (see the module docstring)."""
    r, w = os.pipe()
    arm = procgroups.die_with_parent()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child (coverage does not follow a fork)
        code = 0
        try:
            if arm is not None:
                arm()  # a SIGKILLed daemon takes its collection children with it
            os.close(r)
            _child(w, fn)
        except BaseException:  # noqa: BLE001 - the child never returns into the parent's code
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    return Job(pid=pid, fd=r, probes=tuple(probes))


def _feed(job: Job, data: bytes) -> None:
    job._total += len(data)
    if job._total > MAX_MESSAGE_BYTES:
        job.error = f"collection child sent more than {MAX_MESSAGE_BYTES} bytes; killed"
        _finish(job, kill=True)
        return
    job._buf += data
    while len(job._buf) >= _HEADER.size:
        (size,) = _HEADER.unpack_from(job._buf)
        if len(job._buf) < _HEADER.size + size:
            break
        frame = bytes(job._buf[_HEADER.size:_HEADER.size + size])
        del job._buf[:_HEADER.size + size]
        try:
            kind, payload = pickle.loads(frame)
        except Exception as exc:  # noqa: BLE001
            job.error = f"unreadable message from the collection child: {type(exc).__name__}: {exc}"
            continue
        if kind == "probe":
            name, run = payload
            job.runs[name] = run
        elif kind == "group":
            job.groups.add(int(payload))
        elif kind == "ungroup":
            job.groups.discard(int(payload))
        elif kind == "result":
            job.result = payload
        elif kind == "error":
            job.error = str(payload)


def _finish(job: Job, kill: bool) -> None:
    if job.fd >= 0:
        os.close(job.fd)
        job.fd = -1
    if kill:
        job.killed = True
        try:
            os.kill(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reap(job, wait_s=1.0)
    kill_groups(job)


def kill_groups(job: Job) -> None:
    """SIGKILL the process groups of the child's commands that it did not reap itself (it was
    killed first, or gave up on a command stuck past its deadline)."""
    for pgid in list(job.groups):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    job.groups.clear()


def kill(job: Job) -> None:
    """Kill a child that is still running, and its commands (the daemon is stopping). Only the
    signals: whoever reads the child sees its pipe close and reaps it."""
    if not job.exited:
        try:
            os.kill(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kill_groups(job)


def reap(job: Job, wait_s: float = 0.0) -> bool:
    """Collect the child's exit status if it has exited (waiting up to ``wait_s``)."""
    end = time.monotonic() + wait_s
    while not job.exited:
        try:
            pid, _ = os.waitpid(job.pid, os.WNOHANG)
        except ChildProcessError:
            pid = job.pid
        if pid:
            job.exited = True
            break
        if time.monotonic() >= end:
            break
        time.sleep(0.01)
    return job.exited


def _read(job: Job) -> None:
    try:
        data = os.read(job.fd, 1 << 20)
    except OSError as exc:
        job.error = job.error or f"reading from the collection child: {exc}"
        data = b""
    if not data:
        _finish(job, kill=False)
    else:
        _feed(job, data)


def wait(jobs: list[Job], deadline: float) -> None:
    """Read every job's messages until it closes its end or ``deadline`` (``time.monotonic()``)
    passes. However it returns (an exception included), every job is done: killed if it was still
    running, its command groups killed, and reaped if it could exit."""
    sel = selectors.DefaultSelector()
    try:
        for job in jobs:
            if not job.done:
                sel.register(job.fd, selectors.EVENT_READ, job)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in sel.select(min(left, 1.0)):
                job = key.data
                _read(job)
                if job.done:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        for job in jobs:
            if not job.done:
                _finish(job, kill=True)
            elif job.groups:
                kill_groups(job)
