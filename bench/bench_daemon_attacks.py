"""The attack mix against ccdiag's daemon and node_exporter in one run: scrape success and p99 for both.

    python bench/bench_daemon_attacks.py [--seconds 10] [--only ATTACK ...] [--scale 1.0]

Why: an exporter is judged by whether Prometheus still gets its scrape while something hostile (or
merely broken) talks to the same port. node_exporter (Go's net/http behind the Prometheus
exporter-toolkit) is the yardstick: the goal is a success rate of 99 % or more, and a p99 no worse
than node_exporter's, under every attack of bench/daemon_attacks.py.

Targets, each its own process on 127.0.0.1 with the descriptor limit raised to the hard limit:
``ccdiag daemon --replay <healthy sample>`` and ``prometheus-node-exporter`` (the Debian package,
collectors loadavg and meminfo only, so a scrape costs both about the same), each twice: plain
HTTP for the plain attacks, and with the same exporter-toolkit web config (TLS 1.2+, one bcrypt user
of cost 10, as ``htpasswd -B`` makes) for the TLS and password attacks. For each attack and target:
the attack starts in a process of its own (its clients' work never shares an interpreter with the
scraper), a scraper scrapes every 0.5 s with Prometheus's default 10 s timeout (a fresh
connection each time) for ``--seconds``, the attack stops; a scrape counts as a success when it is
answered 200 within the timeout. Before the attacks, a quiet baseline of the same length.

Attack sizes (``--scale`` multiplies them): 200 pipelining clients (the flood that stopped the
earlier server), 500 slowloris and 1,000 half-open connections, 20 oversized-header and 20 random-byte
clients, 20 TLS-garbage clients and 500 half TLS handshakes, 80 wrong-password clients.
Writes bench/results/daemon_attacks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import daemon_attacks as A  # noqa: E402 - beside this script
from results_file import write_result  # noqa: E402 - beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "samples", "hgx-h100-8gpu-healthy.snap.tar.gz")
RESULTS = os.path.join(REPO, "bench", "results", "daemon_attacks.json")
SIZES = {"pipelining": 200, "slowloris": 500, "half_open": 1000, "oversized": 20, "random_bytes": 20,
         "tls_garbage": 20, "tls_half_handshake": 500, "wrong_passwords": 80}
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"target exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {port}")


def start(kind: str, web_config: str | None, tmp: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    if kind == "ccdiag":
        argv = [sys.executable, "-m", "ccdiag", "daemon", "--replay", SAMPLE, "--interval", "5",
                "--web.listen-address", f"127.0.0.1:{port}"]
        if web_config:
            argv += ["--web.config.file", web_config]
    else:
        argv = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                "--collector.loadavg", "--collector.meminfo", "--log.level=error"]
        if web_config:
            argv += [f"--web.config.file={web_config}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"{kind}.log"), "ab"),
                            preexec_fn=raise_nofile, cwd=tmp)
    wait_listening(port, proc)
    return proc, port


def _attack_child(name: str, host: str, port: int, cafile: str | None, auth, size: int, seconds: float, out) -> None:
    """One attack in a process of its own, so that its clients' work (hundreds of threads reading
    answers) never shares an interpreter with the scraper whose latency is measured."""
    tls = ssl.create_default_context(cafile=cafile) if cafile else None
    hostile = A.ATTACKS[name](A.Target(host, port, tls=tls, auth=auth), size).start()
    time.sleep(seconds)
    hostile._stop.set()
    out.put(hostile.sent)
    out.close()
    out.join_thread()  # the count is in the pipe before this process ends
    os._exit(0)  # the attack's threads are daemons: no need to wait for each


def run_attack(name: str, target: A.Target, cafile: str | None, size: int, seconds: float,
               scraper: A.Scraper) -> tuple[list, int]:
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=_attack_child, args=(name, target.host, target.port, cafile if target.tls else None,
                                                     target.auth, size, seconds + 1.0, q))
    child.start()
    time.sleep(1.0)  # the attack is under way before the first scrape
    results = scraper.run_for(seconds)
    try:
        acts = q.get(timeout=30)
    except Exception:  # noqa: BLE001 - the attack's count is for the record only
        acts = -1
    child.join(10)
    if child.is_alive():
        child.kill()
    return results, acts


def summary(results: list[tuple[bool, float, str]]) -> dict:
    ok = [t for good, t, _ in results if good]
    return {"scrapes": len(results), "answered": len(ok),
            "success_pct": round(100.0 * len(ok) / len(results), 1) if results else None,
            "p50_s": round(A.percentile([t for _, t, _ in results], 50) or 0, 4),
            "p99_s": round(A.percentile([t for _, t, _ in results], 99) or 0, 4),
            "failures": sorted({why for good, _, why in results if not good})[:5]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    if NODE_EXPORTER is None:
        print("prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)", file=sys.stderr)
        return 2
    import bcrypt

    raise_nofile()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the targets are stopped on the way out
    attacks = [a for a in A.ATTACKS if not args.only or a in args.only]
    out: dict = {"attacks": {}, "baseline": {}}
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = A.make_cert(tmp)
        hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
        web = os.path.join(tmp, "web.yml")
        with open(web, "w") as fh:
            fh.write(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS12\n"
                     f"basic_auth_users:\n  prometheus: '{hashed}'\n")
        client_tls = ssl.create_default_context(cafile=cert)
        procs = []
        try:
            targets = {}
            for kind in ("ccdiag", "node_exporter"):
                plain_proc, plain_port = start(kind, None, tmp)
                tls_proc, tls_port = start(kind, web, tmp)
                procs += [plain_proc, tls_proc]
                targets[kind] = {"plain": A.Target("127.0.0.1", plain_port),
                                 "tls": A.Target("127.0.0.1", tls_port, tls=client_tls, auth=("prometheus", "s3cret"))}
                A.Scraper(targets[kind]["tls"]).scrape_once()  # the scraper's password checked once
            time.sleep(3)  # the daemons' first cycles
            out["exposition_bytes"] = {kind: len(A.Scraper(t["plain"]).body()) for kind, t in targets.items()}
            for kind, t in targets.items():
                out["baseline"][kind] = summary(A.Scraper(t["plain"], every_s=0.5, timeout_s=10.0).run_for(args.seconds))
                print("baseline", kind, out["baseline"][kind], flush=True)
            for name in attacks:
                which = "tls" if name in A.NEEDS_TLS | A.NEEDS_AUTH else "plain"
                size = max(1, int(SIZES[name] * args.scale))
                out["attacks"][name] = {"clients": size, "target": which}
                for kind, t in targets.items():
                    res, acts = run_attack(name, t[which], cert, size, args.seconds,
                                           A.Scraper(t[which], every_s=0.5, timeout_s=10.0))
                    out["attacks"][name][kind] = {**summary(res), "attack_acts": acts}
                    print(name, kind, out["attacks"][name][kind], flush=True)
                    time.sleep(2)  # the server closes what the attack left
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    rows = [r for r in out["attacks"].values()]
    for kind in ("ccdiag", "node_exporter"):
        scrapes = sum(r[kind]["scrapes"] for r in rows)
        answered = sum(r[kind]["answered"] for r in rows)
        out[f"{kind}_overall"] = {"scrapes": scrapes, "answered": answered,
                                  "success_pct": round(100.0 * answered / scrapes, 1) if scrapes else None,
                                  "worst_p99_s": max((r[kind]["p99_s"] for r in rows), default=None)}
    out["goal_met"] = all(r["ccdiag"]["success_pct"] is not None and r["ccdiag"]["success_pct"] >= 99.0
                          and r["ccdiag"]["p99_s"] <= r["node_exporter"]["p99_s"] for r in rows)
    out["command"] = "python bench/bench_daemon_attacks.py " + " ".join(sys.argv[1:])
    version = subprocess.run([NODE_EXPORTER, "--version"], capture_output=True, text=True)
    out["host"] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                   "node_exporter": ((version.stdout or version.stderr).splitlines() or ["?"])[0],
                   "load_average_1m_at_end": os.getloadavg()[0]}
    write_result(RESULTS, out, echo=False)
    print(json.dumps({k: v for k, v in out.items() if k not in ("attacks",)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
