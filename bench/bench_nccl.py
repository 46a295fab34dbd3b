#!/usr/bin/env python3
"""Wall time of ``ccdiag nccl --replay <healthy sample>`` (a fresh interpreter per run, start-up and
imports included), the NCCL log reader's time against input size, and the streaming reader's
throughput and peak memory on a large log file.

Why: the recommendation is meant for job scripts and prologs (budget: median under 1 s on a 2-core
machine), and the log reader reads whatever users paste or collect (it must stay linear, read at
least 50 MB/s and keep memory flat however large the file). The large log is built by repeating the
real lines of ``tests/fixtures/nccl-logs`` (every non-comment line of every fixture, in order) up to
the size asked; each size is read in a fresh interpreter whose peak resident set size is reported,
beside the throughput of a bare Python loop over the same file (the machine's own pace, for
context: a loaded machine slows both). Writes ``bench/results/nccl.json``.

    python bench/bench_nccl.py [-n 15] [--log-mb 100,1024]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from results_file import write_result  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
LOG = REPO / "tests" / "fixtures" / "corpus" / "nccl-log" / "2node-16rank-node2-trees-p2p-ipc-pxn-gdrdma-channels.txt"
REAL_LOGS = REPO / "tests" / "fixtures" / "nccl-logs"
STREAM_MIN_MBYTE_S = 50.0

_CHILD = """
import json, sys, time
path = sys.argv[1]
t0 = time.perf_counter()
n = 0
with open(path, 'rb') as fh:
    for line in fh:
        if b'NCCL INFO ' in line:
            n += 1
bare_s = time.perf_counter() - t0
from ccdiag.nccl.logread import read_nccl_log
t0 = time.perf_counter()
log = read_nccl_log(path)
read_s = time.perf_counter() - t0
# VmHWM: this process image's own peak (ru_maxrss would carry the forking parent's peak across exec)
hwm = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmHWM:'))
print(json.dumps({'read_s': read_s, 'bare_loop_s': bare_s, 'nccl_lines': log.nccl_lines, 'lines': log.lines,
                  'peak_rss_bytes': hwm}))
"""


def make_log(path: pathlib.Path, size_bytes: int) -> int:
    """Repeat the real fixture lines until ``size_bytes``; returns the size written."""
    lines = []
    for p in sorted(REAL_LOGS.glob("*.log")):
        lines += [l for l in p.read_text(errors="replace").splitlines() if not l.startswith("#")]
    block = ("\n".join(lines) + "\n").encode()
    written = 0
    with open(path, "wb") as fh:
        while written < size_bytes:
            fh.write(block)
            written += len(block)
    return written


def log_stream(sizes_mb: list[int]) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes_mb:
            path = pathlib.Path(tmp) / f"nccl-{mb}mb.log"
            size = make_log(path, mb << 20)
            proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                                  timeout=3600)
            if proc.returncode != 0:
                raise SystemExit(f"bench_nccl: reading {path} failed: {proc.stderr[-500:]}")
            r = json.loads(proc.stdout)
            out.append({"bytes": size, "read_s": round(r["read_s"], 3),
                        "mbyte_s": round(size / r["read_s"] / 1e6, 1),
                        "bare_loop_mbyte_s": round(size / r["bare_loop_s"] / 1e6, 1),
                        "peak_rss_bytes": r["peak_rss_bytes"], "nccl_lines": r["nccl_lines"], "lines": r["lines"]})
            path.unlink()
    return out


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
                          cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise SystemExit(f"bench_nccl: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode()[:300]}")
    return time.perf_counter() - t0


def log_scaling() -> list[dict]:
    from ccdiag.nccl.logread import parse_nccl_log

    lines = [l for l in LOG.read_text().splitlines() if not l.startswith("#")]
    out = []
    for copies in (10, 100, 1000, 5000):
        text = "\n".join(lines * copies)
        t0 = time.perf_counter()
        parse_nccl_log(text)
        out.append({"bytes": len(text), "seconds": round(time.perf_counter() - t0, 4)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=15)
    ap.add_argument("--output", default=str(REPO / "bench" / "results" / "nccl.json"))
    ap.add_argument("--log-mb", default="100,1024", help="sizes of the streamed log, in MiB (comma-separated)")
    args = ap.parse_args(argv)
    cmd = [sys.executable, "-m", "ccdiag", "nccl", "--replay", str(SAMPLE)]
    wall(cmd)  # warm the page cache and .pyc files
    times = [wall(cmd) for _ in range(args.runs)]
    scaling = log_scaling()
    stream = log_stream([int(x) for x in args.log_mb.split(",") if x.strip()])
    a, b = scaling[1], scaling[-1]
    slope = math.log(b["seconds"] / a["seconds"]) / math.log(b["bytes"] / a["bytes"]) if a["seconds"] > 0 else None
    result = {"benchmark": "nccl_replay_wall", "command": "ccdiag nccl --replay samples/hgx-h100-8gpu-healthy.snap.tar.gz",
              "runs": args.runs, "median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4),
              "min_s": round(min(times), 4), "budget_median_s": 1.0,
              "log_reader": {"sizes": scaling, "loglog_slope": round(slope, 3) if slope else None},
              "log_stream": {"sizes": stream, "budget_mbyte_s": STREAM_MIN_MBYTE_S,
                             "input": "real lines of tests/fixtures/nccl-logs/*.log repeated"},
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_result(args.output, result, echo=False)
    print(f"ccdiag nccl --replay: median {result['median_s']}s over {args.runs} runs; log reader slope "
          f"{result['log_reader']['loglog_slope']} ({scaling[-1]['bytes']} bytes in {scaling[-1]['seconds']}s)")
    for st in stream:
        print(f"--log stream: {st['bytes']} bytes in {st['read_s']}s = {st['mbyte_s']} MB/s (bare loop "
              f"{st['bare_loop_mbyte_s']} MB/s), peak RSS {st['peak_rss_bytes'] >> 20} MiB")
    fast = all(st["mbyte_s"] >= STREAM_MIN_MBYTE_S for st in stream)
    return 0 if result["median_s"] <= 1.0 and fast else 1


if __name__ == "__main__":
    sys.exit(main())
