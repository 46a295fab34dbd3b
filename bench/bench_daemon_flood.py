"""Hostile clients against the daemon under the shipped unit's limits: a half-open flood and idle
keep-alive connections, while a scraper keeps scraping and cycles keep running.

    python bench/bench_daemon_flood.py [--half-open 2000] [--flood-s 120] [--idle 100] [--idle-s 60]

Why: with one thread per connection and ``select()`` in the collection path, 2,000 half-open
connections made every collection cycle fail (descriptor numbers above 1,023) and leave its child
behind, and about 60 idle connections exhausted the unit's task limit so that scrapes and forks
failed. The daemon runs as its own process (``ccdiag daemon --replay <healthy sample>``, cycles
every 2 s) with the descriptor limit of ``systemd/ccdiag-exporter.service`` (``LimitNOFILE``) set
on it; ``TasksMax`` needs a cgroup, so the tasks of the daemon's whole process tree (threads of
every process) are counted every second and their peak is reported against the unit's value.
All traffic goes to 127.0.0.1.

Phase 1 keeps ``--half-open`` connections open that never send a byte (each one the server closes
at its header timeout is opened again at once) for ``--flood-s`` seconds. Phase 2 keeps ``--idle``
keep-alive connections that made one request and then stay silent (reopened likewise). Throughout,
one scraper scrapes every 0.5 s with a 5 s timeout. Reported per phase: scrapes answered/failed and
their p50/p99, collection cycles completed and failed (``ccdiag_collection_cycles_total`` and the
daemon's log), the daemon's RSS at the start and end, its descriptors, the peak task count, and
after each phase (clients gone, one header timeout later) the descriptors and processes left. At
the end the daemon gets SIGTERM: its exit code and any process of its tree still alive.
Writes bench/results/daemon_flood.json.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from results_file import write_result  # bench/results_file.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "samples", "hgx-h100-8gpu-healthy.snap.tar.gz")
UNIT = os.path.join(REPO, "systemd", "ccdiag-exporter.service")
RESULTS = os.path.join(REPO, "bench", "results", "daemon_flood.json")


def unit_limit(key: str) -> int:
    with open(UNIT) as fh:
        m = re.search(rf"^{key}=(\d+)$", fh.read(), re.M)
    return int(m.group(1))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc] + proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def tasks(proc: psutil.Process) -> int:
    n = 0
    for p in tree(proc):
        try:
            n += p.num_threads()
        except psutil.NoSuchProcess:
            pass
    return n


def fewest_processes(proc: psutil.Process, samples: int = 8) -> int:
    """The fewest processes in the daemon's tree over a few seconds: a cycle's child comes and goes."""
    seen = []
    for _ in range(samples):
        seen.append(len(tree(proc)))
        time.sleep(0.3)
    return min(seen)


def cycles_total(text: str) -> int:
    m = re.search(r"^ccdiag_collection_cycles_total (\S+)$", text, re.M)
    return int(float(m.group(1))) if m else -1


class Scraper(threading.Thread):
    def __init__(self, host: str, port: int):
        super().__init__(daemon=True)
        self.host, self.port = host, port
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.last_cycles = 0

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
            try:
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"status {resp.status}")
                self.latencies.append(time.perf_counter() - t0)
                self.last_cycles = max(self.last_cycles, cycles_total(body.decode()))
            except Exception as exc:  # noqa: BLE001 - counted
                self.failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                conn.close()
            self.stop.wait(0.5)

    def take(self) -> tuple[list[float], list[str]]:
        lat, fail = self.latencies, self.failures
        self.latencies, self.failures = [], []
        return lat, fail


class Holder:
    """Keeps ``n`` connections open; ``request`` first makes one keep-alive request on each."""

    def __init__(self, host: str, port: int, n: int, request: bool):
        self.addr, self.n, self.request = (host, port), n, request
        self.sel = selectors.DefaultSelector()
        self.opened = 0
        self.closed_by_server = 0

    def _open(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(self.addr)
            if self.request:
                s.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                buf = b""
                while b"\r\n\r\n" not in buf or not buf.endswith(b"ok\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
            s.setblocking(False)
        except OSError:
            s.close()
            return
        self.sel.register(s, selectors.EVENT_READ)
        self.opened += 1

    def fill(self) -> None:
        for _ in range(self.n - len(self.sel.get_map())):
            self._open()

    def poll(self) -> None:
        for key, _ in self.sel.select(0):
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if not data:
                self.sel.unregister(key.fileobj)
                key.fileobj.close()
                self.closed_by_server += 1
        self.fill()

    def close(self) -> None:
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()


def phase(name: str, holder: Holder, seconds: float, daemon: psutil.Process, scraper: Scraper,
          log_failures) -> dict:
    holder.fill()
    rss0 = daemon.memory_info().rss
    cycles0 = scraper.last_cycles
    failed0 = log_failures()
    scraper.take()
    peak_tasks, peak_fds, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        holder.poll()
        peak_tasks = max(peak_tasks, tasks(daemon))
        peak_fds = max(peak_fds, daemon.num_fds())
        time.sleep(0.2)
    lat, fail = scraper.take()
    out = {
        "connections_held": holder.n, "seconds": seconds, "connections_opened": holder.opened,
        "closed_by_server": holder.closed_by_server,
        "scrapes_answered": len(lat), "scrapes_failed": len(fail), "scrape_failures": fail[:5],
        "scrape_p50_ms": round(percentile(lat, 0.5) * 1000, 1) if lat else None,
        "scrape_p99_ms": round(percentile(lat, 0.99) * 1000, 1) if lat else None,
        "cycles_completed": scraper.last_cycles - cycles0, "cycles_failed": log_failures() - failed0,
        "rss_start_mb": round(rss0 / 2**20, 1), "rss_end_mb": round(daemon.memory_info().rss / 2**20, 1),
        "peak_tasks": peak_tasks, "peak_descriptors": peak_fds,
    }
    holder.close()
    time.sleep(12)  # one header timeout (10 s) and then some: whatever the server held is gone
    out["descriptors_after"] = daemon.num_fds()
    # the daemon and its collection process, plus a cycle's child while one runs: the fewest seen
    out["processes_after"] = fewest_processes(daemon)
    print(name, out, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--half-open", type=int, default=2000)
    ap.add_argument("--flood-s", type=float, default=120.0)
    ap.add_argument("--idle", type=int, default=100)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=2.0)
    args = ap.parse_args()
    nofile, tasks_max = unit_limit("LimitNOFILE"), unit_limit("TasksMax")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.half_open + 512)), hard))

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, max(nofile, hard) if hard != -1 else nofile))

    log = tempfile.NamedTemporaryFile("w+", prefix="ccdiag-flood-", suffix=".log", delete=False)
    daemon = subprocess.Popen([sys.executable, "-m", "ccdiag", "daemon", "--listen", "127.0.0.1:0",
                               "--interval", str(args.interval), "--deadline", "10", "--replay", SAMPLE],
                              cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=log,
                              preexec_fn=limits)
    try:
        end = time.monotonic() + 60
        m = None
        while m is None and time.monotonic() < end:
            time.sleep(0.2)
            m = re.search(r"http://([\d.]+):(\d+)/metrics", open(log.name).read())
        if m is None:
            raise SystemExit(f"daemon did not start: {open(log.name).read()}")
        host, port = m.group(1), int(m.group(2))
        proc = psutil.Process(daemon.pid)

        def log_failures() -> int:
            return open(log.name).read().count("collection cycle failed")

        scraper = Scraper(host, port)
        scraper.start()
        while scraper.last_cycles < 1:
            time.sleep(0.2)
        baseline = {"descriptors": proc.num_fds(), "processes": len(tree(proc)), "tasks": tasks(proc),
                    "rss_mb": round(proc.memory_info().rss / 2**20, 1)}
        half_open = phase("half-open", Holder(host, port, args.half_open, request=False), args.flood_s,
                          proc, scraper, log_failures)
        idle = phase("idle", Holder(host, port, args.idle, request=True), args.idle_s, proc, scraper,
                     log_failures)
        scraper.stop.set()
        scraper.join(10)
        members = [p.pid for p in tree(proc)]
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(30)
        time.sleep(0.5)
        left = [pid for pid in members if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    result = {
        "what": "ccdiag daemon under a half-open flood and idle keep-alive connections, unit limits applied",
        "command": "python bench/bench_daemon_flood.py " + " ".join(sys.argv[1:]),
        "unit_limits": {"LimitNOFILE": nofile, "TasksMax": tasks_max},
        "baseline": baseline, "half_open": half_open, "idle": idle,
        "stop": {"exit_code": code, "processes_left": left},
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()},
    }
    write_result(RESULTS, result)
    ok = (half_open["scrapes_failed"] == 0 and idle["scrapes_failed"] == 0 and half_open["cycles_failed"] == 0
          and idle["cycles_failed"] == 0 and half_open["cycles_completed"] > 0 and idle["cycles_completed"] > 0
          and max(half_open["peak_tasks"], idle["peak_tasks"]) <= tasks_max and not left and code == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
