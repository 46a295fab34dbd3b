"""The HTTP(S) endpoint: ``/metrics``, ``/-/healthy``, ``/-/ready`` and a landing page, served by aiohttp.

The protocol is aiohttp's (``docs/prometheus.md`` says why that library): HTTP/1.1 keep-alive and
pipelining (a bounded queue of pipelined requests per connection), HTTP/1.0, TLS through asyncio's
transports, request lines and header fields bounded (``max_line_size``/``max_field_size``/
``max_headers``) and answered 400 beyond. One event loop in one thread holds every connection, so
an idle or half-open client costs a descriptor and a few kilobytes, never a thread.

What aiohttp leaves to its user is built here, on top:

* **Header time**: a connection must deliver a whole request header within :data:`HEADER_TIMEOUT_S`
  of its acceptance (TLS handshake included) or of its first byte after a response; between
  requests it may idle :data:`CONNECTION_TIMEOUT_S`. A sweep every :data:`SWEEP_S` closes the late
  ones (slowloris, half-open, TLS garbage that never completes a handshake).
* **Connections**: at most ``max_connections`` (the descriptor limit less a reserve); one more evicts
  the oldest connection that has no request in progress, so a flood cannot lock out a scraper that
  completes its request in milliseconds. Accepting when descriptors run out (EMFILE) is asyncio's:
  it pauses the listener for a second instead of spinning.
* **Requests at once**: at most ``max_requests`` (``--web.max-requests``, exporter-toolkit's bound);
  one more is answered 503 at once.
* **Passwords**: the cache first, then bcrypt in its own bounded executor with a per-client
  back-off (:mod:`.authgate`): wrong-password work never takes the capacity a cached client needs.
  A client backing off gets its 429 after up to :data:`TARPIT_MAX_S`, without holding a request
  slot, so a closed-loop flood runs at the pace of its back-off instead of the server's.
* **Refusals and pipelining floods**: a request aiohttp's parser refuses (random bytes, a header
  field over its bound) is answered 400 after :data:`REFUSAL_DELAY_S`, its connection paused, as
  Go's server lingers: a client sending garbage in a closed loop then runs at that pace, not at the
  server's. The requests of a connection that pipelines are served one after another, at most
  :data:`PIPELINED_PER_S` a second across all such connections, waiting without a request slot
  (every answer is the whole exposition, hundreds of KB; Prometheus never pipelines, a flood does).
* **Liveness**: the loop stamps :attr:`MetricsServer.beat` every :data:`BEAT_S` while its listener
  is serving; the daemon feeds systemd's watchdog only while that stamp is fresh (:meth:`alive`).

Handlers only read what the collection loop published: a scrape never waits on a probe. The web
configuration (TLS context, users, headers) is read per request; a SIGHUP reload that changes the
TLS context re-opens the listener on the same socket within :data:`BEAT_S` (connections already
open keep the context they were accepted with).

aiohttp is imported by this module only; ``ccdiag check`` never imports it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import socket
import sys
import threading
import time
from typing import Any, Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from ccdiag.exporters.authgate import BACKING_OFF, BUSY, PasswordGate
from ccdiag.exporters.collector import CycleCollector
from ccdiag.exporters.webconfig import WebConfig

log = logging.getLogger("ccdiag.daemon")

#: the text format generate_latest writes (named here: older prometheus_client lacks the constant)
CONTENT_TYPE_PLAIN_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
#: seconds a keep-alive connection may sit idle between requests
CONNECTION_TIMEOUT_S = 30.0
#: seconds from a connection's acceptance (TLS handshake included), or from its first byte after a
#: response, to a complete request header; a scraper needs milliseconds
HEADER_TIMEOUT_S = 10.0
#: concurrent requests served (exporter-toolkit's --web.max-requests defaults to 40)
DEFAULT_MAX_REQUESTS = 40
#: request line and each header field (aiohttp's defaults, as Go's net/http's 1 MiB bounds a whole header)
MAX_LINE_BYTES = 8190
MAX_FIELD_BYTES = 8190
MAX_HEADERS = 128
#: descriptors kept free for what the daemon opens besides connections (reloads, the journal)
FD_RESERVE = 64
#: how often the loop closes late connections, and stamps its liveness
SWEEP_S = 0.25
BEAT_S = 0.25
#: the longest a client backing off from wrong passwords waits for its 429
TARPIT_MAX_S = 5.0
#: the interpreter's thread switch interval while the server runs (see serve_forever)
SWITCH_INTERVAL_S = 0.001
#: the listen backlog: a burst of scrapers (several Prometheus replicas, a federation) queues
BACKLOG = 128
#: a request the parser refuses (random bytes, a header over its bound) is answered 400 after this
#: long, its connection paused meanwhile (as Go's server lingers before it closes): a client
#: sending garbage in a closed loop runs at this pace instead of the server's
REFUSAL_DELAY_S = 0.5
#: the requests of a connection that pipelines (sends a request before the answer to the one
#: before) are served at most this many a second across all such connections, one after another;
#: Prometheus never pipelines, a flood does, and each answer is the whole exposition (hundreds of KB)
PIPELINED_PER_S = 20.0

LANDING = b"""<!doctype html><html><head><title>ccdiag exporter</title></head><body>
<h1>ccdiag exporter</h1><p><a href="/metrics">Metrics</a> &middot; <a href="/-/healthy">Health</a></p>
</body></html>
"""

# a malformed request is the client's problem, not the journal's: aiohttp logs those at debug, and
# its error log says nothing a scrape failure would not
logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)


def parse_listen(listen: str) -> tuple[str, int]:
    """``ADDR:PORT``, ``[v6]:PORT`` or ``:PORT`` (all interfaces) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address {listen!r} must be ADDR:PORT, e.g. 127.0.0.1:9643")
    host = host.strip("[]")
    return host, int(port)


