"""What a benchmark hands back: every measured value, its expectation, the ratio and the findings.

A number alone says nothing to an operator ("is 41 GB/s normal?"). So each :class:`Measurement`
carries the path it crossed, the expected value of that path with where it came from (the
bottleneck link as capable and as trained now, from the topology), the ratio and the status. The
:class:`BenchResult` of one benchmark also says plainly when it did not run and why (``skip``), or
ran out of its budget (``timeout``, with whatever it measured before).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ccdiag.core.findings import Finding
from ccdiag.core.readings import to_jsonable

#: outcomes of one benchmark
RAN = "ran"  # every planned measurement was made
PARTIAL = "partial"  # some were made, some failed (out of memory on one GPU, ...)
SKIP = "skip"  # not applicable here: the reason says why (no GPU, no CuPy, no RDMA device)
TIMEOUT = "timeout"  # the budget ran out; what was measured before is kept
ERROR = "error"  # the engine failed as a whole (its message says how)
OUTCOMES = (RAN, PARTIAL, SKIP, TIMEOUT, ERROR)


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


@dataclass(frozen=True)
class Expected:
    """The expected bandwidth of one path, GB/s of payload per direction.

    ``gbyte_s``: the bottleneck link's capability; ``current_gbyte_s``: the bottleneck as the links
    trained now (lower when a link runs at reduced width/speed or NVLinks are down)."""

    gbyte_s: float | None
    current_gbyte_s: float | None = None
    bottleneck: str | None = None
    current_bottleneck: str | None = None
    bottleneck_desc: str | None = None  # "Gen5 x16", "18 x NVLink4"
    current_desc: str | None = None
    level: str | None = None  # NV18, PIX, SYS, H2D ...
    kind: str = "pcie"  # threshold kind (see thresholds.DEFAULTS)
    source: str = "topology"
    links: tuple[str, ...] = ()
    tflops: float | None = None  # a compute figure's expectation (dense GEMM), instead of gbyte_s

    @property
    def degraded(self) -> bool:
        return (self.gbyte_s is not None and self.current_gbyte_s is not None
                and self.current_gbyte_s + 1e-9 < self.gbyte_s)

    def to_json(self) -> dict:
        doc = {"gbyte_s": _r(self.gbyte_s), "current_gbyte_s": _r(self.current_gbyte_s),
               "bottleneck": self.bottleneck, "current_bottleneck": self.current_bottleneck,
               "bottleneck_desc": self.bottleneck_desc, "current_desc": self.current_desc,
               "level": self.level, "kind": self.kind, "source": self.source, "links": list(self.links),
               "degraded": self.degraded}
        if self.tflops is not None:
            doc["tflops"] = _r(self.tflops)
        return doc


@dataclass
class Measurement:
    """One measured figure: ``gbyte_s`` is the median of the timed samples (GB/s = 10^9 B/s); a
    compute figure (dense GEMM) has ``tflops`` and ``samples_tflops`` instead."""

    bench: str  # registered name: "h2d", "p2p", ...
    src: str  # "host:numa0", "GPU3", "mlx5_0"
    dst: str
    op: str = "copy"  # copy | read | write | rdma_write | allreduce
    direction: str = "uni"  # uni | bidir
    engine: str = ""  # "cupy-ce", "perftest", "pyverbs", "import:nvbandwidth"
    gbyte_s: float | None = None
    samples_gbyte_s: tuple[float, ...] = ()
    size_bytes: int | None = None
    latency_us: float | None = None
    note: str | None = None  # "staged through host memory: the pair has no peer access"
    error: str | None = None  # why this one measurement could not be made
    expected: Expected | None = None
    ratio: float | None = None  # gbyte_s / expected capability
    ratio_current: float | None = None  # gbyte_s / expected as trained
    status: str = "unknown"
    typical: str | None = None  # "83%-88%"
    threshold_source: str | None = None
    extra: dict = field(default_factory=dict)
    tflops: float | None = None  # 10^12 floating-point operations per second (a GEMM's 2*m*n*k)
    samples_tflops: tuple[float, ...] = ()

    @property
    def value(self) -> float | None:
        """The figure judged: TFLOPS for a compute figure, else GB/s."""
        return self.tflops if self.tflops is not None or self.samples_tflops else self.gbyte_s

    @property
    def label(self) -> str:
        arrow = "<->" if self.direction == "bidir" else "->"
        return f"{self.src}{arrow}{self.dst}"

    @property
    def spread(self) -> float | None:
        """(max - min) / median of the samples: how steady the figure was."""
        s = self.samples_tflops or self.samples_gbyte_s
        if len(s) < 2:
            return None
        med = statistics.median(s)
        return None if med <= 0 else (max(s) - min(s)) / med

    def to_json(self) -> dict:
        return {"bench": self.bench, "src": self.src, "dst": self.dst, "op": self.op,
                "direction": self.direction, "engine": self.engine, "gbyte_s": _r(self.gbyte_s),
                "samples_gbyte_s": [_r(v) for v in self.samples_gbyte_s], "spread": _r(self.spread),
                "size_bytes": self.size_bytes, "latency_us": _r(self.latency_us), "note": self.note,
                "error": self.error, "expected": self.expected.to_json() if self.expected else None,
                "ratio": _r(self.ratio), "ratio_current": _r(self.ratio_current), "status": self.status,
                "typical": self.typical, "threshold_source": self.threshold_source,
                "extra": dict(self.extra),
                **({"tflops": _r(self.tflops), "samples_tflops": [_r(v) for v in self.samples_tflops]}
                   if self.tflops is not None or self.samples_tflops else {})}


@dataclass
class BenchResult:
    """The outcome of one benchmark."""

    name: str
    outcome: str
    reason: str | None = None  # why it was skipped / failed / cut short
    measurements: list[Measurement] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    duration_s: float = 0.0
    budget_s: float | None = None
    params: dict = field(default_factory=dict)
    engine: dict = field(default_factory=dict)  # versions and devices the engine ran on

    def to_json(self) -> dict:
        return {"name": self.name, "outcome": self.outcome, "reason": self.reason,
                "duration_s": round(self.duration_s, 4), "budget_s": _r(self.budget_s),
                "params": dict(self.params), "engine": dict(self.engine),
                "measurements": [m.to_json() for m in self.measurements],
                "findings": [{**to_jsonable(f), "key": f.key} for f in self.findings]}
