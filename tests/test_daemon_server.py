"""The endpoint under hostile clients: idle and half-open connections hold no thread and are closed
at the header timeout, pipelined requests are answered in order, requests beyond --web.max-requests
get 503 at once, a flood past the connection bound evicts the oldest idle connection, wrong passwords
are remembered and bcrypt runs one at a time behind the cache; the collection process reads its
children through selectors (descriptors above 1,023) and leaves no process when the daemon stops.
Loopback addresses only (the attack suite is tests/test_daemon_attacks.py)."""

from __future__ import annotations

import base64
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

import exporter_cases as C
from ccdiag.exporters import isolation
from ccdiag.exporters.collector import CycleCollector
from ccdiag.exporters.daemon import Daemon, DaemonConfig, load_config
from ccdiag.exporters.server import MetricsServer
from ccdiag.exporters.webconfig import WebConfig

pytestmark = pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"condition not reached within {timeout:.0f}s")


def get(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def serve():
    servers = []

    def start(collector=None, **kw) -> MetricsServer:
        srv = MetricsServer(("127.0.0.1", 0), collector or CycleCollector(), lambda: WebConfig(),
                            lambda: (True, "ok"), lambda: True, **kw)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def connect(srv: MetricsServer) -> socket.socket:
    return socket.create_connection(srv.server_address[:2], timeout=5)


def test_idle_connections_hold_no_thread_and_scrapes_keep_answering(serve):
    srv = serve(max_requests=4)
    assert get(srv.url) == 200
    threads = threading.active_count()
    idle = [connect(srv) for _ in range(100)]
    wait_for(lambda: srv.pending >= 100)
    for _ in range(20):
        assert get(srv.url) == 200
    assert threading.active_count() <= threads + 1  # one loop holds them all, no thread per connection
    for s in idle:
        s.close()


def test_a_half_open_connection_is_closed_at_the_header_timeout(serve):
    srv = serve(header_timeout_s=0.5)
    silent, partial = connect(srv), connect(srv)
    partial.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finishes its header
    t0 = time.monotonic()
    assert silent.recv(1) == b"" and partial.recv(1) == b""  # closed by the server
    assert time.monotonic() - t0 < 10.0  # closed by the 0.5 s header timeout; without it, never
    assert srv.stats["timed_out"] >= 2 and srv.pending == 0


def test_pipelined_requests_are_answered_in_order_and_the_server_lives_on(serve):
    srv = serve()
    s = connect(srv)
    s.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
              b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", got)
    assert statuses == [b"200", b"404", b"200", b"200"]
    assert got.rstrip().endswith(b"</html>")
    assert get(srv.url) == 200 and srv.alive()


def test_http_1_0_head_and_gzip_are_served_as_node_exporter_serves_them(serve):
    srv = serve()
    s = connect(srv)
    s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    got = b"".join(iter(lambda: s.recv(65536), b""))  # HTTP/1.0: the server closes after the answer
    assert got.startswith(b"HTTP/1.0 200") and b"# HELP" in got
    s = connect(srv)
    s.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
    head = b"".join(iter(lambda: s.recv(65536), b""))
    assert b"Content-Encoding: gzip" in head and head.endswith(b"\r\n\r\n")  # headers only
    assert int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]) > 0


def test_an_oversized_header_is_refused_with_400_and_the_connection_only(serve):
    srv = serve()
    s = connect(srv)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    assert s.recv(64).startswith(b"HTTP/1.0 400") or s.recv(64).startswith(b"HTTP/1.1 400")
    assert get(srv.url) == 200


def test_a_request_beyond_max_requests_gets_503_at_once(serve):
    release = threading.Event()
    srv = serve(max_requests=1)
    real = srv._respond

    async def slow(request):
        import asyncio

        if request.path == "/slow":
            while not release.is_set():
                await asyncio.sleep(0.02)
        return await real(request)

    srv._respond = slow
    first = threading.Thread(target=get, args=(srv.url.replace("/metrics", "/slow"),))
    first.start()
    wait_for(lambda: srv.active == 1)
    t0 = time.monotonic()
    assert get(srv.url) == 503
    assert time.monotonic() - t0 < 8.0  # at once, not after the first request ends
    release.set()
    first.join(10)
    assert get(srv.url) == 200


def test_a_flood_past_the_connection_bound_evicts_the_oldest(serve):
    srv = serve(max_connections=20)
    flood = [connect(srv) for _ in range(60)]
    wait_for(lambda: srv.stats["accepted"] >= 60)
    assert srv.pending <= 20 and srv.stats["evicted"] >= 40
    assert flood[0].recv(1) == b""  # the oldest went first
    assert get(srv.url) == 200
    for s in flood:
        s.close()


