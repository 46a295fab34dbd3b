"""Absolute judgement of the pairwise matrix: each figure against what its path can carry.

Why: the slow-host / slow-link analysis compares hosts with each other, so it cannot judge two
hosts (the median *is* the one link) nor a fabric that is slow everywhere (every NIC fell back to a
lower rate, every port shaped). Each pair's path can carry at most the smaller line rate of the two
interfaces its traffic takes (each host names its own, :mod:`ccdiag.cluster.route`; the rate is the
physical interface's speed as the kernel reports it, or ``--line-rate-gbit-s`` where the interfaces
are virtual and report none). A pair far below that is slow whatever its neighbours do.

The floors are deliberately low: MPI over TCP does not fill a fast link with one connection, so a
healthy path can measure well under its line rate; a tenth of it is below what a working path
gives, a quarter is worth a look. Pairs whose host is already named slow with every peer are that
host's finding, not a second one per link; a fabric where every pair is below is one finding.
"""

from __future__ import annotations

from typing import Mapping

from ccdiag.cluster.flowlimits import FlowLimit
from ccdiag.core.findings import FAIL, UNKNOWN, WARN, Component, Evidence, Finding

#: a pair below this fraction of its path's line rate fails; below WARN_FRACTION it warns
FAIL_FRACTION = 0.10
WARN_FRACTION = 0.25
CHECK_ID = "cluster.link_capability"


def path_capability(hosts: list[str], links: Mapping[str, Mapping[str, str]], speeds: Mapping[str, Mapping[str, int]],
                    line_rate_gbit_s: float | None = None,
                    flow_limits: Mapping[str, float | None] | None = None) -> list[list[float | None]]:
    """c[i][j]: GB/s of payload the path from host i to host j can carry (the smaller line rate of
    the interface each end uses), or None when a side's rate is unknown. ``links[h][peer]``: the
    interface h's traffic to peer takes; ``speeds[h][iface]``: Mbit/s; ``line_rate_gbit_s``: the
    rate of every interface that reports none; ``flow_limits[h]``: Gbit/s one flow from h may carry
    on its cloud (:mod:`ccdiag.cluster.flowlimits`), which lowers a known rate, never replaces an
    unknown one."""
    def rate(h: str, peer: str) -> float | None:
        iface = (links.get(h) or {}).get(peer)
        mbit = (speeds.get(h) or {}).get(iface) if iface else None
        gbit = mbit / 1000.0 if mbit else line_rate_gbit_s
        limit = (flow_limits or {}).get(h)
        return min(gbit, limit) if gbit and limit else gbit

    out: list[list[float | None]] = []
    for a in hosts:
        row: list[float | None] = []
        for b in hosts:
            ra, rb = (rate(a, b), rate(b, a)) if a != b else (None, None)
            row.append(min(ra, rb) / 8.0 if ra and rb else None)
        out.append(row)
    return out


def judge(m, cap, hosts: list[str], slow_hosts: list[str], label: str,
          cap_note: str | None = None) -> tuple[list[Finding], set]:
    """Findings for pairs below their path's capability, and the set of (a, b) index pairs named
    (so the relative analysis does not name them a second time). ``cap_note``: why some capability
    is below the line rate (a cloud's flow limit), said in each finding."""
    n = len(hosts)
    rows = []
    unknown = 0
    for a in range(n):
        for b in range(a + 1, n):
            vals = [v for v in (m[a][b], m[b][a]) if v is not None]
            caps = [c for c in (cap[a][b], cap[b][a]) if c]
            if not vals:
                continue
            if not caps:
                unknown += 1
                continue
            rows.append((a, b, min(vals), min(caps)))
    if not rows:
        return ([_unknown(n, label)] if unknown else []), set()
    bad = [(a, b, v, c) for a, b, v, c in rows if v < WARN_FRACTION * c]
    if len(bad) == len(rows) and len(rows) > 2:
        return [_fabric(bad, hosts, label, cap_note)], {(a, b) for a, b, _, _ in bad}
    out, named = [], set()
    for a, b, v, c in bad:
        if hosts[a] in slow_hosts or hosts[b] in slow_hosts:
            continue
        out.append(_pair(hosts[a], hosts[b], v, c, label, cap_note))
        named.add((a, b))
    return out, named


