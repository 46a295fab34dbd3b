"""The CuPy copy benchmarks: ``h2d``, ``d2h`` (with bidirectional and remote-NUMA figures),
``p2p`` (every ordered GPU pair: write, read, bidirectional, small-copy latency) and ``d2d``
(device-local copies, the memory sanity line).

All requested CuPy benchmarks are measured by one child process (:mod:`.engine`); this
module turns its lines into judged :class:`~ccdiag.bench.result.Measurement` s, each with the
expected value of its path from the topology (:mod:`.expected`), and into findings
(:mod:`.localize`, and the NUMA placement finding below).
"""

from __future__ import annotations

import statistics
from typing import Any

from ccdiag.bench import expected as exp
from ccdiag.bench import gpu_self
from ccdiag.bench.judge import judge, judge_against_peers
from ccdiag.bench.localize import localize
from ccdiag.bench.cupy_dist import install_hint, installed, why_unusable
from ccdiag.bench.registry import Benchmark, BenchContext, module_missing, register
from ccdiag.bench.result import ERROR, PARTIAL, RAN, TIMEOUT, BenchResult, Measurement
from ccdiag.core.findings import PASS, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.probenames import PROBE_NVML

ENGINE = gpu_self.ENGINE
#: a GPU that copies this much faster from a remote NUMA node than from its own has its NUMA
#: affinity misreported (or its memory misplaced)
REMOTE_FASTER_BY = 1.15


class CudaCopy(Benchmark):
    engine = "cuda"
    needs = ("live node", "NVIDIA GPU", "CuPy")

    def __init__(self, name: str, what: str, min_gpus: int = 1, budget_s: float = 60.0, quick_budget_s: float = 5.0):
        self.name, self.what, self.min_gpus = name, what, min_gpus
        self.budget_s, self.quick_budget_s = budget_s, quick_budget_s

    def applicable(self, ctx: BenchContext) -> str | None:
        why = ctx.why_no_gpus()
        if why:
            return why
        driver = _driver_version(ctx)
        why = module_missing("cupy", install_hint(driver), ctx.env) or why_unusable(installed(_search_path(ctx.env)), driver)
        if why:
            return why
        if len(ctx.usable_gpus()) < self.min_gpus:
            return f"needs {self.min_gpus} usable GPUs, this node has {len(ctx.usable_gpus())}"
        return None


def _driver_version(ctx: BenchContext) -> str | None:
    nvml = (ctx.runs or {}).get(PROBE_NVML)
    return getattr(getattr(nvml, "data", None), "driver_version", None)


def _search_path(env: dict | None) -> list[str]:
    """Where the engine's child will look for packages: its PYTHONPATH first, then this interpreter's path."""
    import os
    import sys

    extra = [p for p in ((env or {}).get("PYTHONPATH") or "").split(os.pathsep) if p]
    return extra + [p for p in sys.path if p]


H2D = register(CudaCopy("h2d", "host->device copy per GPU (pinned, own and remote NUMA node, copy engine)"))
D2H = register(CudaCopy("d2h", "device->host copy per GPU (pinned, own NUMA node; both directions at once with h2d)"))
P2P = register(CudaCopy("p2p", "GPU peer-to-peer matrix: write, read, bidirectional, latency (copy engine)",
                        min_gpus=2, budget_s=120.0, quick_budget_s=8.0))
D2D = register(CudaCopy("d2d", "device-local copy per GPU (memory sanity line, judged against the node's peers)"))
# one GPU's own memory and compute, measured by the same worker and judged by :mod:`.gpu_self`
HBM = register(CudaCopy("hbm", "device memory per GPU (1 GiB device copy, reads + writes) against the board's "
                               "published HBM bandwidth", budget_s=20.0, quick_budget_s=3.0))
GEMM = register(CudaCopy("gemm", "dense FP16 GEMM per GPU for a few seconds against the SKU's published dense "
                                 "tensor peak", budget_s=30.0, quick_budget_s=4.0))


#: the benchmarks of one GPU's own memory and compute (:mod:`.gpu_self`), measured by the same engine
SELF_BENCHES = ("hbm", "gemm")


def worker_request(names: list[str], ctx: BenchContext) -> dict:
    topo = ctx.require_topology(", ".join(names))
    gpus = [{"label": g.label, "bdf": g.bdf, "index": g.index, "numa": g.numa} for g in ctx.usable_gpus()]
    req = {"tasks": names, "gpus": gpus, "numa_cpus": {str(k): v for k, v in dict(topo.numa_cpus).items() if v},
           "size_bytes": ctx.size(), "iters": ctx.rounds()}
    if ctx.quick:
        # a prolog's share: one direction per pair, no latency, no remote node, a short GEMM
        req.update(p2p_modes=["write"], remote=False, bidir=False, warmup=1, reps=2, hbm_size_bytes=256 << 20,
                   gemm_seconds=0.5)
    return req


