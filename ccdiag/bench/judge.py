"""Judge each measurement against its path's expected value.

The ratio is taken against the bottleneck link's *capability* (what the node should deliver), and
also against the links as they trained (what it can deliver today): a figure that is low against
capability but normal against the trained links is explained by a link that trained down, and
:mod:`.localize` names that link. Figures with no link to hold them to (device-local memory) are
judged against the node's other GPUs of the same model.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Iterable

from ccdiag.bench.result import Measurement
from ccdiag.bench.thresholds import PEER_FAIL_BELOW, PEER_WARN_BELOW, fractions
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN

if TYPE_CHECKING:
    from ccdiag.inputs.policy import Policy

#: a figure above this fraction of its path's capability cannot have crossed that path
ABOVE_CAPABILITY = 1.05


def judge(m: Measurement, policy: Policy | None = None, kind: str | None = None) -> Measurement:
    """Fill ``ratio``, ``ratio_current``, ``status``, ``typical`` from ``m.expected``; ``kind`` names
    other thresholds than the path's own (each direction of a bidirectional NVLink copy)."""
    e = m.expected
    value = m.value
    if value is None:
        m.status = UNKNOWN
        return m
    compute = m.tflops is not None or bool(m.samples_tflops)
    cap = (e.tflops if compute else e.gbyte_s) if e is not None else None
    if e is None or not cap:
        m.status = UNKNOWN
        m.note = m.note or "no expected value: the topology does not know this path's links"
        return m
    th = fractions(kind or e.kind, policy)
    m.ratio = value / cap
    unit = "TFLOPS" if compute else "GB/s"
    if m.ratio > ABOVE_CAPABILITY:
        # faster than the path's slowest link can carry: the topology does not describe the path this
        # figure crossed (another node's snapshot, NVLinks NVML did not report): never a pass
        m.status = UNKNOWN
        m.note = ((m.note + "; ") if m.note else "") + (
            f"{m.ratio:.0%} of the expected {cap:.1f} {unit}: faster than the path's bottleneck "
            f"({e.bottleneck or 'unknown link'}) can carry, so the topology does not describe this path")
        return m
    m.ratio_current = value / e.current_gbyte_s if e.current_gbyte_s and not compute else None
    m.status = th.status(m.ratio)
    m.typical = th.typical_desc()
    m.threshold_source = th.source
    m.extra.setdefault("typical_low", th.typical_low)
    m.extra.setdefault("warn_below", th.warn_below)
    m.extra.setdefault("fail_below", th.fail_below)
    return m


def judge_against_peers(ms: Iterable[Measurement], group_of: dict[str, str] | None = None) -> list[Measurement]:
    """Judge figures with no link behind them (device-local copies) against the median of the
    measurements in the same group (GPUs of one model); a single GPU cannot be judged so."""
    ms = [m for m in ms if m.gbyte_s is not None]
    groups: dict[str, list[Measurement]] = {}
    for m in ms:
        groups.setdefault((group_of or {}).get(m.src, ""), []).append(m)
    for members in groups.values():
        if len(members) < 2:
            for m in members:
                m.status = UNKNOWN  # nothing to hold a lone GPU's local copies to: not a pass
                m.note = m.note or "one GPU of its model: no peer to compare with"
            continue
        med = statistics.median(m.gbyte_s for m in members if m.gbyte_s is not None)  # all are, see above
        for m in members:
            m.ratio = m.gbyte_s / med if med > 0 and m.gbyte_s is not None else None
            m.status = (UNKNOWN if m.ratio is None else FAIL if m.ratio < PEER_FAIL_BELOW
                        else WARN if m.ratio < PEER_WARN_BELOW else PASS)
            m.typical = f">= {PEER_WARN_BELOW:.0%} of the peers' median"
            m.threshold_source = f"median of {len(members)} GPUs of the same model on this node ({med:.1f} GB/s)"
    return ms
