#!/usr/bin/env python3
"""What ``ccdiag bench`` itself costs, on a machine without a GPU.

1. ``ccdiag bench import`` of every benchmark output in the corpus (nvbandwidth,
   p2pBandwidthLatencyTest, nccl-tests, perftest: 12 files) against the healthy sample's topology,
   one fresh interpreter for all of them (start-up and imports included), median of N.
2. The CuPy engine's harness around the copies: the full 8-GPU matrix (h2d, d2h, bidirectional,
   remote NUMA, d2d, 56 ordered pairs x write/read/bidir/latency) run against the CuPy test double
   (tests/fakes/cupy, SYNTHESIZED: copies take no time), so the figure is ccdiag's own overhead:
   the child process, CUDA-call bookkeeping, JSON lines, judging and localisation.

Copy bandwidth itself needs a GPU: this script does not pretend to measure it. Writes
``bench/results/benchmarks.json``.

    python bench/bench_benchmarks.py [-n 7]
"""

from __future__ import annotations

import argparse
import json
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
CORPUS = REPO / "tests" / "fixtures" / "corpus"


def corpus_files() -> list[str]:
    return sorted(str(p) for d in ("nvbandwidth", "nccl-tests", "perftest") for p in (CORPUS / d).glob("*.txt")
                  if "server-side-no-results" not in p.name)


def import_wall(n: int) -> dict:
    files = corpus_files()
    cmd = [sys.executable, "-m", "ccdiag", "bench", "import", *files, "--replay", str(SAMPLE), "--json"]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - t0)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"bench import exited {proc.returncode}: {proc.stderr.decode()[:300]}")
    doc = json.loads(proc.stdout)
    figures = sum(len(b["measurements"]) for b in doc["bench"])
    return {"files": len(files), "figures": figures, "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3), "runs": n}


def engine_overhead(n: int) -> dict:
    sys.path.insert(0, str(REPO / "tests"))
    from bench_support import context, fake_env, observed  # noqa: E402

    from ccdiag.bench.gpu_copy import run_group

    runs, topo = observed("hgx-h100-8gpu-healthy")
    env = fake_env(h2d={"default": 55.0}, d2h={"default": 55.0}, d2d={"default": 2000.0}, p2p_default=380.0)
    times, counts = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        out = run_group(["h2d", "d2h", "d2d", "p2p"], context(runs, topo, env, size_bytes=256 << 20, iters=5), 120)
        times.append(time.perf_counter() - t0)
        counts.append(sum(len(r.measurements) for r in out.values()))
    return {"gpus": 8, "figures": counts[-1], "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3), "runs": n, "note": "CuPy test double: copies take no time"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=7)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "benchmarks.json"))
    args = ap.parse_args()
    res = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "date": time.strftime("%Y-%m-%d"),
           "import_corpus": import_wall(args.n), "engine_overhead_8gpu": engine_overhead(max(3, args.n // 2)),
           "copy_bandwidth_vs_independent": "not measured: no GPU was available to this run"}
    pathlib.Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
