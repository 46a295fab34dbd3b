"""Wall time of ``ccdiag check --replay``, ``ccdiag check --replay --json`` (with its peak memory)
and ``ccdiag topo --replay --json`` on synthesized nodes with many RDMA devices (100, 1,000, 3,000)
and many GPUs (8, 64, 256); and ``check --json --timeout 10``, whose whole run (reading the
snapshot, probes, judging, the JSON report) must end inside those 10 s; and that same bounded run
again with ``--busy N`` CPU-bound processes (default 4) running beside it, so that on a 2-core
machine the load is about 5: the verdict (possibly with UNKNOWNs for what did not fit) must still
come within the deadline.

Why: the hostile-input issue found ``check --json`` on 3,000 RDMA devices at 22 s and 1.17 GB, with
report building outside the deadline; the target is under 10 s and 300 MB. Each size is built with
tests/synth/scale.py, saved in the snapshot format this ccdiag writes (its meta says which), and run
as a subprocess (what an operator runs); results go to bench/results/scale.json (the figures of
each run beside the load average of this machine, which is shared). Usage:
python bench/bench_scale.py [--quick] [--big] [--busy N] [--baseline PYTHON]
(--big: only the 3,000-NIC and 256-GPU nodes; --baseline: the same runs, each just before this
tree's, with the ccdiag of another installation, e.g. a virtual environment of the tree before a
change, so that before and after are taken in the same machine state). Each bounded run records
its wall and processor seconds, whether stdout held one whole JSON document, its exit code and
what the report left out at the deadline.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))



def _time_s(args: list[str], python: str = sys.executable, cwd: str | None = None) -> tuple[float, int]:
    start = time.monotonic()
    proc = subprocess.run([python, "-m", "ccdiag", *args], capture_output=True, timeout=600, cwd=cwd)
    return round(time.monotonic() - start, 2), proc.returncode


def _json_run(args: list[str], python: str = sys.executable, cwd: str | None = None) -> dict:
    """Wall time, processor time and peak RSS (this child's own, from wait4), whether stdout held
    one whole JSON document, and what the report says of its run."""
    import json as _json

    start = time.monotonic()
    proc = subprocess.Popen([python, "-m", "ccdiag", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=cwd)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    try:
        doc = _json.loads(out)
    except ValueError:
        doc = None
    run = (doc or {}).get("run") or {}
    return {"check_json_s": round(wall, 2), "check_json_exit": os.waitstatus_to_exitcode(status),
            "check_json_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "check_json_peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "one_json_document": doc is not None,
            "report_bytes": len(out), "evaluation_s": run.get("duration_s"),
            "evaluation_deadline_s": run.get("deadline_s"), "timed_out": run.get("timed_out"),
            "omitted": (run.get("omitted") or {}).get("sections"), "verdict": ((doc or {}).get("verdict") or {}).get("status"),
            "matrix_omitted": bool(((doc or {}).get("topology") or {}).get("matrix", {}).get("omitted"))}


class Busy:
    """``n`` CPU-bound processes (a bare loop each) while the block runs."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self) -> "Busy":
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        time.sleep(1.0)  # the scheduler has them running
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def _measure(path: str, busy_n: int, python: str, cwd: str | None) -> dict:
    """Every figure of one snapshot with one ccdiag (``python -m ccdiag`` run in ``cwd``)."""
    check_s, check_rc = _time_s(["check", "--replay", path], python, cwd)
    topo_s, topo_rc = _time_s(["topo", "--replay", path, "--json"], python, cwd)
    row = {"check_s": check_s, "check_exit": check_rc, "topo_json_s": topo_s, "topo_exit": topo_rc,
           **_json_run(["check", "--replay", path, "--json"], python, cwd)}
    bounded = _json_run(["check", "--replay", path, "--json", "--timeout", "10"], python, cwd)
    row["timeout_10"] = {"wall_s": bounded["check_json_s"], "exit": bounded["check_json_exit"],
                         "cpu_s": bounded["check_json_cpu_s"], "evaluation_s": bounded["evaluation_s"],
                         "timed_out": bounded["timed_out"], "omitted": bounded["omitted"],
                         "one_json_document": bounded["one_json_document"], "peak_rss_mb": bounded["check_json_peak_rss_mb"]}
    with Busy(busy_n):
        load_before = os.getloadavg()[0]
        loaded = _json_run(["check", "--replay", path, "--json", "--timeout", "10"], python, cwd)
        load_now = os.getloadavg()[0]
    row["timeout_10_beside_busy"] = {
        "busy_processes": busy_n, "wall_s": loaded["check_json_s"], "exit": loaded["check_json_exit"],
        "cpu_s": loaded["check_json_cpu_s"], "evaluation_s": loaded["evaluation_s"], "timed_out": loaded["timed_out"],
        "omitted": loaded["omitted"], "verdict": loaded["verdict"], "one_json_document": loaded["one_json_document"],
        "within_deadline": loaded["check_json_s"] <= 10.0, "load_average_1m_before": load_before,
        "load_average_1m": load_now}
    row["load_average_1m"] = os.getloadavg()[0]
    return row


def main() -> None:
    quick = "--quick" in sys.argv
    busy_n = int(sys.argv[sys.argv.index("--busy") + 1]) if "--busy" in sys.argv else 4
    # --baseline PYTHON: the same runs, interleaved, with another installation's ccdiag (a virtual
    # environment of the tree before a change), so before and after share the machine's state
    baseline = sys.argv[sys.argv.index("--baseline") + 1] if "--baseline" in sys.argv else None
    sizes = [(100, 8), (1000, 8)] + ([] if quick else [(3000, 8)]) + [(8, 64)] + ([] if quick else [(8, 256)])
    if "--big" in sys.argv:
        sizes = [(3000, 8), (8, 256)]
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
            import gzip

            with open(path, "rb") as fh:
                packed = fh.read()
            row = {"rdma_devices": nics, "gpus": gpus, "snapshot_bytes": len(packed),
                   "snapshot_unpacked_bytes": len(gzip.decompress(packed)), "snapshot_format": _format_of(path)}
            if baseline:
                # run where the baseline's own package is found (not this tree's, from the cwd)
                row["baseline"] = {"python": baseline, **_measure(path, busy_n, baseline, tmp)}
            row.update(_measure(path, busy_n, sys.executable, None))
            print(row, flush=True)
            out.append(row)
    sys.path.insert(0, str(ROOT / "bench"))
    from results_file import write_result

    write_result(str(ROOT / "bench" / "results" / "scale.json"),
                 {"synthesized": True, "python": sys.version.split()[0], "cpus": os.cpu_count(),
                  "command": "python bench/bench_scale.py " + " ".join(sys.argv[1:]),
                  "load_average_at_end": os.getloadavg(), "runs": out}, echo=False)


def _format_of(path: str) -> int | None:
    """meta.json's format_version (read alone: loading the snapshot here would raise this process's
    peak memory, which the children it starts afterwards would report as theirs)."""
    import tarfile

    with tarfile.open(path) as tar:
        fh = tar.extractfile("meta.json")
        return json.loads(fh.read()).get("format_version") if fh else None


if __name__ == "__main__":
    main()
