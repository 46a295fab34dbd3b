#!/usr/bin/env python3
"""Wall time of the README's first command on a fresh clone: ``git clone`` of the current commit
into a temporary directory, then the quick-start line exactly as the README writes it, run by
bash (venv creation, ``pip install .`` with its dependencies from the configured index, ``ccdiag
check`` on this machine, ``ccdiag check --replay`` on the degraded sample). N runs, each in its own
fresh clone; median and max.

Why it matters: the first minute of a new user. Budget: every run under 30 s on a 2-core machine.
Writes ``bench/results/quickstart.json`` and exits 1 when a run is over budget or does not give both
verdicts.

    python bench/bench_quickstart.py [-n 3] [--budget 30]
    python bench/bench_quickstart.py --ab-compile [-n 2]   # pip install . with and without --no-compile,
                                                           # alternating, in fresh venvs (quickstart_ab.json)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

from results_file import write_result  # bench/results_file.py, beside this script

REPO = pathlib.Path(__file__).resolve().parent.parent


def quickstart_line() -> str:
    block = re.search(r"## Quick start.*?```sh\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)
    return block.group(1).strip()


def timed(line: str) -> tuple[str, list[str]]:
    """The same line with bash's ``time`` before each of its commands (same shell, same ``&&``/``;``),
    so each step's wall time is printed on stderr as ``step <seconds>``; and the steps' names."""
    parts = re.split(r"( && |; )", line)
    steps = parts[0::2]
    out = "".join(f"time {p}" if i % 2 == 0 else p for i, p in enumerate(parts))
    return "TIMEFORMAT='step %R'; " + out, [" ".join(s.split()[:3]) for s in steps]


def run_once(line: str) -> tuple[float, list[str], int, dict[str, float]]:
    script, names = timed(line)
    with tempfile.TemporaryDirectory(prefix="ccdiag-qs-") as tmp:
        clone = os.path.join(tmp, "ccdiag")
        subprocess.run(["git", "clone", "-q", str(REPO), clone], check=True, timeout=120)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        t0 = time.perf_counter()
        proc = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=600)
        elapsed = time.perf_counter() - t0
    verdicts = [l for l in proc.stdout.splitlines() if re.match(r"^(OK|WARN|FAIL|UNKNOWN): ", l)]
    step_s = [float(x) for x in re.findall(r"^step ([\d.]+)$", proc.stderr, re.M)]
    return elapsed, verdicts, proc.returncode, dict(zip(names, step_s))


def ab_compile(runs: int, output: str) -> int:
    """``pip install .`` against ``pip install --no-compile .``, alternating so both meet the same load."""
    times: dict[str, list[float]] = {"pip install .": [], "pip install --no-compile .": []}
    with tempfile.TemporaryDirectory(prefix="ccdiag-ab-") as tmp:
        clone = os.path.join(tmp, "ccdiag")
        subprocess.run(["git", "clone", "-q", str(REPO), clone], check=True, timeout=120)
        for i in range(runs * 2):
            mode = list(times)[i % 2]
            venv = os.path.join(tmp, f"venv{i}")
            subprocess.run(["python3", "-m", "venv", venv], check=True, timeout=300)
            t0 = time.perf_counter()
            subprocess.run([f"{venv}/bin/pip", "install", "-q", *mode.split()[2:-1], "."], cwd=clone, check=True,
                           capture_output=True, timeout=600)
            times[mode].append(round(time.perf_counter() - t0, 2))
    write_result(output, {"what": "pip install . with and without --no-compile, fresh venvs, alternating",
                          "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                          "loadavg_1m_after": round(os.getloadavg()[0], 2), "runs_s": times})
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=3)
    ap.add_argument("--budget", type=float, default=30.0, help="seconds every run must stay under")
    ap.add_argument("--output", default=str(REPO / "bench" / "results" / "quickstart.json"))
    ap.add_argument("--ab-compile", action="store_true", help="time pip install with and without --no-compile")
    args = ap.parse_args(argv)
    if args.ab_compile:
        return ab_compile(args.runs, str(REPO / "bench" / "results" / "quickstart_ab.json"))
    line = quickstart_line()
    load_before = os.getloadavg()[0]
    times, verdicts, steps = [], [], []
    for _ in range(args.runs):
        elapsed, found, rc, step_s = run_once(line)
        times.append(round(elapsed, 2))
        steps.append(step_s)
        verdicts = found
        if len(found) != 2:
            print(f"bench_quickstart: expected two verdicts, got {found} (exit {rc})", file=sys.stderr)
            return 1
    result = {
        "what": "README quick start on a fresh clone (venv, pip install ., check here and on the sample)",
        "command": line,
        "python3": subprocess.run(["python3", "--version"], capture_output=True, text=True).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        # the machine may be shared: the figures are only as quiet as the machine was
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "runs_s": times,
        "steps_s": steps,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "budget_s": args.budget,
        "verdicts": verdicts,
    }
    write_result(args.output, result)
    return 0 if max(times) < args.budget else 1


if __name__ == "__main__":
    sys.exit(main())
