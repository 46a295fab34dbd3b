"""What ccdiag's NVML collection costs beyond the NVML calls it makes.

    python bench/bench_nvml_cost.py [--repeat 30] [--snapshot samples/hgx-h100-8gpu-healthy.snap.tar.gz]

Why: every NVML call goes through :class:`ccdiag.host.nvmlcall.NvmlFacade`, which bounds it in time
(a wedged driver blocks a call for minutes) by running it on a worker thread. One collection of an
8-GPU node makes about 1,700 calls; a hand-off between threads per call once made the collection
cost 13 to 37 times the calls themselves; the calls are now handed over in batches
(:meth:`ccdiag.host.nvmlcall.NvmlFacade.prefetch`, told by the probe what it will ask). Goal: one collection within 2x the same calls made
directly, the hung-call protection kept.

How: the pynvml functions are stubbed in this process by the values a real node recorded (the
snapshot's NVML records: each call's answer or its error code), so the driver costs the same
(nothing) on both sides. ``ccdiag``: the nvml probe's collection through ``LiveHost(nvml_binding=
stub)`` (facade, deadlines, parsing: everything ``ccdiag check`` does for NVML), a fresh host each
time. ``direct``: the same calls, in the same order, made straight on the stub with handles looked up
once, and each answer converted to plain values as any caller must (``jsonify``). Both are timed
``--repeat`` times; the medians and their ratio are reported, and the ratio of the fastest runs (on
a shared, loaded machine the medians of the threaded side also measure the scheduler). Writes
bench/results/nvml_cost.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from results_file import write_result  # noqa: E402 - beside this script

RESULTS = os.path.join(REPO, "bench", "results", "nvml_cost.json")


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class _NvmlError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.value = code


class RecordedBinding:
    """pynvml's functions answering what a node answered (keyed by function and arguments)."""

    def __init__(self, records: list[dict]):
        self.answers: dict[tuple, dict] = {}
        for rec in records:
            if rec.get("epoch", 0) == 0:
                call = rec["call"]
                self.answers[(call[0], repr(call[1:]))] = rec
        self.handles = {i: _Handle(i) for i in range(64)}
        self.log: list[tuple] = []

    def nvmlInit(self):
        return None

    def nvmlShutdown(self):
        return None

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.handles[index]

    def __getattr__(self, fn: str):
        if not fn.startswith("nvml"):
            raise AttributeError(fn)

        def stub(*args):
            key_args = [a.index if isinstance(a, _Handle) else a for a in args]
            rec = self.answers.get((fn, repr(key_args)))
            if rec is None:
                raise _NvmlError(3, "Not Supported")
            if "ok" in rec:
                return rec["ok"]
            raise _NvmlError(rec.get("code") or 999, rec.get("message", ""))

        return stub


class LoggingBinding(RecordedBinding):
    def __getattr__(self, fn: str):
        stub = super().__getattr__(fn)

        def logged(*args):
            self.log.append((fn, tuple(args)))
            return stub(*args)

        return logged


def ccdiag_once(records: list[dict]) -> float:
    from ccdiag.host.door import LiveHost
    from ccdiag.probes import nvml

    host = LiveHost(nvml_binding=RecordedBinding(records))
    t0 = time.perf_counter()
    nvml.collect(host)
    took = time.perf_counter() - t0
    host.close() if hasattr(host, "close") else None
    return took


def direct_once(records: list[dict], calls: list[tuple]) -> float:
    from ccdiag.host.nvmlcall import jsonify

    b = RecordedBinding(records)
    t0 = time.perf_counter()
    b.nvmlInit()
    handles: dict[int, _Handle] = {}
    for fn, args in calls:
        real = []
        for a in args:
            if isinstance(a, _Handle):
                if a.index not in handles:
                    handles[a.index] = b.nvmlDeviceGetHandleByIndex(a.index)
                a = handles[a.index]
            real.append(a)
        try:
            jsonify(getattr(b, fn)(*real))
        except _NvmlError:
            pass
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--snapshot", default=os.path.join(REPO, "samples", "hgx-h100-8gpu-healthy.snap.tar.gz"))
    args = ap.parse_args()
    from ccdiag.host.door import LiveHost
    from ccdiag.host.snapshot import SnapshotData
    from ccdiag.probes import nvml

    records = SnapshotData.load(args.snapshot).nvml
    logging = LoggingBinding(records)
    nvml.collect(LiveHost(nvml_binding=logging))  # the calls one collection makes, in order
    calls = logging.log
    ccdiag_s, direct_s = [], []
    for _ in range(args.repeat):  # interleaved: both see the same load
        ccdiag_s.append(ccdiag_once(records))
        direct_s.append(direct_once(records, calls))
    med_c, med_d = statistics.median(ccdiag_s), statistics.median(direct_s)
    doc = {"command": "python bench/bench_nvml_cost.py " + " ".join(sys.argv[1:]),
           "snapshot": os.path.basename(args.snapshot), "calls_per_collection": len(calls),
           "ccdiag_median_s": round(med_c, 5), "direct_median_s": round(med_d, 5),
           "ratio": round(med_c / med_d, 2), "goal_ratio_max": 2.0,
           # the fastest of each: what the code costs when the machine's load lets it run
           "ratio_of_minima": round(min(ccdiag_s) / min(direct_s), 2),
           "load_average_1m": os.getloadavg()[0],
           "ccdiag_min_s": round(min(ccdiag_s), 5), "direct_min_s": round(min(direct_s), 5),
           "repeat": args.repeat, "host": {"python": platform.python_version(), "cpus": os.cpu_count()}}
    write_result(RESULTS, doc, echo=False)
    print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