def _measurement(line: dict, ctx: BenchContext) -> Measurement:
    if line.get("bench") in SELF_BENCHES:
        return gpu_self.measurement(line, ctx)
    samples = tuple(float(x) for x in line.get("samples_gbyte_s") or () if isinstance(x, (int, float)) and x > 0)
    m = Measurement(bench=str(line.get("bench")), src=str(line.get("src")), dst=str(line.get("dst")),
                    op=str(line.get("op") or "copy"), direction=str(line.get("direction") or "uni"), engine=ENGINE,
                    gbyte_s=statistics.median(samples) if samples else None, samples_gbyte_s=samples,
                    size_bytes=line.get("size_bytes"), note=line.get("note"))
    topo = ctx.topology
    if line.get("remote"):
        m.extra["remote_numa"] = True
    if m.bench in ("h2d", "d2h"):
        gpu = m.dst if m.bench == "h2d" else m.src
        m.expected = exp.host_device(topo, gpu, bidir=m.direction == "bidir")
    elif m.bench == "p2p":
        if line.get("peer_access") is False:
            m.expected = exp.staged(topo, m.src, m.dst)
            m.extra["peer_access"] = False
        else:
            m.expected = exp.peer(topo, m.src, m.dst)
    if m.bench != "d2d":
        judge(m, ctx.policy)
    if m.gbyte_s is None:
        m.error = "no timed round completed"
    return m


def results_from_run(names: list[str], ctx: BenchContext, run: Any, budget_s: float) -> dict[str, BenchResult]:
    """Split one worker run into a judged result per benchmark."""
    results = {n: BenchResult(n, RAN, budget_s=budget_s, duration_s=run.duration_s,
                              params={"size_bytes": ctx.size(), "iters": ctx.rounds(), "quick": ctx.quick},
                              engine={"name": ENGINE, **{k: v for k, v in run.info.items() if k != "type"}})
               for n in names}
    latency: dict[tuple[str, str], float] = {}
    for line in run.lines:
        bench = line.get("bench")
        if bench not in results:
            continue
        if line.get("type") == "latency":
            if isinstance(line.get("latency_us"), (int, float)):
                latency[(line.get("src"), line.get("dst"))] = float(line["latency_us"])
            continue
        if line.get("type") == "error":
            results[bench].measurements.append(Measurement(bench, str(line.get("src")), str(line.get("dst")),
                                                           engine=ENGINE, error=str(line.get("error")),
                                                           status=UNKNOWN))
            continue
        results[bench].measurements.append(_measurement(line, ctx))
    for (src, dst), lat in latency.items():
        for m in results.get("p2p", BenchResult("p2p", RAN)).measurements:
            if m.src == src and m.dst == dst and m.op == "write" and m.direction == "uni":
                m.latency_us = lat
    unmapped = run.info.get("unmapped") or []
    for name, res in results.items():
        ms = res.measurements
        if name == "d2d":
            models = {g.label: g.name or "" for g in ctx.require_topology(name).gpus()}
            judge_against_peers(ms, models)
        local = [m for m in ms if not m.extra.get("remote_numa") and m.error is None]
        if name in SELF_BENCHES:
            res.findings = gpu_self.findings(name, local, ctx.topology)
        else:
            res.findings = localize(name, local, ctx.topology)
        if name == "h2d":
            res.findings += numa_findings(ms)
        res.findings += _error_findings(name, ms)
        if unmapped:
            res.findings.append(Finding(f"bench.{name}.unmapped", UNKNOWN, Component("node", name),
                                        f"CUDA does not show {', '.join(unmapped)} (not measured)",
                                        remedy="Check CUDA_VISIBLE_DEVICES and `nvidia-smi -L`; a GPU NVML sees "
                                               "but CUDA does not may be in a bad state (reset it)."))
        _outcome(res, run, bool(unmapped))
    return results


def _outcome(res: BenchResult, run: Any, unmapped: bool) -> None:
    ok = [m for m in res.measurements if m.value is not None]
    errors = [m for m in res.measurements if m.error]
    if run.fatal and not ok:
        res.outcome, res.reason = ERROR, run.fatal
    elif run.timed_out or run.budget_ran_out:
        res.outcome = TIMEOUT
        res.reason = (f"the budget of {res.budget_s:.0f} s ran out after {len(ok)} measurement(s)"
                      + ("; the engine was stopped while a copy had not completed" if run.timed_out else ""))
        res.findings.append(Finding(
            f"bench.{res.name}.budget", UNKNOWN, Component("node", res.name), res.reason,
            evidence=(Evidence("measurements completed", len(ok), "ccdiag bench"),),
            remedy=("Give the benchmark more time (--budget) or smaller copies (--size); if a copy never "
                    "completes, the GPU may be hung: run `ccdiag check` and look for XIDs.")))
    elif errors or unmapped:
        res.outcome = PARTIAL
        res.reason = f"{len(errors)} measurement(s) failed" if errors else "some GPUs are not visible to CUDA"
    elif not ok:
        res.outcome, res.reason = ERROR, run.fatal or "the engine measured nothing" + (
            f" ({run.stderr_tail})" if run.stderr_tail else "")


