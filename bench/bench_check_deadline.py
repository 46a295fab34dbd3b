#!/usr/bin/env python3
"""How far past its deadline ``ccdiag check --timeout T`` ends when the driver is wedged.

Why it matters: a Slurm prolog or ``HealthCheckProgram`` is killed at 60 s, so ``--timeout`` is a
promise, and the tests only hold it to a loose bound (a loaded CI machine must not fail them). This
measures the real overshoot: each run is a fresh interpreter whose ``pynvml.nvmlInit`` never
returns and whose ``nvidia-smi`` on PATH never exits and ignores SIGTERM (both synthesized, in
``tests/wedged.py``, which the deadline tests use too). Reports, over N runs, the median, p90 and worst of the run's own
``duration_s`` and of the wall time (interpreter start-up included), each minus the deadline.
Writes ``bench/results/check_deadline.json`` (``--output`` to keep another).

    python bench/bench_check_deadline.py [-n 10] [--timeout 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from results_file import write_result  # bench/results_file.py, beside this script

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from wedged import HUNG_PYNVML, write_hung_smi  # noqa: E402 - the tests' one copy of the wedged driver



def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, int(-(-q * len(ordered) // 100))) - 1]


def _kill_listed(pids_file: pathlib.Path) -> None:
    if not pids_file.exists():
        return
    for line in pids_file.read_text().split():
        try:
            os.kill(int(line), signal.SIGKILL)
        except (ValueError, ProcessLookupError, PermissionError):
            pass
    pids_file.unlink()


def summary(values: list[float]) -> dict:
    return {"median_s": round(statistics.median(values), 3), "p90_s": round(percentile(values, 90), 3),
            "max_s": round(max(values), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=3.0, help="the --timeout given to check, seconds")
    ap.add_argument("--output", default=str(REPO / "bench" / "results" / "check_deadline.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ccdiag-deadline-") as tmp:
        root = pathlib.Path(tmp)
        (root / "bin").mkdir()
        (root / "nvml").mkdir()
        pids = root / "smi.pids"
        write_hung_smi(root / "bin", pids)
        (root / "nvml" / "pynvml.py").write_text(HUNG_PYNVML)
        env = dict(os.environ, PYTHONPATH=str(root / "nvml"),
                   PATH=f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        cmd = [sys.executable, "-m", "ccdiag", "check", "--timeout", str(args.timeout), "--json"]
        own, wall, codes = [], [], []
        try:
            for _ in range(args.runs):
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
                wall.append(time.perf_counter() - t0 - args.timeout)
                codes.append(proc.returncode)
                try:
                    own.append(json.loads(proc.stdout)["run"]["duration_s"] - args.timeout)
                except (ValueError, KeyError, TypeError):
                    print(f"bench_check_deadline: no JSON report (exit {proc.returncode}): "
                          f"{proc.stderr.strip()[-300:]}", file=sys.stderr)
                    return 2
                _kill_listed(pids)
        finally:
            _kill_listed(pids)
    result = {
        "benchmark": "check_deadline_overshoot",
        "command": ["python", "-m", "ccdiag", "check", "--timeout", str(args.timeout), "--json"],
        "conditions": "nvmlInit never returns; nvidia-smi on PATH never exits and ignores SIGTERM",
        "runs": args.runs,
        "exit_codes": sorted(set(codes)),
        "past_deadline_own_duration": summary(own),
        "past_deadline_wall_with_startup": summary(wall),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    write_result(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
