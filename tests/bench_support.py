"""Shared set-up of the benchmark tests: a topology from a bundled (synthesized) sample, a context
that says it is live, and the environment that points the CUDA worker at the CuPy test double
(tests/fakes/cupy, SYNTHESIZED)."""

from __future__ import annotations

import json
import os
import pathlib
import time

from ccdiag.bench.registry import BenchContext
from ccdiag.run.checkrun import evaluate
from ccdiag.host.door import ReplayHost
from ccdiag.host.snapshot import SnapshotData

TESTS = pathlib.Path(__file__).resolve().parent
SAMPLES = TESTS.parent / "samples"
FAKES = TESTS / "fakes"

#: the sample nodes' GPUs: index -> (PCI address, NUMA node)
SAMPLE_GPUS = {0: ("0000:18:00.0", 0), 1: ("0000:2a:00.0", 0), 2: ("0000:3a:00.0", 0), 3: ("0000:5d:00.0", 0),
               4: ("0000:9a:00.0", 1), 5: ("0000:ab:00.0", 1), 6: ("0000:ba:00.0", 1), 7: ("0000:db:00.0", 1)}


class LiveStub:
    """A host that says it is live (benchmarks measure only live nodes); it is never read."""

    live = True


def observed(sample: str = "hgx-h100-8gpu-healthy", numa_on_this_machine: bool = True):
    """(runs, topology) of a sample; with ``numa_on_this_machine`` its NUMA nodes 0 and 1 own CPUs
    0 and 1 of this machine, so the worker's binding really happens."""
    snap = SnapshotData.load(str(SAMPLES / f"{sample}.snap.tar.gz"))
    if numa_on_this_machine:
        files = snap.files[0]
        files["/sys/devices/system/node/node0/cpulist"] = b"0\n"
        files["/sys/devices/system/node/node1/cpulist"] = b"1\n"
    res = evaluate(ReplayHost(snap))
    return res.runs, res.topology


def fake_env(**cfg) -> dict:
    cfg.setdefault("devices", [{"bdf": bdf, "name": "NVIDIA H100 80GB HBM3", "numa": numa}
                               for _, (bdf, numa) in sorted(SAMPLE_GPUS.items())])
    cfg.setdefault("cpu_numa", {"0": 0, "1": 1})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["CCDIAG_FAKE_CUDA"] = json.dumps(cfg)
    return env


def context(runs, topology, env, budget_s: float = 60.0, **kw) -> BenchContext:
    kw.setdefault("size_bytes", 64 << 20)
    kw.setdefault("iters", 3)
    return BenchContext(host=LiveStub(), topology=topology, runs=runs, env=env,
                        deadline=time.monotonic() + budget_s, **kw)


def two_cpus() -> bool:
    return {0, 1} <= set(os.sched_getaffinity(0))
