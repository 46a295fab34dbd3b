#!/usr/bin/env python3
"""ccdiag's ring allreduce against the MPI library's, and the time to name a slowed link.

Why: the ring is only a useful probe if it is not itself the bottleneck, so its busbw is compared
with MPI_Allreduce on the same ranks and buffers (goal: ring >= 0.9 x MPI at 16 MiB and above);
and the point of the per-hop table is to name a bad link quickly (goal: well under 30 s with 8
ranks). Runs on hosts made of network namespaces on one machine (tests/mpinet.py; needs root,
mpirun, mpi4py): 4 and 8 hosts, one rank each, TCP over veth pairs and a bridge. Two references:
OpenMPI's default decision (coll/tuned) and its own ring algorithm forced
(``coll_tuned_allreduce_algorithm 4``), since the default's choice on an oversubscribed 2-core
machine is not its best.

    sudo python bench/bench_allreduce.py [--ranks 4,8] [--sizes 16M,64M] [--iters 8]

Writes ``bench/results/allreduce.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from mpinet import NetnsCluster, netns_skip_reason, python_argv  # noqa: E402

FORCE_RING = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4"]


def _doc(out: str) -> dict | None:
    try:
        return json.loads(out[out.index("{"):])
    except ValueError:
        return None


def ratios(c: NetnsCluster, sizes: str, iters: int, extra: list[str]) -> dict:
    argv = c.mpirun_argv() + extra + python_argv("bench", "allreduce", "--sizes", sizes, "--iters", str(iters),
                                                  "--warmup", "2", "--budget", "240", "--json")
    rc, out, err, dt = c.run(argv, 300)
    doc = _doc(out)
    if doc is None:
        return {"error": f"rc {rc}: {err[-800:]}"}
    rows = []
    for r in doc["sizes"]:
        a = r["algos"]
        rows.append({"size_bytes": r["size_bytes"],
                     "ring_busbw_gbyte_s": round(a["ring"]["busbw_gbyte_s"], 4),
                     "halving_doubling_busbw_gbyte_s": round(a["halving-doubling"]["busbw_gbyte_s"], 4),
                     "mpi_busbw_gbyte_s": round(a["MPI_Allreduce"]["busbw_gbyte_s"], 4),
                     "ring_over_mpi": round(r["ring_ratio"].get("MPI_Allreduce", 0), 3),
                     "iters": {k: v.get("iters") for k, v in a.items()},
                     "wrong": sum(v["wrong"] for v in a.values())})
    return {"exit_code": rc, "wall_s": round(dt, 1), "rows": rows, "skipped_sizes": doc.get("skipped_sizes")}


def time_to_name(n: int, slow: int) -> dict:
    with NetnsCluster(n) as c:
        c.slow_host(slow)
        argv = c.mpirun_argv() + python_argv("bench", "allreduce", "--sizes", "1M", "--iters", "2", "--warmup",
                                              "0", "--budget", "60", "--json")
        rc, out, err, dt = c.run(argv, 120)
        doc = _doc(out) or {}
        failed = [f["details"] for f in doc.get("findings", []) if f["status"] == "fail"]
        named = bool(failed) and all(d["dst_host"] == c.hosts[slow] for d in failed) and \
            failed[0]["src_host"] == c.hosts[slow - 1]
        return {"ranks": n, "slowed": f"tbf 50mbit into {c.hosts[slow]}", "exit_code": rc,
                "seconds_to_verdict": round(dt, 2), "named_exactly": named,
                "failing_hops": [f"{d['src_host']} -> {d['dst_host']} ({d['iface']}): {d['gbyte_s'] * 1000:.1f} MB/s"
                                 for d in failed],
                "median_hop_mbyte_s": round((doc.get("hops") or {}).get("median_gbyte_s", 0) * 1000, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--sizes", default="16M,64M")
    ap.add_argument("--iters", type=int, default=8)
    args = ap.parse_args()
    why = netns_skip_reason()
    if why:
        sys.exit(f"bench_allreduce: {why}")
    result = {"bench": "allreduce", "python": platform.python_version(), "cpus": os.cpu_count(),
              "transport": "OpenMPI TCP BTL over veth + bridge, one rank per network namespace", "runs": []}
    for n in [int(x) for x in args.ranks.split(",")]:
        with NetnsCluster(n) as c:
            for label, extra in (("default decision", []), ("forced ring (algorithm 4)", FORCE_RING)):
                t = time.perf_counter()
                r = ratios(c, args.sizes, args.iters, extra)
                r.update(ranks=n, reference=f"MPI_Allreduce, coll/tuned {label}")
                result["runs"].append(r)
                print(json.dumps(r), f"({time.perf_counter() - t:.0f} s)", flush=True)
    result["name_slow_link"] = time_to_name(8, 5)
    print(json.dumps(result["name_slow_link"]), flush=True)
    (REPO / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (REPO / "bench" / "results" / "allreduce.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
