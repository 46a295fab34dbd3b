"""Several imported files compared with each other: the same figure from several nodes.

Why: a fleet's outputs (one ``bandwidthTest`` or ``nccl-tests`` log per node) can be judged together
even where no file can be judged alone: the node whose figure is far below the others' is the one
to look at, whatever the catalogue knows. Each file gives one value per kind of figure (the median
of its measurements of that kind); a file below the median of all files by the peer rule's fraction
is named.
"""

from __future__ import annotations

import statistics
from typing import Any

from ccdiag.bench.result import RAN, BenchResult, Measurement
from ccdiag.bench.thresholds import PEER_FAIL_BELOW
from ccdiag.core.findings import FAIL, PASS, WARN, Component, Evidence, Finding

#: a file below this fraction of the files' median fails (between it and PEER_FAIL_BELOW: warns)
FILE_FAIL_BELOW = 0.5


def _kind(m: Measurement) -> tuple[str, ...]:
    """What makes two files' figures comparable: the tool, the benchmark, the operation, the direction,
    and whether the figure is a peer pair, a host copy or a device-local one."""
    shape = "pair" if m.src.startswith("GPU") and m.dst.startswith("GPU") and m.src != m.dst else \
        "local" if m.src == m.dst else "host"
    return (m.engine.split(" ")[0], m.bench, m.op, m.direction, shape)


def _per_file(res: BenchResult) -> dict[tuple[str, ...], float]:
    groups: dict[tuple[str, ...], list[float]] = {}
    for m in res.measurements:
        if m.gbyte_s is not None and not m.extra.get("p2p_disabled"):
            groups.setdefault(_kind(m), []).append(float(m.gbyte_s))
    return {k: statistics.median(v) for k, v in groups.items()}


def compare(results: list[BenchResult]) -> BenchResult | None:
    """One result holding the findings of comparing the files, or None when fewer than two files share
    a kind of figure."""
    files = [(str(r.params.get("file")), _per_file(r)) for r in results if r.name.startswith("import:")]
    kinds = sorted({k for _, per in files for k in per})
    findings: list[Finding] = []
    for kind in kinds:
        values = [(f, per[kind]) for f, per in files if kind in per]
        if len(values) < 2:
            continue
        ref = statistics.median(v for _, v in values)
        if ref <= 0:
            continue
        what = f"{kind[0].replace('import:', '')} {kind[1]} {kind[2]} {kind[3]} ({kind[4]})"
        slow = [(f, v) for f, v in values if v < PEER_FAIL_BELOW * ref]
        if not slow:
            lo = min(v for _, v in values) / ref
            findings.append(Finding(
                "bench.import.files", PASS, Component("node", what),
                f"{len(values)} files agree on {what}: {lo:.0%}-{max(v for _, v in values) / ref:.0%} of their median "
                f"{ref:.1f} GB/s", evidence=tuple(Evidence(f, f"{v:.2f} GB/s", "bench import") for f, v in values[:8])))
            continue
        for f, v in slow:
            findings.append(Finding(
                "bench.import.file_outlier", FAIL if v < FILE_FAIL_BELOW * ref else WARN, Component("node", f),
                f"{f}: {what} {v:.1f} GB/s is {v / ref:.0%} of the median of the {len(values)} files ({ref:.1f} GB/s)",
                evidence=tuple(Evidence(g, f"{x:.2f} GB/s", "bench import") for g, x in sorted(values, key=lambda t: t[1]))[:8],
                expected=f">= {PEER_FAIL_BELOW:.0%} of the files' median", expected_source="the other files of this import",
                remedy=("The node this file came from is the one to look at: run `ccdiag check` there (link widths, "
                        "NUMA binding, XIDs, error counters) and compare its `nvidia-smi topo -m` with a fast node's.")))
    if not findings:
        return None
    res = BenchResult("import:compare", RAN, params={"files": [f for f, _ in files]})
    res.findings = findings
    return res


def attach(results: list[Any]) -> list[Any]:
    """``results`` and, when several files share a kind of figure, the comparison of them."""
    cmp = compare(results) if len(results) > 1 else None
    return results + [cmp] if cmp is not None else results