def default_max_connections() -> int:
    """Connections held at most: the soft descriptor limit less :data:`FD_RESERVE`."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ValueError, OSError):
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(16, soft - FD_RESERVE)


class _Connection(RequestHandler):
    """aiohttp's connection protocol, with the deadline the sweep reads and a count of its requests
    in progress (a connection with one is never evicted nor timed out: its response is under way)."""

    def __init__(self, manager: "_Manager", **kwargs: Any):
        super().__init__(manager, **kwargs)
        self.ccdiag = manager.owner
        self.deadline = 0.0
        self.in_progress = 0
        self.fresh = True  # no byte since acceptance or since the last response
        self.answered = 0  # requests answered on this connection
        self.data_at = 0.0  # when bytes last arrived
        self.answered_at = 0.0  # when the last request's answer was made
        self.pipelining = False  # seen sending a request before the answer to the one before

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.deadline = time.monotonic() + self.ccdiag.header_timeout_s
        self.ccdiag._admit(self)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.data_at = time.monotonic()
        if data and self.fresh and not self.in_progress:
            self.fresh = False
            self.deadline = min(self.deadline, time.monotonic() + self.ccdiag.header_timeout_s)
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.ccdiag._conns.pop(self, None)
        super().connection_lost(exc)

    def responded(self) -> None:
        self.fresh = True
        self.answered += 1
        self.answered_at = now = time.monotonic()
        self.deadline = now + self.ccdiag.idle_timeout_s

    def pipelines(self) -> bool:
        """Whether this connection pipelines: a request is queued behind the one about to be
        served, or this one arrived before the previous one was answered (no byte came since)."""
        if not self.pipelining:
            queued = getattr(self, "_messages", None)  # aiohttp's queue of parsed requests
            self.pipelining = bool(queued) or (self.answered > 0 and self.data_at <= self.answered_at)
        return self.pipelining

    def _make_error_handler(self, err_info: Any) -> Callable[[web.BaseRequest], Any]:
        """aiohttp's 400 for a request its parser refused, given after :data:`REFUSAL_DELAY_S` with
        the connection paused (the refusal costs the server nothing meanwhile)."""
        answer = super()._make_error_handler(err_info)
        delay = self.ccdiag.refusal_delay_s

        async def late(request: web.BaseRequest) -> web.StreamResponse:
            self.ccdiag.stats["refused"] += 1
            if delay > 0:
                transport = self.transport
                if transport is not None:
                    transport.pause_reading()
                await asyncio.sleep(delay)
            return await answer(request)

        return late


class _Manager(web.Server):
    """aiohttp's low-level server, making :class:`_Connection` protocols."""

    def __init__(self, owner: "MetricsServer", handler, **kwargs: Any):
        super().__init__(handler, **kwargs)
        self.owner = owner

    def __call__(self) -> RequestHandler:
        return _Connection(self, loop=self._loop, **self._kwargs)