def _pair(a: str, b: str, v: float, c: float, label: str, cap_note: str | None = None) -> Finding:
    status = FAIL if v < FAIL_FRACTION * c else WARN
    what = "its path's line rate" if not cap_note else "what its path carries"
    return Finding(
        check=CHECK_ID, status=status,
        component=Component(kind="host_link", name=f"{a} <-> {b} ({label})", device=label, peer=b),
        summary=(f"link {a} <-> {b} over {label}: {v * 8:.3g} Gbit/s = {v / c:.0%} of {what} "
                 f"{c * 8:.3g} Gbit/s"),
        evidence=(Evidence("slower direction", round(v, 6), "ccdiag pairs (GB/s)"),
                  Evidence("path line rate", round(c, 6), "the smaller interface speed of the two hosts (GB/s)"
                           + (f", bounded by the {cap_note}" if cap_note else ""))),
        expected=f">= {(FAIL_FRACTION if status == FAIL else WARN_FRACTION):.0%} of {c * 8:.3g} Gbit/s",
        expected_source="interface speeds of both hosts" + (f" and the {cap_note}" if cap_note else ""),
        remedy=(f"check the path between {a} and {b} on {label}: each end's negotiated speed and errors "
                f"(`ethtool`, `ibstat`), the cable or transceiver, the switch ports, traffic shaping or policing"),
        details={"a": a, "b": b, "gbyte_s": v, "capability_gbyte_s": c, "fraction": v / c, "iface": label})


def _fabric(bad: list, hosts: list[str], label: str, cap_note: str | None = None) -> Finding:
    worst = min(bad, key=lambda r: r[2] / r[3])
    best = max(bad, key=lambda r: r[2] / r[3])
    status = FAIL if best[2] < FAIL_FRACTION * best[3] else WARN
    return Finding(
        check=CHECK_ID, status=status, component=Component(kind="node", name="all hosts", device=label),
        summary=(f"every pair of {len(hosts)} hosts over {label} runs below its path's line rate: "
                 f"{worst[2] / worst[3]:.0%} to {best[2] / best[3]:.0%} of it"),
        evidence=(Evidence("pairs below", len(bad), "ccdiag pairs"),),
        expected=f">= {WARN_FRACTION:.0%} of each path's line rate",
        expected_source="interface speeds" + (f" and the {cap_note}" if cap_note else ""),
        remedy="the whole fabric is slow, not one link: the switch (or its uplinks), a shaping policy, or "
               "MPI using a slower network than the one measured by speed (check MPI's transport selection)",
        details={"pairs_below": [(hosts[a], hosts[b]) for a, b, _, _ in bad]})


def _unknown(n: int, label: str) -> Finding:
    return Finding(
        check=CHECK_ID, status=UNKNOWN, component=Component(kind="node", name="all hosts", device=label),
        summary=(f"the line rate of the path between the {n} hosts over {label} is not known (virtual "
                 f"interfaces report none, or MPI's transport is not an IP interface): figures were only "
                 f"compared with each other"),
        remedy="give the line rate with --line-rate-gbit-s to hold every pair to it")


def judge_hops(rows: list[dict], speeds_by_rank: Mapping[int, Mapping[str, int]],
               line_rate_gbit_s: float | None = None,
               limits_by_rank: Mapping[int, FlowLimit | None] | None = None) -> list[Finding]:
    """The ring's hops between hosts held to their sender's line rate (the interface the hop leaves
    by; ``line_rate_gbit_s`` where it reports none), bounded by the sender's cloud flow limit
    (``limits_by_rank``). Hops already failed by the ring's own median (``relative_fail``) are not
    named twice. Two hosts, whose ring median is their one link, are judged this way only."""
    out = []
    for r in rows:
        if r["src_host"] == r["dst_host"] or r.get("relative_fail"):
            continue
        mbit = (speeds_by_rank.get(r["src_rank"]) or {}).get(r["iface"])
        cap_gbit = mbit / 1000.0 if mbit else line_rate_gbit_s
        if not cap_gbit:
            continue
        limit = (limits_by_rank or {}).get(r["src_rank"])
        note = None
        if limit and limit.gbit_s < cap_gbit:
            cap_gbit, note = limit.gbit_s, limit.source
        c = cap_gbit / 8.0
        if r["gbyte_s"] < WARN_FRACTION * c:
            f = _pair(r["src_host"], r["dst_host"], r["gbyte_s"], c, r["iface"], note)
            out.append(Finding(check="cluster.ring_hop_capability", status=f.status, component=f.component,
                               summary=f"ring hop rank {r['src_rank']} -> rank {r['dst_rank']}: " + f.summary,
                               evidence=f.evidence, expected=f.expected,
                               expected_source="the sender's line rate" + (f" and the {note}" if note else ""),
                               remedy=f.remedy, details={**f.details, "src_rank": r["src_rank"],
                                                         "dst_rank": r["dst_rank"]}))
    return out
