"""The daemon's collection process: the one place collection children are forked from.

Forking a process that runs threads copies every lock as it was at that instant, held ones
included, into a child in which the thread holding it no longer exists: a child that then takes
such a lock (a logging handler, OpenSSL's inside ``hashlib`` or ``ssl`` while an HTTP thread was
in a handshake, the allocator of a C library) waits forever. The daemon serves scrapes on threads,
so its cycles are not forked from it. This process is forked once, before the HTTP server starts
any thread, and stays single-threaded: it waits for a request, forks the cycle's children
(:mod:`.isolation`), waits for them within the cycle's deadline, and sends back what they
delivered. It also keeps the children that could not exit (stuck in the kernel) and answers which
probes they still hold.

It has its own descriptor table, so scrapers' connections (however many) never take a descriptor
a collection child needs. It ends when the daemon asks, when the daemon's end of the socket closes
(the daemon died), or on SIGTERM; every way it ends kills its children and their command groups.

Requests and replies are length-prefixed pickles on a socket pair (both ends are this program).
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import time
from typing import TYPE_CHECKING, Any, Callable

from ccdiag.host import procgroups
from ccdiag.exporters import isolation

if TYPE_CHECKING:
    from ccdiag.host.door import Host
    from ccdiag.inputs.policy import Policy

_HEADER = isolation._HEADER
#: seconds the daemon gives the collection process beyond a cycle's own bound before giving up on it
REPLY_GRACE_S = 10.0


class CollectionDied(RuntimeError):
    """The collection process ended or stopped answering; the message says how."""


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            sock.settimeout(min(left, 3600.0))  # an infinite bound has no time_t
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, deadline: float | None = None) -> Any:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if size > isolation.MAX_MESSAGE_BYTES * 2:
        raise EOFError(f"message of {size} bytes")
    return pickle.loads(_recv_exact(sock, size, deadline))


#: what a cycle's child runs: (config, host, policy, probes) -> a function of no arguments
Runner = Callable[[Any, "Host", "Policy", list[str]], Callable[[], Any]]
#: a host for a configuration, where the configuration names another one than the current
HostOpener = Callable[[Any], "Host"]


class _Server:
    """The collection process's side (runs only in that process)."""

    def __init__(self, sock: socket.socket, runner: Runner, open_host: HostOpener, host: Host | None):
        self.sock = sock
        self.runner = runner
        self.open_host = open_host
        self.host = host
        self.host_key: tuple | None = None
        self.jobs: list[isolation.Job] = []  # the cycle running now
        self.stuck: list[isolation.Job] = []  # children that could not exit

    def held(self) -> set[str]:
        still = [j for j in self.stuck if not isolation.reap(j)]
        self.stuck = still
        return {p for j in still for p in j.probes}

    def _host_for(self, cfg: Any) -> Host:
        key = (getattr(cfg, "replay", None), getattr(cfg, "root", "/"))
        if self.host is None or (self.host_key is not None and key != self.host_key):
            old, self.host = self.host, self.open_host(cfg)
            _close(old)
        self.host_key = key
        return self.host

    def cycle(self, cfg: Any, policy: Policy, groups: list[list[str]], budget_s: float) -> list[isolation.Job]:
        host = self._host_for(cfg)
        self.jobs = [isolation.start(self.runner(cfg, host, policy, g), tuple(g)) for g in groups]
        try:
            isolation.wait(self.jobs, time.monotonic() + budget_s)
        finally:
            jobs, self.jobs = self.jobs, []
        self.stuck.extend(j for j in jobs if not j.exited)
        for j in jobs:
            j._buf = bytearray()
        return jobs

    def handle(self, request: tuple) -> Any:
        kind = request[0]
        if kind == "held":
            return sorted(self.held())
        if kind == "cycle":
            _, cfg, policy, groups, budget_s = request
            return self.cycle(cfg, policy, groups, budget_s)
        if kind == "pids":  # for tests and benchmarks: what this process has alive
            return [j.pid for j in self.jobs + self.stuck]
        raise ValueError(f"unknown request {kind!r}")

    def serve(self) -> None:
        while True:
            try:
                request = _recv(self.sock)
            except (EOFError, OSError):
                return  # the daemon is gone
            if request[0] == "stop":
                return
            try:
                reply = ("ok", self.handle(request))
            except Exception as exc:  # noqa: BLE001 - reported to the daemon, which logs it
                reply = ("error", f"{type(exc).__name__}: {exc}")
            try:
                _send(self.sock, reply)
            except OSError:
                return

    def cleanup(self) -> None:
        for job in self.jobs + self.stuck:
            isolation.kill(job)
        for job in self.jobs + self.stuck:
            isolation.reap(job, wait_s=0.5)


def _close(host: Host | None) -> None:
    close = getattr(host, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001
            pass


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM when the daemon dies (a SIGKILL gives it no chance to stop us)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_server(sock: socket.socket, runner: Runner, open_host: HostOpener, host: Host | None) -> None:
    server = _Server(sock, runner, open_host, host)

    def on_term(signum, frame):
        server.cleanup()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)  # the daemon handles them and tells this process
    _die_with_parent()
    try:
        server.serve()
    finally:
        server.cleanup()


class CollectionProcess:
    """The daemon's handle on its collection process."""

    def __init__(self, runner: Runner, open_host: HostOpener, host: Host | None):
        self.runner = runner
        self.open_host = open_host
        self.host = host
        self.pid: int | None = None
        self.sock: socket.socket | None = None

    @property
    def alive(self) -> bool:
        return self.pid is not None

    def start(self) -> socket.socket:
        """Fork the collection process (call before any other thread starts, see the module); the
        daemon's end of the conversation with it."""
        parent, child = socket.socketpair()
        arm = procgroups.die_with_parent()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the collection process
            code = 0
            try:
                if arm is not None:
                    arm()  # a SIGKILLed daemon takes its collection process with it
                parent.close()
                _run_server(child, self.runner, self.open_host, self.host)
            except BaseException:  # noqa: BLE001 - never return into the daemon's code
                code = 70
            finally:
                os._exit(code)
        child.close()
        self.pid, self.sock = pid, parent
        return parent

    def request(self, request: tuple, timeout_s: float) -> Any:
        """Send ``request`` and wait up to ``timeout_s`` for the answer. Raises
        :class:`CollectionDied` (after ending the process) when none comes."""
        sock = self.sock if self.sock is not None else self.start()
        try:
            _send(sock, request)
            status, value = _recv(sock, time.monotonic() + timeout_s)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the conversation is out of step
            why = ("stopped answering" if isinstance(exc, TimeoutError)
                   else f"ended ({type(exc).__name__}: {exc})")
            self.stop()  # a fresh one starts with the next request
            raise CollectionDied(f"the collection process {why}") from None
        if status != "ok":
            raise CollectionDied(f"the collection process failed: {value}")
        return value

    def stop(self, wait_s: float = 3.0) -> None:
        """End the process: it kills its children first. SIGKILL if it does not end in ``wait_s``."""
        pid, sock, self.pid, self.sock = self.pid, self.sock, None, None
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        end = time.monotonic() + wait_s
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                break
            if time.monotonic() >= end:
                os.kill(pid, signal.SIGKILL)
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
                break
            time.sleep(0.01)
        if sock is not None:
            sock.close()
