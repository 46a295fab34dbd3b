"""The ring's per-hop table and its findings (pure logic, no MPI).

Why the first step: in a running ring every hop moves at the bottleneck's pace (a rank forwards
only what it received), so later steps cannot tell hops apart. The first reduce-scatter step is
different: every rank sends its own chunk at once, so after a barrier each link carries one chunk
independently and the receiver's time for it is that link's own. A hop whose bandwidth falls
below the ring's median by more than ``margin`` (a fraction: 0.5 means "under half the median")
is a finding naming both ranks, both hosts and the interface. Between two hosts the ring's median
is their one link, so each direction is held to the faster one instead (both run at once).
"""

from __future__ import annotations

import statistics

from ccdiag.core.findings import FAIL, PASS, SKIP, Component, Evidence, Finding

#: a hop below (1 - margin) x the ring's median hop bandwidth is a finding
DEFAULT_MARGIN = 0.5
CHECK_ID = "cluster.ring_hop_slow"


def hop_table(records: dict[int, dict], idents: dict[int, dict], n: int, iface_of=None) -> list[dict]:
    """One row per hop ``left -> rank``: ranks, hosts, interface, bytes, seconds, GB/s.

    ``records[rank]``: {"bytes", "step0_s"} as the receiving rank measured them; ``idents[rank]``:
    {"host", "ifaces"}; ``iface_of(src_ident, dst_ident)`` names the interface (sender side)."""
    rows = []
    for dst in sorted(records):
        src = (dst - 1) % n
        rec = records[dst]
        s_id, d_id = idents.get(src, {}), idents.get(dst, {})
        t = rec["step0_s"]
        rows.append({
            "src_rank": src, "dst_rank": dst,
            "src_host": s_id.get("host", "?"), "dst_host": d_id.get("host", "?"),
            "iface": iface_of(s_id, d_id) if iface_of else "?",
            "bytes": rec["bytes"], "time_s": t,
            "gbyte_s": rec["bytes"] / t / 1e9 if t > 0 else 0.0,
        })
    return rows


def slow_hops(rows: list[dict], margin: float = DEFAULT_MARGIN) -> tuple[float, list[Finding]]:
    """The ring's median hop bandwidth and one finding per network hop below it by ``margin``.

    Hops within one host are shared memory, not a network link: never judged as one, and left out
    of the median. A ring with no hop between hosts gets one SKIP saying so."""
    net = [r for r in rows if r["src_host"] != r["dst_host"]]
    if not net:
        if not rows:
            return 0.0, []
        hosts = sorted({r["src_host"] for r in rows})
        return statistics.median(r["gbyte_s"] for r in rows), [Finding(
            check=CHECK_ID, status=SKIP, component=Component(kind="node", name=", ".join(hosts)),
            summary=(f"every ring hop is between ranks on {'one host' if len(hosts) == 1 else 'the same host'} "
                     f"({', '.join(hosts)}): shared memory, no network link to judge"),
            remedy="to judge the network, run one rank per host across hosts "
                   "(mpirun --map-by ppr:1:node, srun --ntasks-per-node=1)")]
    median = statistics.median(r["gbyte_s"] for r in net)
    ends = {r["src_host"] for r in net} | {r["dst_host"] for r in net}
    two = len(ends) < 3
    if two:
        # two hosts: both directions cross their one link at the same time, so the faster one is
        # what the link carries; a direction far below it is slow relative to it (the line rate,
        # where one is known, judges the link as a whole: capability.judge_hops)
        median = max(r["gbyte_s"] for r in net)
    floor = median * (1.0 - margin)
    findings = []
    for r in net:
        slow = r["gbyte_s"] < floor
        comp = Component(kind="host_link", name=f"{r['src_host']} -> {r['dst_host']} ({r['iface']})",
                         device=r["iface"], peer=r["dst_host"])
        ref = "the other direction's" if two else "the ring's median"
        summary = (f"ring hop rank {r['src_rank']} ({r['src_host']}) -> rank {r['dst_rank']} "
                   f"({r['dst_host']}) over {r['iface']}: {r['gbyte_s'] * 1000:.1f} MB/s, "
                   f"{r['gbyte_s'] / median:.0%} of {ref} {median * 1000:.1f} MB/s"
                   if median > 0 else "ring hop with no measurable bandwidth")
        findings.append(Finding(
            check=CHECK_ID, status=FAIL if slow else PASS, component=comp, summary=summary,
            evidence=(Evidence("hop bandwidth (first ring step)", round(r["gbyte_s"], 6), "ccdiag ring allreduce"),
                      Evidence("bytes / seconds", f"{r['bytes']} / {r['time_s']:.6f}", "ccdiag ring allreduce"),
                      Evidence("faster direction" if two else "ring median", round(median, 6),
                               "the two directions between the two hosts" if two else "all network hops of this ring")),
            expected=f">= {floor * 1000:.1f} MB/s ({1 - margin:.0%} of {ref})",
            expected_source=f"{ref.replace('the ', '', 1)} and --margin",
            remedy=(f"check the link from {r['src_host']} to {r['dst_host']} on {r['iface']} (cable, switch "
                    f"port, speed/duplex, traffic shaping, errors); `ccdiag bench pairs` says whether "
                    f"{r['dst_host']} is slow with every peer or only with {r['src_host']}") if slow else None,
            details={k: r[k] for k in ("src_rank", "dst_rank", "src_host", "dst_host", "iface", "bytes", "time_s",
                                       "gbyte_s")},
        ))
    return median, findings


def format_hops(rows: list[dict], median_gbyte_s: float, margin: float) -> str:
    lines = [f"# per-hop bandwidth, first ring step (one chunk per link at once); median "
             f"{median_gbyte_s * 1000:.1f} MB/s, finding below {(1 - margin):.0%} of it",
             f"#{'src':>4} {'dst':>4}  {'src host':<16} {'dst host':<16} {'iface':<8} {'bytes':>10} "
             f"{'time (ms)':>10} {'MB/s':>9}"]
    floor = median_gbyte_s * (1 - margin)
    for r in rows:
        mark = "  << slow" if r["gbyte_s"] < floor and r["src_host"] != r["dst_host"] else ""
        lines.append(f" {r['src_rank']:>4} {r['dst_rank']:>4}  {r['src_host']:<16} {r['dst_host']:<16} "
                     f"{r['iface']:<8} {r['bytes']:>10} {r['time_s'] * 1e3:>10.2f} {r['gbyte_s'] * 1000:>9.1f}{mark}")
    return "\n".join(lines)
