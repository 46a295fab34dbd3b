#!/usr/bin/env python3
"""Wall time of ``ccdiag check --replay <healthy sample>`` as a user pays it: a fresh interpreter per
run (start-up and imports included), N runs, median and p90.

Why it matters: ``ccdiag check`` runs in every Slurm prolog, so its fixed cost is paid per job.
Budget: median at most 1.0 s on a 2-core machine. Writes ``bench/results/check.json`` and exits 1
when the median is over budget.

    python bench/bench_check.py [-n 15] [--sample FILE] [--budget 1.0]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

from results_file import write_result  # bench/results_file.py, beside this script

REPO = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_SAMPLE = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: with 15 runs, p90 is the 14th fastest)."""
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))  # ceil(q/100 * n)
    return ordered[rank - 1]


def time_once(cmd: list[str], env: dict) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return time.perf_counter() - t0, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=15)
    ap.add_argument("--sample", default=str(DEFAULT_SAMPLE))
    ap.add_argument("--budget", type=float, default=1.0, help="median budget in seconds")
    ap.add_argument("--output", default=str(REPO / "bench" / "results" / "check.json"))
    args = ap.parse_args(argv)
    if not os.path.exists(args.sample):
        print(f"bench_check: sample {args.sample} not found (run samples/make_samples.py)", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "ccdiag", "check", "--replay", args.sample]
    env = dict(os.environ)  # the installed ccdiag (pip install . or -e .), as users run it
    warm, rc = time_once(cmd, env)  # fill the page cache and .pyc files; not counted
    if rc not in (0, 1):
        print(f"bench_check: `{' '.join(cmd)}` exited {rc}", file=sys.stderr)
        return 2
    times = []
    for _ in range(args.runs):
        elapsed, rc = time_once(cmd, env)
        times.append(elapsed)
    median = statistics.median(times)
    result = {
        "benchmark": "check_replay_wall",
        "command": ["python", "-m", "ccdiag", "check", "--replay", os.path.relpath(args.sample, REPO)],
        "runs": args.runs,
        "exit_code": rc,
        "median_s": round(median, 4),
        "p90_s": round(percentile(times, 90), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "times_s": [round(t, 4) for t in times],
        "budget_median_s": args.budget,
        "within_budget": median <= args.budget,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "machine": platform.machine()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_result(args.output, result, echo=False)
    print(f"ccdiag check --replay: median {median:.3f}s, p90 {result['p90_s']:.3f}s over {args.runs} runs "
          f"(budget {args.budget:.1f}s: {'ok' if result['within_budget'] else 'OVER'}) -> {args.output}")
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
