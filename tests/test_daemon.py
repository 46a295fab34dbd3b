"""The daemon: scrapes never wait on probes, failures are marked while everything else is served,
signals, systemd notification, TLS and basic auth. Loopback addresses only."""

from __future__ import annotations

import base64
import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

import exporter_cases as C
from ccdiag.exporters.daemon import ConfigError, Daemon, DaemonConfig, load_config, parse_config
from ccdiag.exporters.webconfig import WebConfigError, load_web_config
from ccdiag.host.door import ReplayHost
from ccdiag.host.snapshot import SnapshotData
from test_metrics import value

pytestmark = pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")


def wait_for(pred, timeout=20.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise AssertionError("condition not reached within %.0fs" % timeout)


def fetch(url, timeout=5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def run_daemon():
    started = []

    def start(host=None, isolate=None, **cfg):
        cfg.setdefault("listen", "127.0.0.1:0")
        cfg.setdefault("interval_s", 600.0)  # cycles run when a test asks (next_cycle), never mid-patch
        config = DaemonConfig(**cfg)
        d = Daemon(config, host=host if host is not None else ReplayHost(str(C.HEALTHY)), isolate=isolate)
        d.start()
        started.append(d)
        wait_for(d.ready)
        return d

    yield start
    for d in started:
        d.stop()


def cycles(d) -> int:
    return d.collector.cycles_total


def next_cycle(d, timeout=20.0):
    """Run one more cycle with what the test patched since the last: cycles are forked from a
    collection process forked at start, so a patch reaches them through a fresh one."""
    d.restart_collection()
    n = cycles(d)
    d.request_cycle()
    wait_for(lambda: cycles(d) > n, timeout)


def test_endpoint_serves_the_sample_with_health_and_ready(run_daemon):
    d = run_daemon()
    code, text = fetch(d.server.url)
    assert code == 200
    assert value(text, "ccdiag_probe_success", probe="nvml") == 1
    assert value(text, "ccdiag_gpu_info", gpu=7) == 1
    assert value(text, "ccdiag_collection_age_seconds") >= 0
    base = d.server.url.rsplit("/", 1)[0]
    assert fetch(base + "/-/healthy")[0] == 200
    assert fetch(base + "/-/ready")[0] == 200
    assert fetch(base + "/nope")[0] == 404
    with urllib.request.urlopen(d.server.url, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")


def test_gzip_scrape_decodes_to_the_same_exposition(run_daemon):
    import gzip

    d = run_daemon()
    host, port = d.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.getheader("Content-Encoding") == "gzip"
        conn.request("GET", "/metrics")  # same keep-alive connection, uncompressed
        plain = conn.getresponse().read().decode()
    finally:
        conn.close()
    unzipped = gzip.decompress(body).decode()

    def strip_age(text):
        return [ln for ln in text.splitlines() if not ln.startswith("ccdiag_collection_age_seconds")]

    if value(unzipped, "ccdiag_collection_cycles_total") == value(plain, "ccdiag_collection_cycles_total"):
        assert strip_age(unzipped) == strip_age(plain)
    assert value(unzipped, "ccdiag_collection_age_seconds") >= 0
    assert len(body) * 4 < len(plain)


def test_a_probe_that_raises_is_marked_and_the_rest_still_served(run_daemon, monkeypatch):
    d = run_daemon()
    before = fetch(d.server.url)[1]
    assert value(before, "ccdiag_probe_success", probe="kmsg") == 1

    def boom(host):
        raise RuntimeError("simulated probe bug")

    monkeypatch.setattr("ccdiag.probes.kmsg.collect", boom)
    next_cycle(d)
    code, text = fetch(d.server.url)
    assert code == 200
    assert value(text, "ccdiag_probe_success", probe="kmsg") == 0
    assert value(text, "ccdiag_probe_status", probe="kmsg", status="failed") == 1
    assert value(text, "ccdiag_probe_data_stale", probe="kmsg") == 1
    for probe in ("nvml", "pcie", "infiniband", "system"):
        assert value(text, "ccdiag_probe_success", probe=probe) == 1
    assert value(text, "ccdiag_gpu_temperature_celsius", gpu=0) is not None


def test_a_probe_that_hangs_in_a_collection_child_leaves_nothing_behind(run_daemon, monkeypatch):
    """Cycles run in a forked child: a hung probe is abandoned at its deadline and its thread ends
    with the child, so the daemon process holds no probe thread and the next cycle tries again."""
    import ccdiag.probes.nvml as nvml_probe

    real = nvml_probe.collect
    d = run_daemon()
    assert d.isolate
    monkeypatch.setattr(nvml_probe, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(nvml_probe, "collect", lambda host: time.sleep(60) or real(host))
    next_cycle(d)
    t0 = time.monotonic()
    code, text = fetch(d.server.url)
    assert code == 200 and time.monotonic() - t0 < 10.0  # the probe hangs 60 s: far below it
    assert value(text, "ccdiag_probe_success", probe="nvml") == 0
    assert value(text, "ccdiag_probe_status", probe="nvml", status="timeout") == 1
    assert value(text, "ccdiag_probe_data_stale", probe="nvml") == 1
    assert value(text, "ccdiag_probe_success", probe="pcie") == 1
    assert not any(t.name.startswith("probe-") for t in threading.enumerate())
    monkeypatch.setattr(nvml_probe, "collect", real)
    next_cycle(d)
    text = fetch(d.server.url)[1]
    assert value(text, "ccdiag_probe_success", probe="nvml") == 1
    assert value(text, "ccdiag_probe_data_stale", probe="nvml") == 0


def test_a_probe_that_hangs_never_blocks_a_scrape_and_is_not_restarted(run_daemon, monkeypatch):
    """In-process collection (where fork is missing): a stuck probe thread is not started again."""
    import ccdiag.probes.nvml as nvml_probe

    release = threading.Event()
    real = nvml_probe.collect
    calls = []

    def hang(host):
        calls.append(1)
        release.wait(60)
        return real(host)

    d = run_daemon(isolate=False)
    monkeypatch.setattr(nvml_probe, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(nvml_probe, "collect", hang)
    try:
        next_cycle(d)
        t0 = time.monotonic()
        code, text = fetch(d.server.url)
        assert code == 200 and time.monotonic() - t0 < 10.0  # served from the published cycle, not after the 60 s hang
        assert value(text, "ccdiag_probe_success", probe="nvml") == 0
        assert value(text, "ccdiag_probe_status", probe="nvml", status="timeout") == 1
        assert value(text, "ccdiag_probe_success", probe="pcie") == 1
        assert value(text, "ccdiag_check_severity", check="probe.timeout", component="nvml") == 3
        # later cycles do not start another thread while the first one is still stuck
        next_cycle(d)
        next_cycle(d)
        assert len(calls) == 1
        assert sum(t.name == "probe-nvml" for t in threading.enumerate()) == 1
        assert value(fetch(d.server.url)[1], "ccdiag_probe_success", probe="nvml") == 0
    finally:
        release.set()
    wait_for(lambda: not any(t.name == "probe-nvml" and t.is_alive() for t in threading.enumerate()))
    monkeypatch.setattr(nvml_probe, "collect", real)
    next_cycle(d)
    text = fetch(d.server.url)[1]
    assert value(text, "ccdiag_probe_success", probe="nvml") == 1
    assert value(text, "ccdiag_probe_data_stale", probe="nvml") == 0


def _corrupt_snapshot(**files) -> ReplayHost:
    snap = SnapshotData.load(str(C.HEALTHY))
    for path, data in files.items():
        for epoch in snap.files:
            if path in snap.files[epoch]:
                snap.files[epoch][path] = data
    return ReplayHost(snap)


SPEED = "/sys/devices/pci0000:02/0000:02:01.0/0000:03:00.0/0000:04:00.0/0000:05:00.0/current_link_speed"
STATE = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0/infiniband/mlx5_0/ports/1/state"


def test_corrupt_sysfs_files_lose_only_their_own_values(run_daemon):
    """Garbage in one file and an I/O error on another: the endpoint answers, those values are
    absent (not 0), the read error is counted, every sibling value is still there."""
    host = _corrupt_snapshot(**{SPEED: {"kind": "io", "errno": 5, "message": "Input/output error"},
                                STATE: b"\xfe\xfe garbage\n"})
    d = run_daemon(host=host)
    code, text = fetch(d.server.url)
    assert code == 200
    assert value(text, "ccdiag_probe_success", probe="pcie") == 1
    assert value(text, "ccdiag_probe_read_errors", probe="pcie") == 1
    assert value(text, "ccdiag_pcie_current_link_transfers_per_second", bdf="0000:05:00.0") is None
    assert value(text, "ccdiag_pcie_max_link_transfers_per_second", bdf="0000:05:00.0") == 32e9
    assert value(text, "ccdiag_infiniband_port_state_id", device="mlx5_0") is None
    assert value(text, "ccdiag_infiniband_port_state_id", device="mlx5_1") == 4
    assert value(text, "ccdiag_infiniband_port_physical_state_id", device="mlx5_0") == 5


# -- configuration ---------------------------------------------------------------------------------
def test_config_file_values_and_command_line_overrides(tmp_path):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text('listen = "127.0.0.1:9999"\ninterval = 30\nmax_stale = 60\nprobes = ["nvml", "pcie"]\n')
    config = load_config(str(cfg), {"interval_s": 5.0, "listen": None})
    assert (config.listen, config.interval_s, config.max_stale_s, config.probes) == \
        ("127.0.0.1:9999", 5.0, 60.0, ("nvml", "pcie"))


@pytest.mark.parametrize("text,needle", [
    ("interval = 'soon'", "interval must be"),
    ("bogus = 1", "unknown key 'bogus'"),
    ("listen = 'nowhere'", "ADDR:PORT"),
    ("probes = ['gpu']", "unknown probe 'gpu'"),
    ("interval = [", "not valid TOML"),
])
def test_bad_config_is_named(tmp_path, text, needle):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text + "\n")
    with pytest.raises(ConfigError, match=needle):
        load_config(str(cfg), {})


def test_bad_config_exits_2_with_one_line(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("bogus = 1\n")
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "daemon", "--config", str(cfg)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown key 'bogus'" in proc.stderr and "Traceback" not in proc.stderr


def test_parse_config_maps_names():
    assert parse_config("deadline = 12\nweb_config = 'w.yml'\n") == {"deadline_s": 12.0, "web_config": "w.yml"}


# -- subprocess: signals and systemd notification ----------------------------------------------------
def _spawn(tmp_path, *args, env=None):
    proc = subprocess.Popen([sys.executable, "-m", "ccdiag", "daemon", "--listen", "127.0.0.1:0",
                             "--replay", str(C.HEALTHY), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})
    line = proc.stderr.readline()
    assert "serving http://" in line, line + proc.stderr.read()
    return proc, line.split("serving ", 1)[1].split()[0]


def _stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def notify_socket(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    yield path, sock
    sock.close()


def _recv_until(sock, needle: str) -> list[str]:
    got = []
    while True:
        msg = sock.recv(4096).decode()
        got.append(msg)
        if needle in msg:
            return got


def test_sigterm_stops_the_daemon_cleanly_and_tells_systemd(tmp_path, notify_socket):
    path, sock = notify_socket
    proc, url = _spawn(tmp_path, "--interval", "0.5", env={"NOTIFY_SOCKET": path})
    try:
        assert any("READY=1" in m for m in _recv_until(sock, "READY=1"))
        assert fetch(url)[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        _recv_until(sock, "STOPPING=1")
        assert "Traceback" not in proc.stderr.read()
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)
    finally:
        _stop(proc)


def test_sighup_reloads_the_config_and_sigusr1_collects_now(tmp_path, notify_socket):
    path, sock = notify_socket
    cfg = tmp_path / "daemon.toml"
    cfg.write_text("interval = 600\n")
    proc, url = _spawn(tmp_path, "--config", str(cfg), env={"NOTIFY_SOCKET": path})
    try:
        _recv_until(sock, "READY=1")
        text = fetch(url)[1]
        assert value(text, "ccdiag_collection_interval_seconds") == 600
        assert value(text, "ccdiag_collection_cycles_total") == 1
        cfg.write_text("interval = 300\n")
        proc.send_signal(signal.SIGHUP)
        _recv_until(sock, "RELOADING=1")
        _recv_until(sock, "READY=1")
        wait_for(lambda: value(fetch(url)[1], "ccdiag_collection_interval_seconds") == 300)
        # a broken file on reload keeps the running settings
        cfg.write_text("interval = 'x'\n")
        proc.send_signal(signal.SIGHUP)
        _recv_until(sock, "READY=1")
        n = value(fetch(url)[1], "ccdiag_collection_cycles_total")
        proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: value(fetch(url)[1], "ccdiag_collection_cycles_total") > n)
        assert value(fetch(url)[1], "ccdiag_collection_interval_seconds") == 300
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert "reload failed" in proc.stderr.read()
    finally:
        _stop(proc)


def test_once_prints_one_exposition():
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "daemon", "--once", "--replay", str(C.DEGRADED)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert value(proc.stdout, "ccdiag_verdict_severity") == 4


# -- TLS and basic auth ----------------------------------------------------------------------------
@pytest.fixture
def tls_files(tmp_path):
    if subprocess.run(["openssl", "version"], capture_output=True).returncode != 0:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def _web_config(tmp_path, users: dict[str, str]) -> str:
    lines = ["tls_server_config:", "  cert_file: server.crt", "  key_file: server.key", "basic_auth_users:"]
    lines += [f"  {u}: '{h}'" for u, h in users.items()]
    path = tmp_path / "web.yml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _https(url: str, cafile, user=None, password=None) -> int:
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(cafile))
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    try:
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        body = resp.read().decode()
        if resp.status == 200:
            assert "ccdiag_build_info" in body
        else:
            assert resp.getheader("WWW-Authenticate", "").startswith("Basic")
        return resp.status
    finally:
        conn.close()


def test_tls_and_basic_auth_with_a_real_tls_client(run_daemon, tmp_path, tls_files):
    bcrypt = pytest.importorskip("bcrypt")
    cert, _ = tls_files
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    d = run_daemon(web_config=_web_config(tmp_path, {"prometheus": hashed}))
    assert d.server.url.startswith("https://127.0.0.1:")
    assert _https(d.server.url, cert, "prometheus", "s3cret") == 200
    assert _https(d.server.url, cert, "prometheus", "s3cret") == 200  # cached path
    assert _https(d.server.url, cert, "prometheus", "wrong") == 401
    assert _https(d.server.url, cert, "nobody", "s3cret") == 401
    assert _https(d.server.url, cert) == 401
    # plain HTTP to the TLS port gets no metrics
    with pytest.raises((OSError, http.client.HTTPException)):
        plain = http.client.HTTPConnection("127.0.0.1", d.server.server_address[1], timeout=5)
        plain.request("GET", "/metrics")
        assert plain.getresponse().status != 200
        raise OSError("answered over plain HTTP")


def test_curl_gets_401_for_a_wrong_password(run_daemon, tmp_path, tls_files):
    bcrypt = pytest.importorskip("bcrypt")
    if subprocess.run(["curl", "--version"], capture_output=True).returncode != 0:
        pytest.skip("curl not installed")
    cert, _ = tls_files
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    d = run_daemon(web_config=_web_config(tmp_path, {"prometheus": hashed}))

    def curl(password):
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", str(cert),
                              "-u", f"prometheus:{password}", d.server.url], capture_output=True, text=True,
                             timeout=30)
        return out.stdout

    assert curl("s3cret") == "200"
    assert curl("nope") == "401"


@pytest.mark.parametrize("text,needle", [
    ("tls_server_config:\n  cert_file: a.crt\n", "both cert_file and key_file"),
    ("tls_server_config:\n  cipher_suites: [x]\n", "cipher_suites is not supported"),
    ("rate_limit: {}\n", "rate_limit is not supported"),
    ("basic_auth_users:\n  bob: plaintext\n", "must be a bcrypt hash"),
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n", "cannot load"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n", "unknown TLS version"),
    ("- a list\n", "mapping"),
])
def test_bad_web_config_is_refused_with_the_setting_named(tmp_path, text, needle):
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError, match=needle):
        load_web_config(str(path))


