#!/usr/bin/env python3
"""Time and peak memory of ``ccdiag compare DIR`` over 1,000 and 10,000 generated host reports.

Why: ``compare`` is meant for a whole fleet's reports at once, so its memory must not grow with
the number of reports (it streams: one file at a time, bounded per-key aggregates), and its time
should grow linearly. The reports are the samples' own ``ccdiag check --replay ... --json`` output
(about 0.5 MB each, full size, nothing trimmed), with perturbations: a unique host name each,
GPU0's temperature spread over 30-40 C, every 97th host on another driver, every 131st host the
degraded sample (lost GPU, x8 link, port down). Each measurement runs ``ccdiag compare`` in a
fresh interpreter; peak memory is that child's maximum resident set size.

    python bench/bench_compare.py [--counts 1000,10000] [--keep]

Writes ``bench/results/compare.json``. The generated files go to ``bench/out/compare`` (ignored
by git) and are removed afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import random
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"


def report_text(sample: str) -> str:
    r = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--replay", str(SAMPLES / sample), "--json"],
                       capture_output=True, text=True, check=False)
    if r.returncode not in (0, 1):
        sys.exit(f"bench_compare: ccdiag check failed: {r.stderr.strip()}")
    return r.stdout


def generate(out: pathlib.Path, count: int, healthy: str, degraded: str) -> dict:
    """Write ``count`` perturbed reports; returns what was planted, to check compare finds it."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(count)
    h_name = json.loads(healthy)["host"]["hostname"]
    d_name = json.loads(degraded)["host"]["hostname"]
    planted = {"driver": [], "degraded": [], "hot": []}
    for i in range(count):
        host = f"node{i:05d}"
        if i % 131 == 130:
            text = degraded.replace(d_name, host)
            planted["degraded"].append(host)
        else:
            text = healthy.replace(h_name, host)
            temp = 30.0 + rng.random() * 10
            if i % 503 == 502:
                temp = 88.0
                planted["hot"].append(host)
            text = text.replace('"temperature_c": 33.0', f'"temperature_c": {temp:.1f}', 1)
            if i % 97 == 96:
                text = text.replace('"driver_version": "570.133.20"', '"driver_version": "550.54.15"')
                planted["driver"].append(host)
        (out / f"{host}.json").write_text(text)
    return planted


def measure(directory: pathlib.Path) -> dict:
    code = ("import resource, subprocess, sys, time\n"
            "t = time.perf_counter()\n"
            "r = subprocess.run([sys.executable, '-m', 'ccdiag', 'compare', sys.argv[1], '--json'],"
            " capture_output=True, text=True)\n"
            "dt = time.perf_counter() - t\n"
            "sys.stderr.write(r.stderr)\n"
            "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)\n"
            "sys.stdout.write(r.stdout)\n")
    r = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True, check=False)
    first, _, rest = r.stdout.partition("\n")
    dt, rss_kib, rc = first.split()
    return {"seconds": round(float(dt), 2), "peak_rss_mib": round(int(rss_kib) / 1024, 1), "exit_code": int(rc),
            "doc": json.loads(rest) if rest.strip() else None, "stderr": r.stderr[-500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="1000,10000")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    healthy = report_text("hgx-h100-8gpu-healthy.snap.tar.gz")
    degraded = report_text("hgx-h100-8gpu-degraded.snap.tar.gz")
    results = []
    for count in [int(x) for x in args.counts.split(",")]:
        d = REPO / "bench" / "out" / "compare" / str(count)
        shutil.rmtree(d, ignore_errors=True)
        t = time.perf_counter()
        planted = generate(d, count, healthy, degraded)
        gen_s = time.perf_counter() - t
        size_mib = sum(f.stat().st_size for f in d.iterdir()) / 2**20
        m = measure(d)
        doc = m.pop("doc") or {}
        named = set(doc.get("hosts", {}))
        expected = set(planted["driver"]) | set(planted["degraded"]) | set(planted["hot"])
        row = {"reports": count, "input_mib": round(size_mib, 1), "generate_s": round(gen_s, 1), **m,
               "reports_per_s": round(count / m["seconds"], 1) if m["seconds"] else None,
               "outliers": len(doc.get("outliers", [])), "hosts_named": len(named),
               "planted_hosts": len(expected), "planted_found": len(expected & named),
               "unplanted_named": sorted(named - expected)[:10]}
        results.append(row)
        print(json.dumps(row), flush=True)
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    out = {"bench": "compare", "python": platform.python_version(), "cpus": os.cpu_count(),
           "machine": platform.machine(), "results": results}
    (REPO / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (REPO / "bench" / "results" / "compare.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