def _error_findings(name: str, ms: list[Measurement]) -> list[Finding]:
    out = []
    for m in ms:
        if not m.error:
            continue
        oom = "memory" in m.error.lower() and ("out of" in m.error.lower() or "alloc" in m.error.lower())
        comp = (Component("gpu_pair", f"{m.src}-{m.dst}", peer=m.dst) if m.src.startswith("GPU") and m.dst.startswith("GPU")
                and m.src != m.dst else Component("gpu", m.dst if m.dst.startswith("GPU") else m.src))
        out.append(Finding(
            f"bench.{name}.error", UNKNOWN, comp, f"{m.label}: could not measure: {m.error}",
            remedy=("Not enough free GPU memory for the copy buffers: run with a smaller --size, or when the "
                    "GPU is idle." if oom else "Re-run; if it persists, run `ccdiag check` on this node.")))
    return out


def numa_findings(ms: list[Measurement]) -> list[Finding]:
    """Host->device from the GPU's own NUMA node against a remote one: a remote penalty is placement
    advice; a GPU faster from the remote node has its NUMA affinity misreported."""
    local = {m.dst: m for m in ms if m.op == "h2d" and m.direction == "uni" and not m.extra.get("remote_numa")
             and m.gbyte_s}
    remote = {m.dst: m for m in ms if m.op == "h2d" and m.extra.get("remote_numa") and m.gbyte_s}
    out: list[Finding] = []
    penalties = []
    for gpu, r in sorted(remote.items()):
        l = local.get(gpu)
        if l is None or r.gbyte_s is None or l.gbyte_s is None:
            continue  # both figures are there: the two maps keep measured copies only
        if r.gbyte_s > l.gbyte_s * REMOTE_FASTER_BY:
            out.append(Finding(
                "bench.h2d.numa", WARN, Component("gpu", gpu),
                f"{gpu} copies faster from {r.src} ({r.gbyte_s:.1f} GB/s) than from its own {l.src} "
                f"({l.gbyte_s:.1f} GB/s): the NUMA node reported for it is wrong, or host memory was misplaced",
                evidence=(Evidence(f"h2d from {l.src}", f"{l.gbyte_s:.1f} GB/s", ENGINE),
                          Evidence(f"h2d from {r.src}", f"{r.gbyte_s:.1f} GB/s", ENGINE)),
                remedy=(f"Check /sys/bus/pci/devices/<{gpu} BDF>/numa_node against the board's wiring and the "
                        "BIOS NUMA settings (NPS, SNC); pin each rank's host buffers to the faster node.")))
        else:
            penalties.append((gpu, l, r, 1.0 - r.gbyte_s / l.gbyte_s))
    if penalties:
        worst = max(penalties, key=lambda p: p[3])
        out.append(Finding(
            "bench.h2d.numa", PASS, Component("node", "NUMA placement"),
            f"host memory on a remote NUMA node costs up to {worst[3]:.0%} of host->device bandwidth "
            f"({worst[0]}: {worst[1].gbyte_s:.1f} GB/s local, {worst[2].gbyte_s:.1f} GB/s from {worst[2].src})",
            evidence=tuple(Evidence(f"{g} remote penalty", f"{p:.0%}", ENGINE) for g, _, _, p in penalties[:8]),
            remedy=("Place each rank's host buffers on its GPU's NUMA node (`numactl --cpunodebind=N --membind=N`, "
                    "or Slurm `--cpu-bind`/`--gpu-bind=closest`).") if worst[3] > 0.1 else None))
    return out


def run_group(names: list[str], ctx: BenchContext, budget_s: float) -> dict[str, BenchResult]:
    """Measure every CuPy benchmark in ``names`` in one child process."""
    from ccdiag.bench.engine import run_worker

    def on_line(msg: dict) -> None:
        if msg.get("type") == "measure":
            arrow = "<->" if msg.get("direction") == "bidir" else "->"
            ctx.tick(str(msg.get("bench")), f"{msg.get('src')}{arrow}{msg.get('dst')}")

    run = run_worker(worker_request(names, ctx), budget_s, on_line=on_line, env=ctx.env)
    return results_from_run(names, ctx, run, budget_s)
