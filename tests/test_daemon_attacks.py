"""The attack suite: while each hostile client mix runs against the endpoint, every scrape of a
well-behaved client is answered within its scrape timeout. Bounded (a few seconds and a few hundred
connections per attack) and on loopback only; the attacks are bench/daemon_attacks.py's, which
bench/bench_daemon_attacks.py also runs against node_exporter for the comparison."""

from __future__ import annotations

import ssl
import sys
import threading

import pytest

import exporter_cases as C
from conftest import REPO
from ccdiag.exporters.collector import CycleCollector
from ccdiag.exporters.server import MetricsServer
from ccdiag.exporters.webconfig import BasicAuth, WebConfig

sys.path.insert(0, str(REPO / "bench"))

import daemon_attacks as A  # noqa: E402 - the attack kit lives in bench/

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")]

#: seconds each attack runs while the scraper scrapes, and the scraper's timeout (Prometheus's
#: default scrape timeout is 10 s)
ATTACK_S = 3.0
SCRAPE_TIMEOUT_S = 5.0
#: clients per attack: a few hundred descriptors at most on each side of loopback
COUNTS = {"pipelining": 10, "slowloris": 100, "half_open": 200, "oversized": 6, "random_bytes": 6,
          "tls_garbage": 10, "tls_half_handshake": 100, "wrong_passwords": 40}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """A plain endpoint, and one with TLS and basic auth (the scraper's password already checked)."""
    bcrypt = pytest.importorskip("bcrypt")
    from ccdiag.exporters.daemon import Daemon, DaemonConfig
    from ccdiag.host.door import ReplayHost

    tmp = tmp_path_factory.mktemp("attacks")
    try:
        cert, key = A.make_cert(str(tmp))
    except (OSError, Exception) as exc:  # noqa: BLE001 - no openssl: the TLS attacks cannot run
        pytest.skip(f"openssl cannot make a certificate: {exc}")
    d = Daemon(DaemonConfig(listen="127.0.0.1:0"), host=ReplayHost(str(C.HEALTHY)), isolate=False)
    assert d.run_cycle()
    collector: CycleCollector = d.collector
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    auth = BasicAuth({"prometheus": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=8)).decode()})
    plain_web, tls_web = WebConfig(), WebConfig(ssl_context=ctx, auth=auth)
    started = []
    for web in (plain_web, tls_web):
        srv = MetricsServer(("127.0.0.1", 0), collector, lambda w=web: w, lambda: (True, "ok"), lambda: True,
                            header_timeout_s=2.0)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
    client_ctx = ssl.create_default_context(cafile=cert)
    plain = A.Target("127.0.0.1", started[0].server_address[1])
    tls = A.Target("127.0.0.1", started[1].server_address[1], tls=client_ctx, auth=("prometheus", "s3cret"))
    assert A.Scraper(tls).scrape_once()[0]  # the scraper's password is in the cache from here on
    yield {"plain": (plain, started[0]), "tls": (tls, started[1])}
    for srv in started:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("attack", sorted(A.ATTACKS))
def test_every_scrape_is_answered_in_time_during_the_attack(servers, attack):
    which = "tls" if attack in A.NEEDS_TLS | A.NEEDS_AUTH else "plain"
    target, srv = servers[which]
    hostile = A.ATTACKS[attack](target, COUNTS[attack]).start()
    try:
        results = A.Scraper(target, every_s=0.25, timeout_s=SCRAPE_TIMEOUT_S).run_for(ATTACK_S)
    finally:
        hostile.stop()
    failed = [why for ok, _, why in results if not ok]
    assert len(results) >= 3 and failed == [], failed
    assert hostile.sent > 0  # the attack really ran
    assert srv.alive()  # and the server's loop is still stamping its liveness


def test_wrong_passwords_never_reach_bcrypt_more_than_the_gate_allows(servers):
    target, srv = servers["tls"]
    before = srv.gate.stats["bcrypt"]
    hostile = A.WrongPasswords(target, 40).start()
    try:
        results = A.Scraper(target, every_s=0.25, timeout_s=SCRAPE_TIMEOUT_S).run_for(ATTACK_S)
    finally:
        hostile.stop()
    assert all(ok for ok, _, _ in results)
    checked = srv.gate.stats["bcrypt"] - before
    refused = srv.gate.stats["backing_off"] + srv.gate.stats["busy"]
    assert refused > checked  # most wrong passwords were answered without a bcrypt
