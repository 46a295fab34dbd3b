#!/usr/bin/env python3
"""A healthy single host: ``mpirun -np 4 ccdiag bench allreduce`` with its defaults, N times in a row,
on a machine loaded by whatever else runs on it. Goal: no run exits 1 (every hop there is shared
memory, never a network finding); each run's exit code, wall time, hop links and any finding are
kept. Needs mpirun and mpi4py.

    python bench/bench_single_host.py [--runs 20] [--ranks 4]

Writes ``bench/results/single_host.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from results_file import write_result  # noqa: E402


def one_run(ranks: int) -> dict:
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), sys.executable, "-m", "ccdiag",
            "bench", "allreduce", "--json"]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    wall = time.monotonic() - t0
    try:
        doc = json.loads(p.stdout[p.stdout.index("{"):])
    except ValueError:
        doc = {}
    return {"exit_code": p.returncode, "wall_s": round(wall, 1),
            "links": sorted({r["iface"] for r in (doc.get("hops") or {}).get("rows", [])}),
            "findings": [f"{f['status']} {f['check']}: {f['summary']}" for f in doc.get("findings", [])],
            "sizes_done": [r["size_bytes"] for r in doc.get("sizes", [])],
            "skipped_sizes": doc.get("skipped_sizes"), "wrong": sum(a["wrong"] for r in doc.get("sizes", [])
                                                                  for a in r["algos"].values()),
            "stderr_tail": p.stderr[-300:] if p.returncode else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "single_host.json"))
    args = ap.parse_args()
    runs = []
    for k in range(args.runs):
        runs.append(one_run(args.ranks))
        print(f"run {k + 1}: exit {runs[-1]['exit_code']} in {runs[-1]['wall_s']} s", file=sys.stderr, flush=True)
    load = os.getloadavg()
    write_result(args.out, {
        "bench": "single_host", "command": f"mpirun -np {args.ranks} ccdiag bench allreduce --json (defaults)",
        "cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in load], "runs": runs,
        "exit_codes": {str(c): sum(1 for r in runs if r["exit_code"] == c) for c in sorted({r["exit_code"] for r in runs})},
        "failures": sum(1 for r in runs if r["exit_code"] == 1), "date": time.strftime("%Y-%m-%d")})


if __name__ == "__main__":
    main()
