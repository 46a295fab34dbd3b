"""The HTTP(S) endpoint: ``/metrics``, ``/-/healthy``, ``/-/ready`` and a landing page.

A client costs a descriptor, never a thread, until it has sent a whole request header. One loop
(``selectors``) accepts connections, runs their TLS handshakes without blocking and collects their
request headers, each within :data:`HEADER_TIMEOUT_S`; only a connection with a complete header
is *admitted*, onto one of at most ``max_requests`` worker threads (``--web.max-requests``, the
bound exporter-toolkit's exporters have). A request beyond that bound is answered 503 at once. A
keep-alive connection goes back to the loop between requests, so idle clients hold no thread.
Measured with hostile clients in ``bench/bench_daemon_flood.py``: why each bound is what it is.

* Half-open and idle connections are bounded by descriptors: when the pending ones reach
  ``max_connections`` (the descriptor limit less a reserve), the oldest is closed to make room, so
  a flood cannot lock out a scraper that completes its request in milliseconds.
* When ``accept`` fails for want of descriptors (EMFILE/ENFILE), the loop stops accepting for a
  while that doubles from 5 ms to 1 s (as Go's net/http does) and closes the oldest pending
  connection, rather than spinning on a listening socket that stays readable.

Handlers only read what the collection loop published: a scrape never waits on a probe. The web
configuration (TLS context, users, headers) is looked up per connection, so a SIGHUP reload
applies to the next connection without restarting the listener.
"""

from __future__ import annotations

import collections
import errno
import io
import logging
import os
import resource
import selectors
import socket
import socketserver
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from typing import Callable

from ccdiag.exporters.collector import CycleCollector
from ccdiag.exporters.webconfig import WebConfig

log = logging.getLogger("ccdiag.daemon")

#: the text format generate_latest writes (named here: older prometheus_client lacks the constant)
CONTENT_TYPE_PLAIN_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
#: seconds a keep-alive connection may sit idle between requests, and a response may take to send
CONNECTION_TIMEOUT_S = 30.0
#: seconds from a connection's first byte (or its acceptance) to a complete request header, TLS
#: handshake included; a scraper needs milliseconds
HEADER_TIMEOUT_S = 10.0
#: concurrent requests served (exporter-toolkit's --web.max-requests defaults to 40)
DEFAULT_MAX_REQUESTS = 40
#: the largest request header read (the standard library's own line and header limits are 64 KiB)
MAX_HEADER_BYTES = 64 << 10
#: descriptors kept free for what the daemon opens besides connections (reloads, the journal)
FD_RESERVE = 64
#: accept back-off when descriptors run out: first and longest pause (seconds)
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.005, 1.0

_BUSY_BODY = b"Too many concurrent requests; retry shortly\n"
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_BUSY_BODY)) + _BUSY_BODY


LANDING = b"""<!doctype html><html><head><title>ccdiag exporter</title></head><body>
<h1>ccdiag exporter</h1><p><a href="/metrics">Metrics</a> &middot; <a href="/-/healthy">Health</a></p>
</body></html>
"""


def parse_listen(listen: str) -> tuple[str, int]:
    """``ADDR:PORT``, ``[v6]:PORT`` or ``:PORT`` (all interfaces) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address {listen!r} must be ADDR:PORT, e.g. 127.0.0.1:9643")
    host = host.strip("[]")
    return host, int(port)


def default_max_connections() -> int:
    """Pending connections held at most: the soft descriptor limit less :data:`FD_RESERVE`."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ValueError, OSError):
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(16, soft - FD_RESERVE)


class _Conn:
    """A connection the loop holds: accepted, not (or no longer) in a worker."""

    __slots__ = ("sock", "addr", "buf", "deadline", "handshaking")

    def __init__(self, sock: socket.socket, addr, deadline: float, handshaking: bool, buf: bytes = b""):
        self.sock, self.addr, self.deadline, self.handshaking = sock, addr, deadline, handshaking
        self.buf = bytearray(buf)

    def has_request(self) -> bool:
        return b"\r\n\r\n" in self.buf or b"\n\n" in self.buf


