"""Soak the daemon: 10,000 scrapes from 8 concurrent clients against the 8-GPU healthy sample.

    python bench/bench_daemon_soak.py [--scrapes 10000] [--clients 8] [--cycles 20]

Why: an exporter that is slow to scrape gets its target marked down at Prometheus' scrape timeout,
and one that grows gets OOM-killed after a day or two (both seen in the field with GPU exporters).
The daemon runs as its own process (``ccdiag daemon --replay <healthy sample> --interval 15``),
exactly as in production except for where the data comes from.

Reports scrape latency p50/p99 (keep-alive connections, one per client thread), the daemon's RSS
before and after the soak (psutil on its pid), and CPU seconds per collection cycle, measured by
forcing cycles with SIGUSR1 and reading the daemon's CPU time around them. Writes
bench/results/daemon_soak.json. Floors: p99 <= 50 ms, RSS <= 80 MB, RSS growth <= 5 MB.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import signal
import subprocess
import tempfile
import sys
import threading
import time

import psutil

from results_file import write_result  # bench/results_file.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "samples", "hgx-h100-8gpu-healthy.snap.tar.gz")
RESULTS = os.path.join(REPO, "bench", "results", "daemon_soak.json")
FLOORS = {"p99_ms": 50.0, "rss_mb": 80.0, "rss_growth_mb": 5.0}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def scrape(conn: http.client.HTTPConnection) -> bytes:
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"scrape answered {resp.status}")
    return body


def cycles_total(host: str, port: int) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        m = re.search(rb"^ccdiag_collection_cycles_total (\S+)$", scrape(conn), re.M)
        return int(float(m.group(1))) if m else 0
    finally:
        conn.close()


def soak(host: str, port: int, scrapes: int, clients: int) -> tuple[list[float], int]:
    latencies: list[float] = []
    lock = threading.Lock()
    errors = []
    per_client = [scrapes // clients + (1 if i < scrapes % clients else 0) for i in range(clients)]
    size = [0]

    def client(n: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        mine = []
        try:
            for _ in range(n):
                t0 = time.perf_counter()
                body = scrape(conn)
                mine.append(time.perf_counter() - t0)
            size[0] = len(body)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in per_client]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"{len(errors)} client(s) failed: {errors[0]!r}")
    return latencies, size[0]


def cpu_per_cycle(proc: psutil.Process, host: str, port: int, n: int) -> float:
    """Mean CPU seconds of the daemon per forced cycle (the scrapes polling for completion are
    included, so this slightly overstates the cycle). Cycles run in forked children: their CPU
    time counts once they are reaped (``children_user``/``children_system``)."""
    before_cycles = cycles_total(host, port)
    t = proc.cpu_times()
    before = t.user + t.system + t.children_user + t.children_system
    for i in range(n):
        want = before_cycles + i + 1
        os.kill(proc.pid, signal.SIGUSR1)
        end = time.monotonic() + 60
        while cycles_total(host, port) < want:
            if time.monotonic() > end:
                raise SystemExit("a forced cycle did not complete within 60 s")
            time.sleep(0.02)
    t = proc.cpu_times()
    return (t.user + t.system + t.children_user + t.children_system - before) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scrapes", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=20, help="forced collection cycles for the CPU figure")
    args = ap.parse_args()
    daemon = subprocess.Popen([sys.executable, "-m", "ccdiag", "daemon", "--listen", "127.0.0.1:0",
                               "--interval", "15", "--replay", SAMPLE], cwd=tempfile.gettempdir(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = daemon.stderr.readline()
        m = re.search(r"http://([\d.]+):(\d+)/metrics", line)
        if not m:
            raise SystemExit(f"daemon did not start: {line}{daemon.stderr.read()}")
        host, port = m.group(1), int(m.group(2))
        proc = psutil.Process(daemon.pid)
        while cycles_total(host, port) < 1:
            time.sleep(0.05)
        # warm-up: the first scrape of a cycle renders it; the soak measures steady state from here
        soak(host, port, 200, args.clients)
        rss_before = proc.memory_info().rss
        t0 = time.perf_counter()
        latencies, size = soak(host, port, args.scrapes, args.clients)
        wall = time.perf_counter() - t0
        rss_after = proc.memory_info().rss
        cpu_cycle = cpu_per_cycle(proc, host, port, args.cycles)
        rss_final = proc.memory_info().rss
        daemon.send_signal(signal.SIGTERM)
        rc = daemon.wait(30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)
    mb = 1024 * 1024
    result = {
        "scrapes": len(latencies), "clients": args.clients, "wall_s": round(wall, 3),
        "scrapes_per_s": round(len(latencies) / wall, 1), "exposition_bytes": size,
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 3), "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
        "max_ms": round(max(latencies) * 1000, 3),
        "rss_before_mb": round(rss_before / mb, 2), "rss_after_mb": round(rss_after / mb, 2),
        "rss_growth_mb": round((rss_after - rss_before) / mb, 2),
        "rss_after_cycles_mb": round(rss_final / mb, 2),
        "cpu_s_per_cycle": round(cpu_cycle, 4), "forced_cycles": args.cycles, "daemon_exit": rc,
        "floors": FLOORS, "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                      "platform": platform.platform()},
    }
    result["pass"] = (result["p99_ms"] <= FLOORS["p99_ms"] and result["rss_after_mb"] <= FLOORS["rss_mb"]
                      and result["rss_growth_mb"] <= FLOORS["rss_growth_mb"] and rc == 0)
    write_result(RESULTS, result)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
