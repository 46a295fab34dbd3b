"""RSS over 10,000 collection cycles: NVML failing to start, every probe failing, every probe ok.

    python bench/bench_daemon_cycles.py [--cycles 10000] [--warmup 200] [--cases nvml_init_fails,...]

Why: a daemon runs for months; 14 KB lost per cycle (what a failing ``nvmlInit`` once cost) is
80 MB a day at a 15 s interval. Production runs each cycle in a forked child
(:mod:`ccdiag.exporters.isolation`), which hides a leak in the collection code from the daemon's
RSS; this bench runs the loop *in-process* (``Daemon(isolate=False)``, ``run_cycle`` back to back,
no sleep) so anything the collection code, the cycle state or the rendering keeps shows here.

Cases (each in a fresh interpreter, so one cannot hide or cause another's growth):

* ``nvml_init_fails``: a live host (the real ``nvmlInit`` of this machine, which has no NVIDIA
  driver: it fails every cycle) over an empty root, every probe;
* ``all_probes_fail``: the bundled healthy sample with every probe's ``collect`` raising;
* ``all_probes_ok``: a synthesized 1-GPU node (``bench_render.node``; every probe delivers)
  replayed, so 10,000 cycles take minutes, not hours.

RSS is read (``/proc/self/statm`` via psutil) after ``--warmup`` cycles and a ``gc.collect()``,
then after ``--cycles`` more. Writes bench/results/daemon_cycles.json. Floor: growth <= 2 MB per case
(allocator noise; a 1 KB/cycle leak would be 10 MB).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from results_file import write_result  # bench/results_file.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bench"))
SAMPLE = os.path.join(REPO, "samples", "hgx-h100-8gpu-healthy.snap.tar.gz")
RESULTS = os.path.join(REPO, "bench", "results", "daemon_cycles.json")
CASES = ("nvml_init_fails", "all_probes_fail", "all_probes_ok")
FLOOR_GROWTH_MB = 2.0


def _daemon(case: str, root: str):
    import importlib

    from ccdiag.exporters.daemon import Daemon, DaemonConfig
    from ccdiag.host.door import LiveHost, ReplayHost
    from ccdiag.probes.registry import ALL_PROBES

    config = DaemonConfig(listen="127.0.0.1:0", interval_s=15.0, deadline_s=10.0)
    if case == "nvml_init_fails":
        host = LiveHost(root)
    elif case == "all_probes_fail":
        def boom(host):
            raise RuntimeError("simulated probe failure")

        for name in ALL_PROBES:
            importlib.import_module(f"ccdiag.probes.{name}").collect = boom
        host = ReplayHost(SAMPLE)
    else:
        from bench_render import node

        host = ReplayHost(node(1))
    return Daemon(config, host=host, isolate=False)


def run_case(case: str, cycles: int, warmup: int) -> dict:
    import logging

    import psutil

    logging.disable(logging.CRITICAL)  # every failing cycle logs; the log is not what is measured
    root = tempfile.mkdtemp(prefix="ccdiag-cycles-")
    d = _daemon(case, root)
    proc = psutil.Process()
    for _ in range(warmup):
        d.run_cycle()
    gc.collect()
    before = proc.memory_info().rss
    t0 = time.perf_counter()
    published = 0
    for _ in range(cycles):
        published += bool(d.run_cycle())
    wall = time.perf_counter() - t0
    gc.collect()
    after = proc.memory_info().rss
    cycle = d.collector.cycle
    statuses = {n: r.status for n, r in cycle.runs.items()} if cycle else {}
    mb = 1024 * 1024
    return {"case": case, "cycles": cycles, "warmup": warmup, "published": published,
            "probe_statuses": statuses, "ms_per_cycle": round(wall / cycles * 1000, 3),
            "rss_before_mb": round(before / mb, 2), "rss_after_mb": round(after / mb, 2),
            "rss_growth_mb": round((after - before) / mb, 2),
            "rss_growth_bytes_per_cycle": round((after - before) / cycles, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=10_000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # run one case here, print its JSON
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_case(args.one, args.cycles, args.warmup)))
        return 0
    rows = []
    for case in args.cases.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", case, "--cycles", str(args.cycles),
                              "--warmup", str(args.warmup)], capture_output=True, text=True, cwd=REPO)
        if out.returncode != 0:
            raise SystemExit(f"case {case} failed: {out.stderr.strip().splitlines()[-1:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{case}: {row['rss_before_mb']} -> {row['rss_after_mb']} MB over {row['cycles']} cycles "
              f"({row['ms_per_cycle']} ms/cycle)", file=sys.stderr)
        rows.append(row)
    result = {"cases": rows, "floor_growth_mb": FLOOR_GROWTH_MB,
              "pass": all(r["rss_growth_mb"] <= FLOOR_GROWTH_MB and r["published"] == r["cycles"] for r in rows),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}}
    write_result(RESULTS, result)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
