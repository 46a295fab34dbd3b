"""The HTTP(S) endpoint: ``/metrics``, ``/-/healthy``, ``/-/ready`` and a landing page.

One thread per connection (``ThreadingHTTPServer``) with HTTP/1.1 keep-alive, so a slow or stalled
client never holds up another; each connection has a socket timeout, and the TLS handshake happens
in the connection's own thread rather than in the accept loop. Handlers only read what the
collection loop published: a scrape never waits on a probe.

The web configuration (TLS context, users, headers) is looked up on every request, so a SIGHUP
reload applies to the next connection without restarting the listener.
"""

from __future__ import annotations

import logging
import socket
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from ccdiag.exporters.collector import CycleCollector
from ccdiag.exporters.webconfig import WebConfig

log = logging.getLogger("ccdiag.daemon")

#: the text format generate_latest writes (named here: older prometheus_client lacks the constant)
CONTENT_TYPE_PLAIN_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
#: seconds a connection may sit idle (keep-alive) or take for its TLS handshake
CONNECTION_TIMEOUT_S = 30.0

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


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    #: a burst of scrapers (several Prometheus replicas, a federation, curl) must queue, not be refused
    request_queue_size = 128
    block_on_close = False

    def __init__(self, address: tuple[str, int], collector: CycleCollector, web: Callable[[], WebConfig],
                 health: Callable[[], tuple[bool, str]], ready: Callable[[], bool], metrics_path: str = "/metrics"):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.metrics_path = metrics_path
        self.collector = collector
        self.web = web
        self.health = health
        self.ready = ready
        super().__init__(address, _Handler)

    def get_request(self):
        sock, addr = super().get_request()
        sock.settimeout(CONNECTION_TIMEOUT_S)
        try:
            # headers and a gzip body go out as separate writes: without this, Nagle's algorithm
            # waits for the client's delayed ACK (about 40 ms) before the body leaves
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        ctx = self.web().ssl_context
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request, client_address) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"{self.web().scheme}://{shown}:{port}{self.metrics_path}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: MetricsServer

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            try:
                self.request.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS handshake with %s failed: %s", self.client_address, exc)
                raise
        super().setup()

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
