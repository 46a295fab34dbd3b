"""A daemon serving a pathological snapshot answers every scrape: 1,000 scrapes, p50/p99.

    python bench/bench_daemon_stall.py [--scrapes 1000] [--in-process]

Why: a probe stuck in a slow parse once held the interpreter lock for minutes (one ``re.match``
over a long ``nvidia-smi topo -p2p`` legend), and in-process collection left 39 of 40 scrapes timing
out, ``/-/ready`` too. The daemon now collects in a forked child (:mod:`ccdiag.exporters.isolation`).

That parser is linear now, so the bench makes the stall itself: the daemon serves the bundled healthy
8-GPU sample from a process whose ``topo -p2p`` parser is replaced by one ``re.match`` with
exponential backtracking (one C call that holds the interpreter lock, as the old parse did; the
forked collection children inherit it). The daemon runs as its own process (``--interval 2 --deadline
5``, so a cycle is killed every ~8 s and several run during the bench); scrapes of ``/metrics`` and
``/-/ready`` alternate from 4 clients, paced over ``--spread-s`` seconds, each with a 10 s timeout
(Prometheus' default scrape timeout). Then the config file is pointed at ``/dev/zero`` and the
daemon sent SIGHUP: the reload must fail, scrapes go on, RSS stays put.
``--in-process`` (``CCDIAG_DAEMON_IN_PROCESS=1``) measures the old behaviour for comparison.
Writes bench/results/daemon_stall.json (or daemon_stall_in_process.json). Floor: every scrape
answered, p99 <= 100 ms.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from results_file import write_result  # bench/results_file.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "samples", "hgx-h100-8gpu-healthy.snap.tar.gz")
RESULTS = os.path.join(REPO, "bench", "results")
FLOORS = {"p99_ms": 100.0, "answered_fraction": 1.0}


#: the daemon's entry point with the ``topo -p2p`` parser made to hold the interpreter lock
STALLED_DAEMON = """
import re, sys
from ccdiag.probes import smi_topo
def stuck(text, mode=None):
    re.match(r"(\\s*)*x", " " * 64)  # exponential backtracking inside one C call
smi_topo.parse_topo_p2p = stuck
from ccdiag.commands.cli import main
main(sys.argv[1:])
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def scrapes(host: str, port: int, n: int, clients: int, spread_s: float) -> tuple[list[float], list[str], dict]:
    latencies: list[float] = []
    failures: list[str] = []
    codes: dict[str, int] = {}
    lock = threading.Lock()
    per_client = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]

    def client(k: int, count: int) -> None:
        pause = spread_s / max(1, count)
        for i in range(count):
            path = "/metrics" if (i + k) % 2 == 0 else "/-/ready"
            t0 = time.perf_counter()
            try:
                conn = http.client.HTTPConnection(host, port, timeout=10)
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                conn.close()
                dt = time.perf_counter() - t0
                with lock:
                    latencies.append(dt)
                    key = f"{path} {resp.status}"
                    codes[key] = codes.get(key, 0) + 1
            except Exception as exc:  # noqa: BLE001 - counted as unanswered
                with lock:
                    failures.append(f"{path}: {type(exc).__name__}: {exc}")
            time.sleep(max(0.0, pause - (time.perf_counter() - t0)))

    threads = [threading.Thread(target=client, args=(k, c)) for k, c in enumerate(per_client)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, failures, codes


def metric(host: str, port: int, name: str) -> float | None:
    """One value from a scrape; ``None`` when the daemon does not answer within 10 s."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    m = re.search(rf"^{re.escape(name)} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scrapes", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--spread-s", type=float, default=30.0)
    ap.add_argument("--in-process", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ccdiag-stall-")
    config = os.path.join(tmp, "daemon.toml")
    with open(config, "w") as fh:
        fh.write("interval = 2\ndeadline = 5\n")
    env = dict(os.environ, CCDIAG_DAEMON_IN_PROCESS="1" if args.in_process else "0")
    daemon = subprocess.Popen([sys.executable, "-c", STALLED_DAEMON, "daemon", "--listen", "127.0.0.1:0",
                               "--config", config, "--replay", SAMPLE], cwd=tmp, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log_lines: list[str] = []
    try:
        line = daemon.stderr.readline()
        m = re.search(r"http://([\d.]+):(\d+)/metrics", line)
        if not m:
            raise SystemExit(f"daemon did not start: {line}{daemon.stderr.read()}")
        threading.Thread(target=lambda: log_lines.extend(daemon.stderr), daemon=True).start()
        host, port = m.group(1), int(m.group(2))
        proc = psutil.Process(daemon.pid)
        rss_before = proc.memory_info().rss
        t0 = time.perf_counter()
        latencies, failures, codes = scrapes(host, port, args.scrapes, args.clients, args.spread_s)
        wall = time.perf_counter() - t0
        rss_after = proc.memory_info().rss
        cycles = metric(host, port, "ccdiag_collection_cycles_total")
        # a config path pointing at /dev/zero: the reload is refused, the old settings stay
        os.replace(config, config + ".good")
        os.symlink("/dev/zero", config)
        daemon.send_signal(signal.SIGHUP)
        time.sleep(2.0)
        zero_lat, zero_fail, _ = scrapes(host, port, 20, 2, 1.0)
        rss_zero = proc.memory_info().rss
        interval = metric(host, port, "ccdiag_collection_interval_seconds")
        daemon.send_signal(signal.SIGTERM)
        rc = daemon.wait(30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)
    mb = 1024 * 1024
    answered = len(latencies) / max(1, len(latencies) + len(failures))
    result = {
        "mode": "in-process" if args.in_process else "child process per cycle",
        "stall": "topo -p2p parser held in one exponential re.match", "scrapes": args.scrapes, "clients": args.clients,
        "wall_s": round(wall, 2), "answered": len(latencies), "unanswered": len(failures),
        "answered_fraction": round(answered, 4), "first_failures": failures[:3], "status_codes": codes,
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 3) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3) if latencies else None,
        "max_ms": round(max(latencies) * 1000, 3) if latencies else None,
        "cycles_completed": cycles,
        "rss_before_mb": round(rss_before / mb, 2), "rss_after_mb": round(rss_after / mb, 2),
        "dev_zero_config": {"rss_after_sighup_mb": round(rss_zero / mb, 2), "scrapes_answered": len(zero_lat),
                            "scrapes_failed": len(zero_fail), "interval_still_s": interval,
                            "reload_refused_logged": any("reload failed" in ln for ln in log_lines)},
        "daemon_exit": rc, "floors": FLOORS,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    result["pass"] = bool(answered >= FLOORS["answered_fraction"] and result["p99_ms"] is not None
                          and result["p99_ms"] <= FLOORS["p99_ms"] and not zero_fail
                          and result["dev_zero_config"]["reload_refused_logged"] and rc == 0)
    name = "daemon_stall_in_process.json" if args.in_process else "daemon_stall.json"
    write_result(os.path.join(RESULTS, name), result)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
