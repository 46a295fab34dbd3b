"""Findings about the probes themselves: a probe that hung or crashed is a result, never a silent gap.

A probe that timed out usually means a wedged driver or device (a hung NVML call, a read of a dead
PCI function), so it is reported as ``unknown`` naming the probe and its deadline: the checks that
needed it could not judge, which must never read as pass. A probe whose subsystem is simply absent
(``unavailable``: no InfiniBand, no driver) is a fact the other checks interpret, not a fault here.
"""

from __future__ import annotations

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import probe_timeout_remedy
from ccdiag.core.findings import PASS, UNKNOWN, Component, Evidence, Finding
from ccdiag.probes.registry import FAILED, NOT_RECORDED_PREFIX, TIMEOUT, probe_what

def _component(name: str) -> Component:
    return Component("probe", name, device=name)


def _samples(ctx: CheckContext):
    """(label, runs) for the first sample and, with a window, the second."""
    yield "", ctx.runs
    if ctx.later:
        yield f" (second sample, after {ctx.window_s:g}s)", ctx.later


@check("probe.timeout")
def check_timeouts(ctx: CheckContext) -> list[Finding]:
    """Every probe finished within its deadline."""
    out = []
    for label, runs in _samples(ctx):
        for name, run in runs.items():
            if run.status != TIMEOUT:
                continue
            remedy = probe_timeout_remedy(name)
            out.append(Finding("probe.timeout", UNKNOWN, _component(name),
                               f"Probe {name} ({probe_what(name)}) timed out{label}; checks that need it "
                               "are not judged.",
                               evidence=(Evidence("status", run.status, "ccdiag probe runner"),
                                         Evidence("duration s", round(run.duration_s, 3), "ccdiag probe runner"),
                                         Evidence("error", run.error, "ccdiag probe runner")),
                               remedy=remedy))
    if not out:
        out.append(Finding("probe.timeout", PASS, Component("node", "node"),
                           f"All {len(ctx.runs)} probe(s) finished within their deadlines.",
                           evidence=(Evidence("probes", sorted(ctx.runs), "ccdiag probe runner"),)))
    return out


@check("probe.failed")
def check_failures(ctx: CheckContext) -> list[Finding]:
    """No probe raised an unexpected error."""
    out = []
    for label, runs in _samples(ctx):
        for name, run in runs.items():
            if run.status != FAILED:
                continue
            unrecorded = (run.error or "").startswith(NOT_RECORDED_PREFIX)
            out.append(Finding("probe.failed", UNKNOWN, _component(name),
                               f"Probe {name} ({probe_what(name)}) "
                               + (f"not judged{label}: {run.error}" if unrecorded else f"failed{label}: {run.error}"),
                               evidence=(Evidence("status", run.status, "ccdiag probe runner"),
                                         Evidence("error", run.error, "ccdiag probe runner")),
                               remedy=("What was read holds nothing this probe reads: run `ccdiag check` on the node, "
                                       "or judge a `ccdiag snapshot` taken there." if unrecorded else
                                       "This host differs from what the probe expects or ccdiag has a bug: attach "
                                       "`ccdiag snapshot` output to a bug report.")))
    if not out:
        out.append(Finding("probe.failed", PASS, Component("node", "node"),
                           f"No probe failed ({len(ctx.runs)} run).",
                           evidence=(Evidence("statuses", {n: r.status for n, r in sorted(ctx.runs.items())},
                                              "ccdiag probe runner"),)))
    return out