class MetricsServer:
    """The listener, the loop and the bounded workers (see the module docstring)."""

    #: a burst of scrapers (several Prometheus replicas, a federation, curl) must queue, not be refused
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], collector: CycleCollector, web: Callable[[], WebConfig],
                 health: Callable[[], tuple[bool, str]], ready: Callable[[], bool], metrics_path: str = "/metrics",
                 max_requests: int = DEFAULT_MAX_REQUESTS, max_connections: int | None = None,
                 header_timeout_s: float = HEADER_TIMEOUT_S, idle_timeout_s: float = CONNECTION_TIMEOUT_S):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.metrics_path = metrics_path
        self.collector, self.web, self.health, self.ready = collector, web, health, ready
        self.max_requests = max(1, int(max_requests))
        self.max_connections = max_connections or default_max_connections()
        self.header_timeout_s, self.idle_timeout_s = header_timeout_s, idle_timeout_s
        self.socket = socket.socket(self.address_family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(self.request_queue_size)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._pool = ThreadPoolExecutor(max_workers=self.max_requests, thread_name_prefix="ccdiag-http")
        self._lock = threading.Lock()
        self._active = 0  # requests in workers
        self._returned: collections.deque = collections.deque()  # keep-alive connections back from workers
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._pending: dict[int, _Conn] = {}  # fd -> connection, oldest first
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._backoff_s = 0.0
        self._resume_at = 0.0
        self.stats = collections.Counter()  # accepted, admitted, busy, evicted, timed_out, accept_errors

    # -- the loop ----------------------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        sel = selectors.DefaultSelector()
        self._sel = sel
        sel.register(self.socket, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        listening = True
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if not listening and now >= self._resume_at:
                    sel.register(self.socket, selectors.EVENT_READ, "listen")
                    listening = True
                for key, events in sel.select(self._timeout(poll_interval, listening, now)):
                    if key.data == "listen":
                        listening = self._accept(sel)
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._readable(sel, key.data)
                self._take_returned(sel)
                self._expire(sel, time.monotonic())
        finally:
            for conn in list(self._pending.values()):
                self._close(sel, conn)
            sel.close()
            self._stopped.set()

    def _timeout(self, poll_interval: float, listening: bool, now: float) -> float:
        t = min(poll_interval, 0.5)
        if not listening:
            t = min(t, max(0.0, self._resume_at - now))
        return t

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def get_request(self) -> tuple[socket.socket, tuple]:
        """Accept one connection (raises ``BlockingIOError`` when none is waiting)."""
        sock, addr = self.socket.accept()
        try:
            # headers and a gzip body go out as separate writes: without this, Nagle's algorithm
            # waits for the client's delayed ACK (about 40 ms) before the body leaves
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        return sock, addr

    def _accept(self, sel: selectors.BaseSelector) -> bool:
        """Accept what is waiting; returns whether the listener stays registered."""
        for _ in range(64):
            try:
                sock, addr = self.get_request()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return self._back_off(sel, exc)
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue
                raise
            self._backoff_s = 0.0
            self.stats["accepted"] += 1
            if len(self._pending) >= self.max_connections:
                self._evict_oldest(sel)
            self._hold(sel, sock, addr)
        return True

    def _back_off(self, sel: selectors.BaseSelector, exc: OSError) -> bool:
        self.stats["accept_errors"] += 1
        self._backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, self._backoff_s * 2))
        self._resume_at = time.monotonic() + self._backoff_s
        if self._backoff_s >= BACKOFF_MAX_S or self.stats["accept_errors"] % 100 == 1:
            log.warning("cannot accept a connection (%s): pausing %.3fs", exc.strerror or exc, self._backoff_s)
        self._evict_oldest(sel)
        sel.unregister(self.socket)
        return False

    def _hold(self, sel: selectors.BaseSelector, sock: socket.socket, addr) -> None:
        ctx = self.web().ssl_context
        handshaking = ctx is not None
        try:
            sock.setblocking(False)
            if handshaking:
                sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError):
            sock.close()
            return
        conn = _Conn(sock, addr, time.monotonic() + self.header_timeout_s, handshaking)
        self._pending[sock.fileno()] = conn
        sel.register(sock, selectors.EVENT_READ, conn)

    def _evict_oldest(self, sel: selectors.BaseSelector) -> None:
        for conn in self._pending.values():
            self.stats["evicted"] += 1
            self._close(sel, conn)
            return

    def _close(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            self._pending.pop(fd, None)
            try:
                sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def _readable(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        try:
            if conn.handshaking:
                conn.sock.do_handshake()
                conn.handshaking = False
            self._read_header(conn)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        except (OSError, ValueError, EOFError) as exc:
            log.debug("connection from %s ended: %s", conn.addr, exc)
            self._close(sel, conn)
            return
        if conn.has_request():
            self._admit(sel, conn)
        elif len(conn.buf) > MAX_HEADER_BYTES:
            self._close(sel, conn)

    @staticmethod
    def _read_header(conn: _Conn) -> None:
        while len(conn.buf) <= MAX_HEADER_BYTES:
            data = conn.sock.recv(16384)
            if not data:
                raise EOFError("closed by the client")
            if not conn.buf:  # the first byte of a request on a kept-alive connection
                conn.deadline = min(conn.deadline, time.monotonic() + HEADER_TIMEOUT_S)
            conn.buf += data
            if conn.has_request():
                return

    def _admit(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        self._pending.pop(conn.sock.fileno(), None)
        sel.unregister(conn.sock)
        with self._lock:
            busy = self._active >= self.max_requests
            if not busy:
                self._active += 1
        if busy:
            self.stats["busy"] += 1
            try:
                conn.sock.send(_BUSY)
            except OSError:
                pass
            conn.sock.close()
            return
        self.stats["admitted"] += 1
        self._pool.submit(self._work, conn)

    def _take_returned(self, sel: selectors.BaseSelector) -> None:
        while self._returned:
            conn = self._returned.popleft()
            if self._stop.is_set():
                conn.sock.close()
                continue
            try:
                conn.sock.setblocking(False)
            except OSError:
                conn.sock.close()
                continue
            self._pending[conn.sock.fileno()] = conn
            if conn.has_request():  # a pipelined request already read
                self._admit(sel, conn)
            else:
                sel.register(conn.sock, selectors.EVENT_READ, conn)

    def _expire(self, sel: selectors.BaseSelector, now: float) -> None:
        if not self._pending or now < getattr(self, "_next_expiry", 0.0):
            return
        self._next_expiry = now + 0.25
        for conn in [c for c in self._pending.values() if c.deadline <= now]:
            self.stats["timed_out"] += 1
            self._close(sel, conn)

    # -- the workers ---------------------------------------------------------------------------
    def _work(self, conn: _Conn) -> None:
        keep = False
        try:
            conn.sock.settimeout(self.idle_timeout_s)
            handler = _Handler(conn, self)
            keep = not handler.close_connection
            conn.buf = bytearray(handler.rfile.read())  # what the client sent after this request
        except Exception:  # noqa: BLE001 - one connection's failure ends that connection only
            log.debug("connection from %s ended with an error", conn.addr, exc_info=True)
        finally:
            with self._lock:
                self._active -= 1
        if keep and not self._stop.is_set():
            conn.deadline = time.monotonic() + self.idle_timeout_s
            self._returned.append(conn)
            self._wake()
        else:
            try:
                conn.sock.close()
            except OSError:
                pass

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def active(self) -> int:
        return self._active

    def shutdown(self) -> None:
        """Stop the loop (from another thread) and wait for it to close its connections."""
        self._stop.set()
        self._wake()
        if hasattr(self, "_sel"):
            self._stopped.wait(5.0)

    def server_close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.socket.close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"{self.web().scheme}://{shown}:{port}{self.metrics_path}"


class _Handler(BaseHTTPRequestHandler):
    """One request of an admitted connection: its header was read by the loop (``conn.buf``)."""

    protocol_version = "HTTP/1.1"
    server: MetricsServer

    def __init__(self, conn: _Conn, server: MetricsServer):
        self.conn = conn
        super().__init__(conn.sock, conn.addr, server)

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BytesIO(bytes(self.conn.buf))
        self.wfile = socketserver._SocketWriter(self.request)  # sendall: a large body in full

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()

    def finish(self) -> None:
        try:
            self.wfile.close()
        except OSError:
            pass

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
              extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in {**self.server.web().headers, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authorised(self) -> bool:
        auth = self.server.web().auth
        if auth is None or auth.check(self.headers.get("Authorization")):
            return True
        self._send(401, b"Unauthorized\n", extra={"WWW-Authenticate": 'Basic realm="ccdiag"'})
        return False

    def do_GET(self) -> None:  # noqa: N802 - the base class's naming
        if not self._authorised():
            return
        path = self.path.split("?", 1)[0]
        if path == self.server.metrics_path:
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                self._send(200, self.server.collector.exposition_gzip(), CONTENT_TYPE_PLAIN_0_0_4,
                           extra={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
            else:
                self._send(200, self.server.collector.exposition(), CONTENT_TYPE_PLAIN_0_0_4,
                           extra={"Vary": "Accept-Encoding"})
        elif path == "/-/healthy":
            ok, why = self.server.health()
            self._send(200 if ok else 503, (why + "\n").encode())
        elif path == "/-/ready":
            ok = self.server.ready()
            self._send(200 if ok else 503, b"ready\n" if ok else b"no collection cycle completed yet\n")
        elif path == "/":
            self._send(200, LANDING, "text/html; charset=utf-8")
        else:
            self._send(404, b"Not Found\n")

    do_HEAD = do_GET
