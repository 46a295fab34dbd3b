"""Benchmarks registered by stable name, each saying what it needs and why it cannot run here.

A name, once released, is never renamed: scripts, policies and dashboards key on it (and on the
``bench.<name>`` finding ids). ``applicable`` returns ``None`` or the plain reason a benchmark
cannot run on this node (no GPU, no CuPy, a replayed snapshot, no RDMA port, no ``ib_write_bw``),
which ``ccdiag bench`` prints as a skip, never as a traceback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ccdiag.bench.result import BenchResult
    from ccdiag.host.door import Host
    from ccdiag.inputs.policy import Policy
    from ccdiag.topology.model import Topology

from ccdiag.core.probenames import PROBE_NVML

#: default bytes per copy and timed rounds; quick mode (``check --bench quick``) uses the second pair
DEFAULT_SIZE_BYTES = 256 << 20
DEFAULT_ITERS = 5
QUICK_SIZE_BYTES = 32 << 20
QUICK_ITERS = 3


@dataclass
class BenchContext:
    """What a benchmark runs with: the host door, the topology (expected values), the probes'
    observations, the policy (thresholds), sizes, and one absolute deadline."""

    host: Host
    topology: Topology | None
    runs: dict
    policy: Policy | None = None
    size_bytes: int | None = None
    iters: int | None = None
    quick: bool = False
    deadline: float = field(default_factory=lambda: time.monotonic() + 120.0)
    progress: Callable[[str, str], None] | None = None  # (benchmark, what was just measured)
    env: dict | None = None  # the environment of engine child processes (tests point them at fakes)

    @property
    def live(self) -> bool:
        return bool(getattr(self.host, "live", False))

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def size(self) -> int:
        return int(self.size_bytes or (QUICK_SIZE_BYTES if self.quick else DEFAULT_SIZE_BYTES))

    def rounds(self) -> int:
        return int(self.iters or (QUICK_ITERS if self.quick else DEFAULT_ITERS))

    def tick(self, bench: str, what: str) -> None:
        if self.progress is not None:
            self.progress(bench, what)

    def require_topology(self, bench: str) -> Topology:
        """The topology, for a benchmark whose ``applicable()`` has already made sure there is one
        (it skips the benchmark otherwise); a caller that did not ask first gets an error naming it."""
        if self.topology is None:
            raise ValueError(f"benchmark {bench!r} needs this node's topology to judge against, and there is "
                             "none (its applicable() says so before it is run)")
        return self.topology

    # -- shared applicability -----------------------------------------------------------------
    def usable_gpus(self) -> list[Any]:
        if self.topology is None:
            return []
        return [g for g in self.topology.gpus() if not g.failed]

    def why_no_gpus(self) -> str | None:
        if not self.live:
            return ("a replayed snapshot cannot be measured: run `ccdiag bench` on the node itself, or judge "
                    "figures you already have with `ccdiag bench import`")
        if self.topology is None or not self.topology.gpus():
            nvml = self.runs.get(PROBE_NVML) if self.runs else None
            err = getattr(nvml, "error", None)
            return "no NVIDIA GPU in this node's topology" + (f" (NVML: {err})" if err else "")
        if not self.usable_gpus():
            return "every GPU is lost or hung: " + ", ".join(f"{g.label} {g.failed}" for g in self.topology.gpus())
        return None


def module_missing(name: str, install: str, env: dict | None = None) -> str | None:
    """The reason an optional module cannot be used, found without importing it. ``env``: the
    environment engine child processes get; its PYTHONPATH is searched first, as the child will."""
    import importlib.machinery
    import importlib.util
    import os

    try:
        extra = [p for p in ((env or {}).get("PYTHONPATH") or "").split(os.pathsep) if p]
        found = (bool(extra) and importlib.machinery.PathFinder.find_spec(name, extra) is not None) \
            or importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{name} is not installed ({install})"


class Benchmark:
    """A registered benchmark. ``engine`` groups benchmarks that one engine run measures together
    (every CuPy benchmark shares one CUDA child process)."""

    name: str = ""
    what: str = ""
    needs: tuple[str, ...] = ()
    engine: str = ""
    budget_s: float = 60.0
    quick_budget_s: float = 5.0

    def applicable(self, ctx: BenchContext) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def run(self, ctx: BenchContext, budget_s: float) -> BenchResult:  # pragma: no cover - interface
        """Measure within ``budget_s``; engines that measure several benchmarks at once run them
        through their group runner instead."""
        raise NotImplementedError


REGISTRY: dict[str, Benchmark] = {}


def register(bench: Benchmark) -> Benchmark:
    if bench.name in REGISTRY:
        raise ValueError(f"benchmark {bench.name!r} registered twice")
    REGISTRY[bench.name] = bench
    return bench
