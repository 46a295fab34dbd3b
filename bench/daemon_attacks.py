"""Hostile HTTP clients and a well-behaved scraper, for the attack suite (tests/test_daemon_attacks.py)
and its benchmark against node_exporter (bench/bench_daemon_attacks.py). Loopback targets only.

Each attack runs in threads of the calling process until :meth:`Attack.stop`, each sized by a count:

* ``pipelining``: clients sending bursts of pipelined GETs in one packet (RFC 9112 §9.3.2), reading
  every answer, again and again;
* ``slowloris``: connections dripping one byte of a request header every half second;
* ``half_open``: connections that never send a byte (reopened as soon as the server closes one);
* ``oversized``: requests whose header fields are far beyond any server's bound;
* ``random_bytes``: connections sending random bytes instead of HTTP;
* ``tls_garbage``: connections sending random bytes, or a TLS record header and then nothing, to a
  TLS port;
* ``wrong_passwords``: clients asking with a fresh wrong password each time (basic auth on).

:class:`Scraper` scrapes like Prometheus does (a fresh connection per scrape here, the scrape
timeout as the socket timeout) and records each scrape's outcome and duration.
"""

from __future__ import annotations

import base64
import http.client
import os
import random
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Target:
    host: str
    port: int
    tls: ssl.SSLContext | None = None  # the client's context (verifying the server's certificate)
    auth: tuple[str, str] | None = None  # (user, password) of the well-behaved scraper
    path: str = "/metrics"

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Scraper:
    """Scrapes ``target`` every ``every_s`` with ``timeout_s``; :attr:`results` holds (ok, seconds, why)."""

    target: Target
    every_s: float = 0.25
    timeout_s: float = 5.0
    results: list[tuple[bool, float, str]] = field(default_factory=list)

    def scrape_once(self) -> tuple[bool, float, str]:
        t0 = time.monotonic()
        headers = {"Accept-Encoding": "gzip"}
        if self.target.auth:
            headers["Authorization"] = _basic(*self.target.auth)
        conn = self.target.connection(self.timeout_s)
        try:
            conn.request("GET", self.target.path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            ok, why = resp.status == 200 and len(body) > 0, f"HTTP {resp.status}"
        except (OSError, http.client.HTTPException) as exc:
            ok, why = False, f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        took = time.monotonic() - t0
        return ok and took <= self.timeout_s, took, why

    def body(self) -> bytes:
        """One plain scrape's body (no gzip): the exposition's size."""
        conn = self.target.connection(self.timeout_s)
        try:
            headers = {"Authorization": _basic(*self.target.auth)} if self.target.auth else {}
            conn.request("GET", self.target.path, headers=headers)
            return conn.getresponse().read()
        finally:
            conn.close()

    def run_for(self, seconds: float) -> list[tuple[bool, float, str]]:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.monotonic()
            self.results.append(self.scrape_once())
            time.sleep(max(0.0, self.every_s - (time.monotonic() - started)))
        return self.results


class Attack:
    """``count`` hostile clients against ``target`` in background threads."""

    name = "attack"
    threads_per_attack = True  # one thread per client; holders use one thread for all

    def __init__(self, target: Target, count: int, seed: int = 1):
        self.target, self.count = target, count
        self.rng = random.Random(seed)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.sent = 0

    def start(self) -> "Attack":
        n = self.count if self.threads_per_attack else 1
        for i in range(n):
            t = threading.Thread(target=self._guard, args=(i,), daemon=True, name=f"{self.name}-{i}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _guard(self, i: int) -> None:
        while not self._stop.is_set():
            try:
                self.client(i)
            except (OSError, ssl.SSLError, ValueError):
                time.sleep(0.01)

    def _connect(self, timeout: float = 5.0) -> socket.socket:
        return socket.create_connection((self.target.host, self.target.port), timeout=timeout)

    def client(self, i: int) -> None:
        raise NotImplementedError


def _drain(sock: socket.socket, until: float) -> bytes:
    got = b""
    while time.monotonic() < until:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        got += chunk
    return got


class Pipelining(Attack):
    name = "pipelining"

    def client(self, i: int) -> None:
        sock = self._connect()
        if self.target.tls is not None:
            sock = self.target.tls.wrap_socket(sock, server_hostname=self.target.host)
        auth = f"Authorization: {_basic(*self.target.auth)}\r\n" if self.target.auth else ""
        burst = (f"GET {self.target.path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n" * 8).encode()
        with sock:
            for _ in range(5):
                if self._stop.is_set():
                    return
                sock.sendall(burst)
                self.sent += 8
                _drain(sock, time.monotonic() + 0.3)


class _Holder(Attack):
    """Keeps ``count`` connections open in one thread, each fed by :meth:`feed`; a connection the
    server closes is opened again."""

    threads_per_attack = False
    drip_s = 0.5

    def client(self, i: int) -> None:
        sel = selectors.DefaultSelector()
        conns: dict[socket.socket, int] = {}
        try:
            while not self._stop.is_set():
                while len(conns) < self.count and not self._stop.is_set():
                    try:
                        s = self._connect(timeout=2.0)
                    except OSError:
                        time.sleep(0.05)
                        break
                    s.setblocking(False)
                    conns[s] = 0
                    self.sent += 1  # a connection opened is this attack's act
                    sel.register(s, selectors.EVENT_READ)
                for key, _ in sel.select(self.drip_s):
                    s = key.fileobj
                    try:
                        data = s.recv(4096)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if not data:  # closed by the server: open another
                        sel.unregister(s)
                        conns.pop(s, None)
                        s.close()
                for s in list(conns):
                    piece = self.feed(conns[s])
                    if piece:
                        try:
                            s.send(piece)
                            conns[s] += 1
                        except OSError:
                            pass
        finally:
            for s in conns:
                s.close()
            sel.close()

    def feed(self, step: int) -> bytes:
        return b""


class HalfOpen(_Holder):
    name = "half_open"


class Slowloris(_Holder):
    name = "slowloris"
    REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\n" + b"X-a: b\r\n" * 500

    def feed(self, step: int) -> bytes:
        return self.REQUEST[step:step + 1]


class TlsHalfHandshake(_Holder):
    """TLS record headers that promise a ClientHello and never deliver it."""

    name = "tls_half_handshake"

    def feed(self, step: int) -> bytes:
        return b"\x16\x03\x01\x02\x00" if step == 0 else b""


class Oversized(Attack):
    name = "oversized"

    def client(self, i: int) -> None:
        sock = self._connect()
        if self.target.tls is not None:
            sock = self.target.tls.wrap_socket(sock, server_hostname=self.target.host)
        with sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (256 << 10) + b"\r\n\r\n")
            self.sent += 1
            _drain(sock, time.monotonic() + 1.0)


class RandomBytes(Attack):
    name = "random_bytes"

    def client(self, i: int) -> None:
        with self._connect() as sock:
            sock.sendall(os.urandom(self.rng.choice((16, 512, 4096))))
            self.sent += 1
            _drain(sock, time.monotonic() + 0.5)


class TlsGarbage(Attack):
    """Random bytes, or a TLS record header followed by random bytes, to a TLS port."""

    name = "tls_garbage"

    def client(self, i: int) -> None:
        with self._connect() as sock:
            head = b"\x16\x03\x01\x00\xc8" if self.rng.random() < 0.5 else b""
            sock.sendall(head + os.urandom(self.rng.choice((64, 200, 2048))))
            self.sent += 1
            _drain(sock, time.monotonic() + 0.5)


class WrongPasswords(Attack):
    name = "wrong_passwords"

    def client(self, i: int) -> None:
        user = self.target.auth[0] if self.target.auth else "prometheus"
        conn = self.target.connection(10.0)
        try:
            conn.request("GET", self.target.path,
                         headers={"Authorization": _basic(user, f"wrong-{i}-{self.rng.random()}")})
            conn.getresponse().read()
            self.sent += 1
        except (OSError, http.client.HTTPException):
            time.sleep(0.01)
        finally:
            conn.close()


#: every attack by name, and whether it needs a TLS port / basic auth on the target
ATTACKS: dict[str, type[Attack]] = {a.name: a for a in (Pipelining, Slowloris, HalfOpen, Oversized, RandomBytes,
                                                         TlsGarbage, TlsHalfHandshake, WrongPasswords)}
NEEDS_TLS = {"tls_garbage", "tls_half_handshake"}
NEEDS_AUTH = {"wrong_passwords"}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def make_cert(directory: str) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (openssl's command line), (cert path, key path)."""
    import subprocess

    cert, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key
