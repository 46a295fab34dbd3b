"""Wall time of ``ccdiag topo --replay <healthy sample> --json`` and the import cost behind it.

    python bench/bench_topo.py [-n 15]

Why measure a whole process: ``ccdiag`` runs in Slurm prologs and health-check loops, where the
interpreter start and the imports are paid on every call, so that is what an operator waits for.
Prints the figures and writes them to bench/results/topo.json. Target: median below 1.0 s on a
2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import sys
import time

from results_file import write_result  # bench/results_file.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "samples", "hgx-h100-8gpu-healthy.snap.tar.gz")
RESULTS = os.path.join(REPO, "bench", "results", "topo.json")
FLOOR_S = 1.0

#: the modules the topo path loads that are worth watching (cumulative import time)
WATCH = ("click", "rich", "rich.table", "rich.console", "networkx", "psutil", "jsonschema",
         "ccdiag.commands.cli", "ccdiag.host.door", "ccdiag.probes.registry", "ccdiag.report.document", "ccdiag.topology",
         "ccdiag.commands.topo", "ccdiag.probes.nvml", "ccdiag.probes.pcie", "ccdiag.probes.smi_topo",
         "ccdiag.probes.infiniband", "ccdiag.probes.netdev", "ccdiag.probes.system")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def time_runs(n: int) -> list[float]:
    argv = [sys.executable, "-m", "ccdiag", "topo", "--replay", SAMPLE, "--json"]
    times = []
    for _ in range(n):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"topo failed (exit {proc.returncode}): {proc.stderr.decode()[-400:]}")
        json.loads(proc.stdout)
    return times


def import_times(statement: str) -> dict[str, float]:
    """Cumulative import time (ms) per module from ``python -X importtime``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True,
                          text=True, cwd=tempfile.gettempdir())
    out: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            out[m.group(3)] = max(out.get(m.group(3), 0.0), int(m.group(1)) / 1000.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=15, help="number of timed runs (after one warm-up)")
    args = ap.parse_args()
    time_runs(1)  # warm the page cache and __pycache__
    times = time_runs(args.n)
    cli_imports = import_times("import ccdiag.commands.cli")
    topo_imports = import_times("import ccdiag.commands.cli, ccdiag.commands.topo, ccdiag.topology, ccdiag.topology.builder, "
                                "ccdiag.topology.matrix, ccdiag.report.document, ccdiag.probes.registry, rich.table, rich.console")
    result = {
        "command": "ccdiag topo --replay samples/hgx-h100-8gpu-healthy.snap.tar.gz --json",
        "runs": args.n,
        "median_s": round(statistics.median(times), 4),
        "p90_s": round(percentile(times, 0.9), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "floor_s": FLOOR_S,
        "below_floor": statistics.median(times) < FLOOR_S,
        "import_ccdiag_cli_ms": round(cli_imports.get("ccdiag.commands.cli", 0.0), 1),
        "import_topo_path_ms": {m: round(topo_imports[m], 1) for m in WATCH if m in topo_imports},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_result(RESULTS, result, echo=False)
    print(f"ccdiag topo --replay (healthy sample) --json, {args.n} runs: median {result['median_s']:.3f} s, "
          f"p90 {result['p90_s']:.3f} s (floor {FLOOR_S:.1f} s: {'below' if result['below_floor'] else 'ABOVE'})")
    print(f"import ccdiag.commands.cli: {result['import_ccdiag_cli_ms']:.1f} ms")
    for mod, ms in sorted(result["import_topo_path_ms"].items(), key=lambda kv: -kv[1]):
        print(f"  import {mod:<28} {ms:7.1f} ms (cumulative)")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
