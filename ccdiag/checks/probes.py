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


#: words of the notes that say why a file was not read whole, the reading's own first
#: (ccdiag.nvfiles.supportfile), then the report's missing closing line (ccdiag.host.bugreport)
_CUT_WORDS = ("deadline", "ends early", "corrupt", "reading stopped", "not read", "closing line", "cut")


@check("probe.record")
def check_record(ctx: CheckContext) -> list[Finding]:
    """A node read from a file (``--bug-report``) was read to the file's end; what was not read is not judged."""
    read = ctx.meta.get("bug_report")
    if not isinstance(read, dict):
        return []  # the node itself or a ccdiag snapshot: nothing to say
    name = read.get("file") or "the file"
    notes = [str(n) for n in read.get("notes") or []]
    src = "ccdiag --bug-report"
    evidence = [Evidence("file", name, src), Evidence("read as", read.get("kind"), src),
                Evidence("bytes read", read.get("bytes_read"), src)]
    sections = read.get("sections") or {}
    if sections.get("total"):
        evidence.append(Evidence("sections", f"{len(sections.get('read') or {})} read of {sections['total']}", src))
    if notes:
        evidence.append(Evidence("notes", notes, src))
    if read.get("complete", True):
        return [Finding("probe.record", PASS, Component("node", "record"),
                        f"{name} was read to its end ({read.get('kind')}).", evidence=tuple(evidence))]
    why = next((n for w in _CUT_WORDS for n in notes if w in n), "it does not end where it should")
    deadline = "deadline" in why
    return [Finding("probe.record", UNKNOWN, Component("node", "record"),
                    f"{name} was read only in part ({why}); checks needing the rest say unknown.",
                    evidence=tuple(evidence),
                    remedy=("Give check a longer --timeout (a third of it goes to reading the file)." if deadline
                            else "Collect the report again (nvidia-bug-report.sh) and copy it whole; a cut or "
                                 "garbled file holds only what came before the damage."))]