def test_the_liveness_stamp_stops_when_the_loop_stops(serve):
    srv = serve()
    wait_for(srv.alive)
    srv._loop.call_soon_threadsafe(srv._loop.stop)  # the loop dies, the listening socket stays open
    wait_for(lambda: not srv.alive(max_silence_s=0.5))


def test_wrong_passwords_are_remembered_and_bcrypt_runs_one_at_a_time():
    bcrypt = pytest.importorskip("bcrypt")
    from ccdiag.exporters.webconfig import BasicAuth

    auth = BasicAuth({"prometheus": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()})
    running, most = [0], [0]
    lock = threading.Lock()
    real = auth._bcrypt

    def counted(user, password):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        try:
            return real(user, password)
        finally:
            with lock:
                running[0] -= 1

    auth._bcrypt = counted

    def header(user, password):
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    threads = [threading.Thread(target=auth.check, args=(header("prometheus", f"wrong{i % 4}"),))
               for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    assert auth.bcrypt_checks == 4  # each distinct wrong password checked once
    assert auth.check(header("prometheus", "wrong0")) is False and auth.bcrypt_checks == 4
    assert auth.check(header("prometheus", "s3cret")) is True
    assert auth.check(header("nobody", "s3cret")) is False


def test_the_parent_reads_a_child_whose_pipe_is_above_descriptor_1023():
    soft, hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)
    if min(soft, hard) < 1200:
        pytest.skip("descriptor limit below 1200")
    job = isolation.start(lambda: 42)
    high = os.dup2(job.fd, 1100)
    os.close(job.fd)
    job.fd = high
    isolation.wait([job], time.monotonic() + 10)
    assert job.result == 42 and job.exited and job.error is None


def test_a_child_past_its_deadline_is_killed_and_reaped_with_its_commands():
    # a duration no other process on the machine uses (another test run may be sleeping 60 s too)
    SLEEP_S = f"60.{os.getpid()}"

    def hang():
        from ccdiag.host.door import LiveHost

        LiveHost("/").run(["sleep", SLEEP_S], timeout=60)

    job = isolation.start(hang)
    time.sleep(0.5)
    isolation.wait([job], time.monotonic() + 0.5)
    assert job.killed and job.exited
    assert not job.groups
    sleepers = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", SLEEP_S]]
    assert sleepers == []


def test_max_requests_is_a_setting_with_a_range(tmp_path):
    cfg = tmp_path / "d.toml"
    cfg.write_text("max_requests = 8\n")
    assert load_config(str(cfg), {}).max_requests == 8
    cfg.write_text("max_requests = 0\n")
    with pytest.raises(ValueError, match="max_requests must be a whole number from 1"):
        load_config(str(cfg), {})


def test_a_stopped_daemon_leaves_no_process():
    from ccdiag.host.door import ReplayHost

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", interval_s=600.0), host=ReplayHost(str(C.HEALTHY)))
    d.start()
    try:
        wait_for(d.ready, 30)
        assert d._collection.pid in {p.pid for p in me.children()}
    finally:
        d.stop()
    assert {p.pid for p in me.children(recursive=True)} - before == set()


@pytest.mark.slow  # a child process
def test_check_never_imports_the_http_library():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "ccdiag", "check", "--replay", str(C.HEALTHY)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ccdiag.run.checkrun" in out.stderr
    assert "aiohttp" not in out.stderr


def test_a_refused_request_waits_paused_while_scrapes_are_answered(serve):
    """Garbage is answered 400 only after the refusal delay (the connection paused), as Go's server
    lingers: a client sending it in a closed loop runs at that pace; scrapes are not held up."""
    srv = serve(refusal_delay_s=30.0)
    s = connect(srv)
    s.sendall(b"\x16\x03\x01garbage that is no request\r\n\r\n")
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):
        s.recv(64)  # not answered at once
    assert get(srv.url) == 200
    assert srv.stats["refused"] == 1
    s.close()
    quick = serve(refusal_delay_s=0.0)
    q = connect(quick)
    q.sendall(b"\x16\x03\x01garbage\r\n\r\n")
    assert q.recv(64).startswith(b"HTTP/1.")


def test_a_pipelining_connection_waits_its_turn_and_a_fresh_scrape_does_not(serve):
    srv = serve(pipelined_per_s=0.2)  # one pipelined answer every 5 s
    s = connect(srv)
    s.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
    wait_for(lambda: srv.stats["pipelined_paced"] >= 1)
    assert get(srv.url) == 200  # a scraper's fresh connection is never paced
    assert srv.stats["pipelined_paced"] >= 1 and srv.pending >= 0
    s.close()
