#!/usr/bin/env python3
"""Wall and CPU time of ``ccdiag check --replay <sample>`` as a user pays it: a fresh interpreter per
run (start-up and imports included), N runs, median and p90 of the wall time and the median of the
CPU seconds (user + system of the child, from ``getrusage(RUSAGE_CHILDREN)``).

Why it matters: ``ccdiag check`` runs in every Slurm prolog, so its fixed cost is paid per job.
The CPU seconds are the figure to compare across code changes on a shared machine: they do not
count the time the run waited for a core. Budget: median wall time at most 1.0 s on a 2-core
machine. Writes ``bench/results/check.json`` (``--output`` to keep another) and exits 1 when the
median is over budget.

    python bench/bench_check.py [-n 15] [--sample FILE] [--budget 1.0] [--output FILE]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import resource
import time

from results_file import write_result  # bench/results_file.py, beside this script

REPO = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_SAMPLE = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: with 15 runs, p90 is the 14th fastest)."""
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))  # ceil(q/100 * n)
    return ordered[rank - 1]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(cmd: list[str], env: dict) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, exit code) of one run."""
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return time.perf_counter() - t0, _children_cpu_s() - cpu0, proc.returncode


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
    warm, _, rc = time_once(cmd, env)  # fill the page cache and .pyc files; not counted
    if rc not in (0, 1):
        print(f"bench_check: `{' '.join(cmd)}` exited {rc}", file=sys.stderr)
        return 2
    times, cpus = [], []
    for _ in range(args.runs):
        elapsed, cpu, rc = time_once(cmd, env)
        times.append(elapsed)
        cpus.append(cpu)
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
        "cpu_median_s": round(statistics.median(cpus), 4),
        "cpu_min_s": round(min(cpus), 4),
        "cpu_s": [round(c, 4) for c in cpus],
        "budget_median_s": args.budget,
        "within_budget": median <= args.budget,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "machine": platform.machine()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_result(args.output, result, echo=False)
    print(f"ccdiag check --replay: median {median:.3f}s, p90 {result['p90_s']:.3f}s over {args.runs} runs "
          f"CPU median {result['cpu_median_s']:.3f}s (user+sys) "
          f"(budget {args.budget:.1f}s: {'ok' if result['within_budget'] else 'OVER'}) -> {args.output}")
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