def test_watchdog_interval_and_notify_without_a_socket():
    from ccdiag.exporters import sdnotify

    assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "20000000"}) == 10.0
    assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": str(os.getpid() + 1)}) is None
    assert sdnotify.watchdog_interval({}) is None
    assert sdnotify.notify("READY=1", env={}) is False


def test_notify_reaches_an_abstract_socket():
    from ccdiag.exporters import sdnotify

    name = f"ccdiag-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert sdnotify.notify("WATCHDOG=1", env={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"WATCHDOG=1"
    finally:
        sock.close()


def test_health_fails_without_a_running_loop():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0"), host=ReplayHost(str(C.HEALTHY)))
    ok, why = d.health()
    assert not ok and "not running" in why
    assert not d.ready()
    assert d.run_cycle() is True
    assert d.ready()


@pytest.mark.slow  # starts a daemon with its collection process
def test_the_watchdog_stops_when_the_http_servers_loop_dies(tmp_path, notify_socket, monkeypatch):
    path, sock = notify_socket
    sock.settimeout(0.5)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # a ping every 0.2 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", interval_s=600.0), host=ReplayHost(str(C.HEALTHY)))
    seen: dict[str, list[float]] = {"before": [], "after": []}

    def pings(until: float) -> list[float]:
        got = []
        while time.monotonic() < until:
            try:
                msg = sock.recv(4096).decode()
            except socket.timeout:
                continue
            if "WATCHDOG=1" in msg:
                got.append(time.monotonic())
        return got

    def drive():
        try:
            wait_for(d.ready, 30)
            seen["before"] = pings(time.monotonic() + 1.5)
            d.server._loop.call_soon_threadsafe(d.server._loop.stop)  # the server's loop dies
            wait_for(lambda: not d.server.alive())
            time.sleep(0.3)  # a ping already decided may still be in flight
            while True:  # drain what was sent before the loop died
                try:
                    sock.recv(4096)
                except socket.timeout:
                    break
            seen["after"] = pings(time.monotonic() + 1.5)
            seen["health"] = [d.health()]
        finally:
            d._stop.set()

    helper = threading.Thread(target=drive)
    helper.start()
    assert d.serve() == 0
    helper.join(30)
    assert len(seen["before"]) >= 3  # fed while both loops answer
    assert seen["after"] == []  # and never again once the server's loop is gone
    assert "HTTP server" in seen["health"][0][1]
