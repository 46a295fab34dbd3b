"""Wall and CPU time of the developer's fast loop: ``python -m pytest -m "not slow"``.

    python bench/bench_fast_tests.py

Why: the fast loop must stay under a minute on a 2-core machine while importing every module (the
run itself fails when one is left out, see tests/fastloop.py). On a shared machine the wall time
depends on the load, so the CPU time of the test process and its children and the load average
before and after are recorded beside it. Writes bench/results/fast_tests.json.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from results_file import write_result  # noqa: E402

RESULTS = os.path.join(REPO, "bench", "results", "fast_tests.json")
TARGET_S = 60.0
COMMAND = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"]


def main() -> int:
    load_before = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(COMMAND, cwd=REPO, capture_output=True, text=True, timeout=1800)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", tail)}
    result = {"command": "python -m pytest -q -p no:cacheprovider -m 'not slow'", "target_s": TARGET_S,
              "wall_s": round(wall_s, 1), "cpu_s": round(cpu_s, 1), "returncode": proc.returncode,
              "summary": tail, "counts": counts, "load_avg_1min_before": round(load_before, 2),
              "load_avg_1min_after": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
              "python": platform.python_version()}
    write_result(RESULTS, result)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
