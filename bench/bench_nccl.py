#!/usr/bin/env python3
"""Wall time of ``ccdiag nccl --replay <healthy sample>`` (a fresh interpreter per run, start-up and
imports included), and the NCCL log reader's time against input size.

Why: the recommendation is meant for job scripts and prologs (budget: median under 1 s on a 2-core
machine), and the log reader reads whatever users paste (it must stay linear). Writes
``bench/results/nccl.json``.

    python bench/bench_nccl.py [-n 15]
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

REPO = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
LOG = REPO / "tests" / "fixtures" / "corpus" / "nccl-log" / "2node-16rank-node2-trees-p2p-ipc-pxn-gdrdma-channels.txt"


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
    args = ap.parse_args(argv)
    cmd = [sys.executable, "-m", "ccdiag", "nccl", "--replay", str(SAMPLE)]
    wall(cmd)  # warm the page cache and .pyc files
    times = [wall(cmd) for _ in range(args.runs)]
    scaling = log_scaling()
    a, b = scaling[1], scaling[-1]
    slope = math.log(b["seconds"] / a["seconds"]) / math.log(b["bytes"] / a["bytes"]) if a["seconds"] > 0 else None
    result = {"benchmark": "nccl_replay_wall", "command": "ccdiag nccl --replay samples/hgx-h100-8gpu-healthy.snap.tar.gz",
              "runs": args.runs, "median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4),
              "min_s": round(min(times), 4), "budget_median_s": 1.0,
              "log_reader": {"sizes": scaling, "loglog_slope": round(slope, 3) if slope else None},
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    pathlib.Path(args.output).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"ccdiag nccl --replay: median {result['median_s']}s over {args.runs} runs; log reader slope "
          f"{result['log_reader']['loglog_slope']} ({scaling[-1]['bytes']} bytes in {scaling[-1]['seconds']}s)")
    return 0 if result["median_s"] <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
