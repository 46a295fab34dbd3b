"""Wall time of ``ccdiag check --replay``, ``ccdiag check --replay --json`` (with its peak memory)
and ``ccdiag topo --replay --json`` on synthesized nodes with many RDMA devices (100, 1,000, 3,000)
and many GPUs (8, 64, 256).

Why: the hostile-input issue found report building after 3,000 RDMA devices outside the deadline.
Each size is built with tests/synth/scale.py, saved, and run as a subprocess (what an operator
runs); results go to bench/results/scale.json. Usage: python bench/bench_scale.py [--quick]
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))



def _time_s(args: list[str]) -> tuple[float, int]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ccdiag", *args], capture_output=True, timeout=600)
    return round(time.monotonic() - start, 2), proc.returncode


def _json_run(args: list[str]) -> dict:
    """Wall time, peak RSS (this child's own ru_maxrss, from wait4) and what the report says of its run."""
    import json as _json
    import os

    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ccdiag", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    doc = _json.loads(out)
    return {"check_json_s": round(wall, 2), "check_json_exit": os.waitstatus_to_exitcode(status),
            "check_json_peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "report_bytes": len(out), "evaluation_s": doc["run"].get("duration_s"),
            "evaluation_deadline_s": doc["run"].get("deadline_s"), "timed_out": doc["run"].get("timed_out"),
            "matrix_omitted": bool((doc.get("topology") or {}).get("matrix", {}).get("omitted"))}


def main() -> None:
    quick = "--quick" in sys.argv
    sizes = [(100, 8), (1000, 8)] + ([] if quick else [(3000, 8)]) + [(8, 64)] + ([] if quick else [(8, 256)])
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for nics, gpus in sizes:
            path = f"{tmp}/scale-{nics}-{gpus}.snap.tar.gz"
            # built in a child: Linux carries a process's peak RSS over to the children it starts,
            # so a bench process that built the 3,000-NIC node would inflate every later figure
            subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "from synth.scale import build_scale_node; "
                            "build_scale_node(int(sys.argv[2]), int(sys.argv[3])).save(sys.argv[4], 0o644)",
                            str(ROOT / "tests"), str(nics), str(gpus), path], check=True, timeout=900)
            check_s, check_rc = _time_s(["check", "--replay", path])
            topo_s, topo_rc = _time_s(["topo", "--replay", path, "--json"])
            row = {"rdma_devices": nics, "gpus": gpus, "check_s": check_s, "check_exit": check_rc,
                   "topo_json_s": topo_s, "topo_exit": topo_rc, **_json_run(["check", "--replay", path, "--json"])}
            print(row, flush=True)
            out.append(row)
    dest = ROOT / "bench" / "results" / "scale.json"
    import os

    dest.write_text(json.dumps({"synthesized": True, "python": sys.version.split()[0], "cpus": os.cpu_count(),
                                "load_average_at_end": os.getloadavg(),
                                "runs": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