class MetricsServer:
    """The listener, the loop and its bounds (see the module docstring).

    Constructed in the caller's thread (a bind error raises there); :meth:`serve_forever` runs the
    loop in the thread that calls it until :meth:`shutdown`.
    """

    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], collector: CycleCollector, web: Callable[[], WebConfig],
                 health: Callable[[], tuple[bool, str]], ready: Callable[[], bool], metrics_path: str = "/metrics",
                 max_requests: int = DEFAULT_MAX_REQUESTS, max_connections: int | None = None,
                 header_timeout_s: float = HEADER_TIMEOUT_S, idle_timeout_s: float = CONNECTION_TIMEOUT_S,
                 gate: PasswordGate | None = None, refusal_delay_s: float = REFUSAL_DELAY_S,
                 pipelined_per_s: float = PIPELINED_PER_S):
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.metrics_path = metrics_path
        self.collector, self.web, self.health, self.ready = collector, web, health, ready
        self.max_requests = max(1, int(max_requests))
        self.max_connections = max_connections or default_max_connections()
        self.header_timeout_s, self.idle_timeout_s = header_timeout_s, idle_timeout_s
        self.refusal_delay_s = refusal_delay_s
        self.pipelined_interval_s = 1.0 / pipelined_per_s if pipelined_per_s > 0 else 0.0
        self._pipelined_turn: asyncio.Lock | None = None  # made in the loop (_main)
        self.gate = gate or PasswordGate()
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(self.request_queue_size)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._conns: dict[_Connection, None] = {}  # open connections, oldest first
        self._active = 0  # requests in progress
        self._expo_cache: dict[bool, tuple[tuple, bytes]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_requested = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        #: monotonic time of the loop's latest stamp while its listener served (see :meth:`alive`)
        self.beat: float | None = None
        self.stats: collections.Counter = collections.Counter()  # accepted, evicted, timed_out, busy, ...

    # -- the loop ----------------------------------------------------------------------------
    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Run the loop in this thread until :meth:`shutdown` (``poll_interval`` is not used:
        kept for callers of the earlier server)."""
        self._thread = threading.current_thread()
        # the loop shares the interpreter with the collection thread (judging, rendering a cycle:
        # tenths of a second of Python): it waits for the interpreter lock at most this long each
        # time, instead of the default 5 ms, several times per request
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        loop = asyncio.new_event_loop()
        self._loop = loop
        main = loop.create_task(self._main())
        try:
            loop.run_until_complete(main)
        except RuntimeError:  # the loop was stopped under the task (a bug elsewhere): end it cleanly
            log.error("the HTTP server's loop stopped unexpectedly; no longer serving")
        finally:
            try:
                if not main.done():
                    main.cancel()
                    loop.run_until_complete(asyncio.gather(main, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self.beat = None
                self._stopped.set()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        self._pipelined_turn = asyncio.Lock()
        if self._stop_requested:
            return
        # handler_cancellation: a client that goes away ends its handler (a request waiting its
        # pipelined turn, a refusal's delay, a back-off) instead of leaving it to run for nobody
        manager = _Manager(self, self._handle, access_log=None, keepalive_timeout=self.idle_timeout_s,
                           max_line_size=MAX_LINE_BYTES, max_field_size=MAX_FIELD_BYTES, max_headers=MAX_HEADERS,
                           handler_cancellation=True)
        listener, ctx = await self._listen(manager)
        try:
            while not (self._stopping.is_set() or self._stop_requested):
                now = time.monotonic()
                if listener.is_serving():
                    self.beat = now
                self._sweep(now)
                wanted = self.web().ssl_context
                if wanted is not ctx:  # a reload changed TLS: the next connections get the new context
                    new, ctx = await self._listen(manager, wanted)
                    listener.close()
                    listener = new
                try:
                    await asyncio.wait_for(self._stopping.wait(), min(SWEEP_S, BEAT_S))
                except asyncio.TimeoutError:
                    pass
        finally:
            listener.close()
            for conn in [c for c in self._conns if not c.in_progress]:  # idle, refused, waiting its turn
                conn.force_close()
            await manager.shutdown(1.0)
            for conn in list(self._conns):
                conn.force_close()

    async def _listen(self, manager: _Manager, ctx: Any = ...) -> tuple[asyncio.base_events.Server, Any]:
        """A listener on a duplicate of the bound socket (closing it leaves the socket bound)."""
        if ctx is ...:
            ctx = self.web().ssl_context
        assert self._loop is not None
        sock = self.socket.dup()
        tls = {"ssl": ctx, "ssl_handshake_timeout": self.header_timeout_s} if ctx is not None else {}
        listener = await self._loop.create_server(manager, sock=sock, backlog=self.request_queue_size, **tls)
        return listener, ctx

    def _admit(self, conn: _Connection) -> None:
        """A new connection: held, evicting the oldest idle one beyond ``max_connections``."""
        self.stats["accepted"] += 1
        self._conns[conn] = None
        if len(self._conns) > self.max_connections:
            for old in self._conns:
                if old is not conn and not old.in_progress:
                    self.stats["evicted"] += 1
                    self._conns.pop(old, None)
                    old.force_close()
                    break

    def _sweep(self, now: float) -> None:
        late = [c for c in self._conns if not c.in_progress and c.deadline <= now]
        for conn in late:
            self.stats["timed_out"] += 1
            self._conns.pop(conn, None)
            conn.force_close()

    # -- requests ------------------------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        conn = request.protocol if isinstance(request.protocol, _Connection) else None
        if conn is not None and self.pipelined_interval_s and conn.pipelines():
            # paced, one after another, before it takes a request slot: a flood of pipelined
            # requests waits its turn without holding what a scraper's fresh connection needs (a
            # connection that goes away leaves the queue)
            self.stats["pipelined_paced"] += 1
            assert self._pipelined_turn is not None
            async with self._pipelined_turn:
                await asyncio.sleep(self.pipelined_interval_s)
        if conn is not None:
            conn.in_progress += 1
        self._active += 1
        active = True
        try:
            if self._active > self.max_requests:
                self.stats["busy"] += 1
                return self._reply(503, b"Too many concurrent requests; retry shortly\n", close=True)
            self.stats["served"] += 1
            resp = await self._respond(request)
            delay = getattr(resp, "ccdiag_tarpit_s", 0.0)
            if delay:
                # a client backing off waits for its answer without holding a request slot: a
                # closed-loop flood of wrong passwords slows to the pace of its back-off
                self._active -= 1
                active = False
                await asyncio.sleep(delay)
            return resp
        finally:
            if active:
                self._active -= 1
            if conn is not None:
                conn.in_progress -= 1
                conn.responded()

    def _reply(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
               extra: dict[str, str] | None = None, close: bool = False) -> web.Response:
        headers = {**self.web().headers, **(extra or {})}
        resp = web.Response(status=status, body=body, headers=headers)
        resp.headers["Content-Type"] = ctype
        if close:
            resp.force_close()
        return resp

    async def _respond(self, request: web.BaseRequest) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            # no body is read: the connection ends with the answer, so an unread body cannot be
            # taken for the next request
            return self._reply(405, b"Method Not Allowed\n", extra={"Allow": "GET, HEAD"}, close=True)
        refusal = await self._refused(request)
        if refusal is not None:
            return refusal
        path = request.path
        if path == self.metrics_path:
            if "gzip" in request.headers.get("Accept-Encoding", ""):
                return self._reply(200, self._exposition(True), CONTENT_TYPE_PLAIN_0_0_4,
                                   {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
            return self._reply(200, self._exposition(False), CONTENT_TYPE_PLAIN_0_0_4, {"Vary": "Accept-Encoding"})
        if path == "/-/healthy":
            ok, why = self.health()
            return self._reply(200 if ok else 503, (why + "\n").encode())
        if path == "/-/ready":
            ok = self.ready()
            return self._reply(200 if ok else 503, b"ready\n" if ok else b"no collection cycle completed yet\n")
        if path == "/":
            return self._reply(200, LANDING, "text/html; charset=utf-8")
        return self._reply(404, b"Not Found\n")

    def _exposition(self, compressed: bool) -> bytes:
        """The exposition, rendered at most once per cycle and second: its only part that changes
        between cycles is the collection's age, in whole seconds to a scraper, and a flood of
        requests (pipelined ones cost nothing to send) must not cost a render and a copy each."""
        key = (self.collector.cycles_total, int(time.monotonic()), compressed)
        cached = self._expo_cache.get(compressed)
        if cached is not None and cached[0] == key:
            return cached[1]
        body = self.collector.exposition_gzip() if compressed else self.collector.exposition()
        self._expo_cache[compressed] = (key, body)
        return body

    async def _refused(self, request: web.BaseRequest) -> web.Response | None:
        """``None`` when the request may be served, else the answer: 401 for a wrong or missing
        password, 429 while its client is backing off, 503 while the bcrypt queue is full."""
        auth = self.web().auth
        if auth is None:
            return None
        peer = request.remote or "?"
        verdict = await self.gate.check(auth, request.headers.get("Authorization"), peer)
        if verdict is True:
            return None
        if verdict == BUSY:
            self.stats["auth_busy"] += 1
            return self._reply(503, b"Too many password checks; retry shortly\n", extra={"Retry-After": "1"})
        if verdict == BACKING_OFF:
            self.stats["auth_backing_off"] += 1
            wait_s = self.gate.retry_after(peer)
            resp = self._reply(429, b"Too many wrong passwords from this client; retry later\n",
                               extra={"Retry-After": str(max(1, round(wait_s)))}, close=True)
            resp.ccdiag_tarpit_s = min(max(wait_s, 0.1), TARPIT_MAX_S)  # type: ignore[attr-defined]
            return resp
        self.stats["auth_refused"] += 1
        return self._reply(401, b"Unauthorized\n", extra={"WWW-Authenticate": 'Basic realm="ccdiag"'})

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Connections open without a request in progress."""
        return sum(1 for c in list(self._conns) if not c.in_progress)

    @property
    def active(self) -> int:
        return self._active

    def alive(self, max_silence_s: float = 5.0) -> bool:
        """Whether the loop stamped its liveness (its listener serving) within ``max_silence_s``."""
        beat = self.beat
        thread = self._thread
        return (beat is not None and time.monotonic() - beat <= max_silence_s
                and thread is not None and thread.is_alive())

    def shutdown(self) -> None:
        """Stop the loop (from another thread) and wait for it to close its connections."""
        self._stop_requested = True
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop is already closed
                return
        if self._thread is not None:
            self._stopped.wait(5.0)

    def server_close(self) -> None:
        self.gate.close()
        self.socket.close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"{self.web().scheme}://{shown}:{port}{self.metrics_path}"
