"""Run the chosen benchmarks within one budget and say, for each, what happened.

The budget is shared out in proportion to each benchmark's own default, and a benchmark never
starts with less than a second left. Every CuPy benchmark is measured in one engine run (one CUDA
start-up instead of four). A benchmark that is not applicable is a ``skip`` with its reason.
"""

from __future__ import annotations

import time
from typing import Iterable

from ccdiag.bench.registry import BenchContext
from ccdiag.bench.shipped import load_all
from ccdiag.bench.result import ERROR, PARTIAL, RAN, SKIP, TIMEOUT, BenchResult
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN, Finding

#: the CuPy benchmarks in the order the engine measures them (the GEMM last: it heats the GPU)
CUDA_ORDER = ("h2d", "d2h", "d2d", "p2p", "hbm", "gemm")


def resolve(names: Iterable[str]) -> list[str]:
    """Registered names in run order; raises ValueError naming an unknown one."""
    known = load_all()
    names = list(names) or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown benchmark {unknown[0]!r} (known: {', '.join(sorted(known))})")
    cuda = [n for n in CUDA_ORDER if n in names]
    return cuda + [n for n in names if n not in cuda]


def run_benchmarks(names: Iterable[str], ctx: BenchContext, budget_s: float | None = None) -> list[BenchResult]:
    known = load_all()
    order = resolve(names)
    results: dict[str, BenchResult] = {}
    runnable = []
    for n in order:
        why = known[n].applicable(ctx)
        if why:
            results[n] = BenchResult(n, SKIP, reason=why)
        else:
            runnable.append(n)
    start = time.monotonic()
    total = ctx.left() if budget_s is None else min(float(budget_s), ctx.left())
    own = {n: (known[n].quick_budget_s if ctx.quick else known[n].budget_s) for n in runnable}
    scale = min(1.0, total / sum(own.values())) if own and sum(own.values()) > 0 else 1.0
    cuda = [n for n in runnable if known[n].engine == "cuda"]
    if cuda:
        share = sum(own[n] for n in cuda) * scale
        from ccdiag.bench.gpu_copy import run_group

        results.update(run_group(cuda, ctx, max(1.0, share)))
    for n in runnable:
        if n in cuda:
            continue
        left = total - (time.monotonic() - start)
        if left < 1.0:
            results[n] = BenchResult(n, SKIP, reason="no time left in the budget")
            continue
        t0 = time.monotonic()
        try:
            results[n] = known[n].run(ctx, min(left, own[n] * scale if scale < 1 else own[n]))
        except Exception as exc:  # noqa: BLE001 - one engine's failure is that benchmark's error
            results[n] = BenchResult(n, ERROR, reason=f"{type(exc).__name__}: {exc}")
        results[n].duration_s = results[n].duration_s or time.monotonic() - t0
    return [results[n] for n in order]


def _findings_verdict(by_findings: list[BenchResult], strict: bool) -> ExitCode:
    """Files judged by their findings alone (a pasted ``nvidia-smi -q`` or ``dcgmi diag``, which has
    no figures): OK once one finding passed or warned, unless ``strict`` meets an unknown one."""
    findings = [f for r in by_findings for f in r.findings]
    judged = [f for f in findings if f.status in (PASS, WARN)]
    if not judged or (strict and any(f.status == UNKNOWN for f in findings)):
        return ExitCode.UNEVALUATED
    return ExitCode.OK


def _figures_verdict(results: list[BenchResult], findings: list[Finding], strict: bool) -> ExitCode:
    """Benchmarks with figures: OK only when one measured, none ran out of time or failed to run,
    and a figure was judged (with ``strict``, no finding unknown)."""
    measured = [r for r in results if r.outcome in (RAN, PARTIAL, TIMEOUT) and r.measurements]
    if not measured or any(r.outcome in (TIMEOUT, ERROR) for r in results):
        return ExitCode.UNEVALUATED
    if strict and any(f.status == UNKNOWN for f in findings):
        return ExitCode.UNEVALUATED
    if not judged_count(results):
        return ExitCode.UNEVALUATED
    return ExitCode.OK


def exit_code(results: list[BenchResult], strict: bool = False) -> ExitCode:
    """1 when a finding fails (or warns with ``strict``); 3 when nothing could be measured, nothing
    measured could be judged (no figure held to an expected value or to its peers: never OK with
    nothing judged), or a benchmark ran out of time with nothing failed; else 0."""
    findings = [f for r in results for f in r.findings]
    if any(f.status == FAIL for f in findings) or (strict and any(f.status == WARN for f in findings)):
        return ExitCode.FAIL
    # a pasted nvidia-smi -q or dcgmi diag is judged by its findings alone (it has no figures)
    by_findings = [r for r in results if r.params.get("judged_by_findings")]
    with_figures = [r for r in results if not r.params.get("judged_by_findings")]
    if by_findings and not with_figures:
        return _findings_verdict(by_findings, strict)
    return _figures_verdict(with_figures, findings, strict)


def judged_count(results: list[BenchResult]) -> int:
    """Figures that got a verdict (pass, warn or fail), from their path or their peers."""
    return sum(1 for r in results for m in r.measurements if m.status in (PASS, WARN, FAIL))
