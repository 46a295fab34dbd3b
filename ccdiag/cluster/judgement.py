"""One judgement of a pairwise matrix, with or without a known line rate, that never contradicts itself.

Why one: a matrix used to be judged three times (relative, absolute, per interface), each adding its
own PASS, so one report could hold "FAIL host n4 at 5 % of line rate" beside "PASS every pair within
its path's line rate", and a run on virtual NICs (no line rate) dropped its relative verdict and
said UNKNOWN on every healthy cluster. Here, in order:

1. transfers that never completed are findings on their pair or host (:mod:`.transfers`), and are
   not figures;
2. the relative judgement always runs: slow host vs slow link against the fleet
   (:func:`.pairmatrix.classify`, three hosts or more), or, with two hosts, one direction against the
   other (:func:`.pairmatrix.directions`); it decides PASS or FAIL when no line rate is known;
3. a known line rate adds the absolute check (:func:`.capability.judge`): a pair the relative rule
   already named keeps one finding (the absolute figure joins its evidence), a pair only the absolute
   rule names gets its own, a host named slow carries its pairs' fraction of the line rate;
4. a direction measured twice that read slow once and at rate once is unstable (WARN), not slow;
   a pair still slow on this matrix while another matrix over the same interface carries it at
   rate (after both were measured again) is unstable too: only measurements that agree accuse a link;
5. a host whose rank was held off the CPU while it measured (:mod:`.cpuuse`) is the finding, and the
   slow or unstable pairs it explains are folded under it (on every matrix);
6. one PASS, only when nothing above failed, warned or was unknown, saying what it held the pairs to;
   with no line rate known, a SKIP says the absolute check did not run and how to make it. Two hosts
   whose directions agree, with no line rate known, are UNKNOWN, not a PASS: a one-way shaper slows
   the other direction too (its acknowledgements queue behind the shaped data), so agreeing
   directions do not show a healthy link.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ccdiag.cluster import capability, cpuuse, transfers
from ccdiag.cluster import pairmatrix as pmx
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding


@dataclass
class View:
    """One matrix to judge and what is known beside it."""

    hosts: list[str]
    m: list  # GB/s, m[i][j] from host i to host j; None: no figure
    label: str  # the interface as findings name it: "eth0", "eth1 (10.78.0.0/24)"
    prefix: str = "cluster"  # check ids: pmx.check_id(prefix, ...)
    failed: dict = field(default_factory=dict)  # (src, dst) -> a transfer that did not complete
    cap: list | None = None  # GB/s each path carries (capability.path_capability), None: no rate known
    cap_note: str | None = None
    mtus: dict = field(default_factory=dict)  # host -> MTU of the interface
    retested: dict = field(default_factory=dict)  # (src, dst) -> (first GB/s, again GB/s)
    cpu: dict = field(default_factory=dict)  # host -> its rank's CPU tally over its exchanges
    other: "View | None" = None  # another matrix over the same interface (MPI's vs TCP's)
    transport: str = "MPI"  # what carried this matrix's bytes: MPI's library, or ccdiag's own TCP


def _touches(f: Finding, host: str) -> bool:
    d = f.details
    return host in (d.get("host"), d.get("a"), d.get("b"))


def _pair_of(f: Finding) -> frozenset | None:
    d = f.details
    return frozenset((d["a"], d["b"])) if "a" in d and "b" in d else None


def without_failed(m, hosts: list[str], failed: dict) -> list:
    """The matrix with both directions of every pair that has a failed direction left out: such a
    pair is its failure's finding, and its other direction alone would read as a healthy pair."""
    bad = {frozenset(k) for k in failed}
    return [[None if frozenset((hosts[i], hosts[j])) in bad else v for j, v in enumerate(row)]
            for i, row in enumerate(m)]


def classification(v: View, margin: float) -> dict:
    n = len(v.hosts)
    if n >= 3:
        return pmx.classify(v.m, v.hosts, margin)
    if n == 2:
        return pmx.directions(v.m, v.hosts, margin)
    return {"reference_gbyte_s": None, "floor_gbyte_s": None, "slow_hosts": [], "slow_links": [],
            "host_median_gbyte_s": {}}


def judge(v: View, margin: float) -> tuple[list[Finding], dict]:
    """Every finding of one matrix (see the module docstring) and its classification."""
    hosts = v.hosts
    m = without_failed(v.m, hosts, v.failed)
    fails = transfers.findings(v.failed, pmx.measured_pairs(m, hosts), hosts, v.label, v.mtus, v.prefix)
    cls = classification(dataclasses.replace(v, m=m), margin)
    if len(hosts) < 2:
        return fails, cls
    rel = pmx.relative_findings(cls, hosts, v.label, margin, v.prefix)
    has_cap = bool(v.cap) and any(c for row in v.cap or [] for c in row if c)
    absolute: list[Finding] = []
    if has_cap:
        absolute, _ = capability.judge(m, v.cap, hosts, cls["slow_hosts"], v.label, v.cap_note)
        rel, absolute = _one_per_pair(rel, absolute, m, v.cap, hosts)
    rel = _cross_checked(v, rel, margin)
    absolute = _cross_checked(v, absolute, margin)
    starved, kept = _starved(v, [rel, absolute, _unstable(v, cls)])
    rel, absolute, unstable = kept
    found = fails + starved + rel + absolute + unstable
    # directions touching a host none of whose transfers completed are that host's finding
    gone = {f.details["host"] for f in fails if f.details.get("host")}
    missing = [d for d in pmx.missing_pairs(v.m, hosts, v.failed) if not set(d.split("->")) & gone]
    if missing:
        # a pair neither measured nor failed is an empty cell: never under a PASS
        found.append(Finding(
            check=pmx.check_id(v.prefix, "pairs_missing"), status=UNKNOWN,
            component=Component(kind="node", name="all hosts", device=v.label),
            summary=(f"{len(missing)} direction(s) over {v.label} have no figure and no failure (their receiver never "
                     f"reported, or the run was cut short): {', '.join(missing[:8])}"
                     + (f" (+{len(missing) - 8} more)" if len(missing) > 8 else "")),
            remedy="see the ranks that did not answer and the budget; a longer --budget measures the rest",
            details={"missing": missing}))
    if not any(f.status in (FAIL, WARN, UNKNOWN) for f in found):
        found.append(_pass(v, cls, margin, has_cap))
    if not has_cap and v.prefix == "cluster":
        found.append(Finding(
            check=capability.CHECK_ID, status=SKIP, component=Component(kind="node", name="all hosts", device=v.label),
            summary=(f"no line rate known for the paths over {v.label} (virtual interfaces report none, or MPI's "
                     f"transport is not an IP interface): the pairs were judged against each other only"),
            remedy="give --line-rate-gbit-s to also hold every pair to the line rate"))
    return found, cls


def _one_per_pair(rel: list[Finding], absolute: list[Finding], m, cap, hosts: list[str]) -> tuple[list, list]:
    """A pair both rules name keeps the relative finding, the absolute figure in its evidence; a
    host the relative rule names carries its pairs' lowest fraction of the line rate."""
    idx = {h: i for i, h in enumerate(hosts)}
    by_pair = {p: f for f in absolute if (p := _pair_of(f)) is not None and f.details.get("capability_gbyte_s")}
    keep_rel = []
    for f in rel:
        p = _pair_of(f)
        if p is not None and p in by_pair:
            a = by_pair.pop(p)
            f = dataclasses.replace(f, evidence=f.evidence + (
                Evidence("fraction of the path's line rate", round(a.details["fraction"], 4), "interface speeds"),),
                details=dict(f.details, capability_gbyte_s=a.details["capability_gbyte_s"],
                             fraction=a.details["fraction"]))
        elif f.details.get("host") in idx and not f.details.get("a"):
            h = idx[f.details["host"]]
            fr = [min(x for x in (m[h][j], m[j][h]) if x is not None) / c
                  for j in range(len(hosts)) if j != h and (c := cap[h][j]) and (m[h][j] is not None or m[j][h] is not None)]
            if fr:
                f = dataclasses.replace(f, summary=f"{f.summary}; {min(fr):.0%} of its paths' line rate at worst",
                                        details=dict(f.details, worst_fraction_of_line_rate=min(fr)))
        keep_rel.append(f)
    kept_abs = [f for f in absolute if _pair_of(f) is None or _pair_of(f) in by_pair]
    return keep_rel, kept_abs


def _starved(v: View, groups: list[list[Finding]]) -> tuple[list[Finding], list[list[Finding]]]:
    """A host whose rank was held off the CPU while it exchanged data: one FAIL on the host (on
    MPI's matrix; the per-interface matrices only fold), and the slow or unstable pairs it explains
    folded under it (removed from ``groups``)."""
    out = []
    for h in v.hosts:
        tally = v.cpu.get(h)
        if not tally or not cpuuse.starved(tally):
            continue
        explained = [f for g in groups for f in g if _touches(f, h)]
        groups = [[f for f in g if f not in explained] for g in groups]
        if v.prefix != "cluster":
            continue
        frac = cpuuse.available_fraction(tally) or 0.0
        ran = tally["cpu_s"] / tally["wall_s"] if tally.get("wall_s") else 0.0
        slow = sorted({f.component.name for f in explained})
        out.append(Finding(
            check="cluster.host_cpu_starved", status=FAIL, component=Component(kind="node", name=h, device=v.label),
            summary=(f"host {h}: its rank was on a CPU or ready for one only {frac:.0%} of the time it exchanged "
                     f"data (it ran {ran:.0%}): stopped or throttled, so every figure with it is its own, not the "
                     f"network's" + (f"; {', '.join(slow)} follow from it" if slow else "")),
            evidence=(Evidence("on or waiting for a CPU / wall time", round(frac, 3), "/proc/thread-self/schedstat"),
                      Evidence("CPU time / wall time", round(ran, 3), "time.thread_time of the rank"),
                      Evidence("throttled (s)", tally.get("throttled_s"), "the rank's cgroup cpu.stat")),
            expected=f">= {cpuuse.STARVED_BELOW:.0%} of the wall time on or ready for a CPU",
            expected_source="ccdiag.cluster.cpuuse.STARVED_BELOW",
            remedy=(f"look at {h}'s rank: a cgroup CPU quota (cpu.max / cpu.cfs_quota_us) too small for it, a "
                    f"process stopping it (SIGSTOP, a debugger, a checkpointer), a CPU set shared with other jobs"),
            details={"host": h, "available_fraction": frac, "cpu_fraction": ran, "tally": tally,
                     "explains": [f.summary for f in explained]}))
    return out, groups


def _figure(v: View, a: str, b: str) -> float | None:
    """The slower direction of pair (a, b) on ``v``, when both were measured."""
    if a not in v.hosts or b not in v.hosts:
        return None
    i, j = v.hosts.index(a), v.hosts.index(b)
    x, y = v.m[i][j], v.m[j][i]
    return None if x is None or y is None else min(x, y)


def _cross_checked(v: View, rel: list[Finding], margin: float) -> list[Finding]:
    """Slow links and hosts of this matrix that another matrix over the same interface carries at
    rate (every pair in question at or above the other's floor, or above the line-rate fraction a
    pair below its line rate was held to): unstable, not slow."""
    o = v.other
    if o is None:
        return rel
    ocls = classification(o, margin)
    floor: float | None = ocls.get("floor_gbyte_s")
    if floor is None:
        return rel
    out = []
    for f in rel:
        if f.status not in (FAIL, WARN):
            out.append(f)
            continue
        d = f.details
        # a pair held to its line rate is held to the same there; a relative finding to the other's floor
        bar: float = capability.WARN_FRACTION * d["capability_gbyte_s"] if d.get("capability_gbyte_s") and \
            f.check == capability.CHECK_ID else floor
        if "a" in d:
            pairs = [(d["a"], d["b"])]
        elif d.get("host"):
            pairs = [(d["host"], p) for p in v.hosts if p != d["host"]]
        else:
            out.append(f)
            continue
        got = [_figure(o, a, b) for a, b in pairs]
        figs = [x for x in got if x is not None]
        if not figs or len(figs) < len(got) or any(x < bar for x in figs):
            out.append(f)
            continue
        out.append(dataclasses.replace(
            f, check=pmx.check_id(v.prefix, "pair_unstable"), status=WARN,
            summary=(f"unstable, not slow: {f.summary}; but {o.transport} over the same interface ({o.label}) carried "
                     f"{', '.join(f'{a}<->{b} {x * 1000:.1f} MB/s' for (a, b), x in zip(pairs, figs))} "
                     f"(at or above {bar * 1000:.1f} MB/s) when measured"),
            remedy="measure again when the hosts are quiet; if it comes back, look at what differs between the "
                   "two transports (MPI's path and CPU use against plain TCP)",
            details=dict(d, unstable=True, other=o.label, other_gbyte_s=figs)))
    return out


def _unstable(v: View, cls: dict) -> list[Finding]:
    """Directions measured twice that read below the floor once and at or above it once."""
    floor = cls.get("floor_gbyte_s")
    if floor is None:
        return []
    out = []
    for (src, dst), (first, again) in sorted(v.retested.items()):
        if first is None or again is None or not (min(first, again) < floor <= max(first, again)):
            continue
        out.append(Finding(
            check=pmx.check_id(v.prefix, "pair_unstable"), status=WARN,
            component=Component(kind="host_link", name=f"{src} -> {dst} ({v.label})", device=v.label, peer=dst),
            summary=(f"{src} -> {dst} over {v.label} read {first * 1000:.1f} MB/s, then {again * 1000:.1f} MB/s when "
                     f"measured again (floor {floor * 1000:.1f} MB/s): unstable, not slow; the matrix keeps the better"),
            evidence=(Evidence("first", round(first, 6), "ccdiag pairs (GB/s)"),
                      Evidence("again", round(again, 6), "ccdiag pairs retest (GB/s)")),
            remedy="a slow link is slow every time: this one was not; measure again when the hosts are quiet",
            details={"src": src, "dst": dst, "a": src, "b": dst, "first_gbyte_s": first, "retest_gbyte_s": again,
                     "floor_gbyte_s": floor, "iface": v.label}))
    return out


def _pass(v: View, cls: dict, margin: float, has_cap: bool) -> Finding:
    ref = cls["reference_gbyte_s"]
    n = len(v.hosts)
    measured = len(pmx.measured_pairs(v.m, v.hosts))
    every = "every pair" if measured == n * (n - 1) // 2 else f"every measured pair ({measured} of {n * (n - 1) // 2})"
    if cls.get("rule") == "directions":
        what = (f"both directions of {v.hosts[0]} <-> {v.hosts[1]} over {v.label} within {margin:.0%} of each "
                f"other ({v.m[0][1] * 1000:.1f} and {v.m[1][0] * 1000:.1f} MB/s)")
        if not has_cap:
            # two directions that agree say nothing of a link slow both ways (a shaper one way slows
            # the other too: its acknowledgements queue behind the shaped data)
            return Finding(check=pmx.check_id(v.prefix, "pairs"), status=UNKNOWN,
                           component=Component(kind="node", name="all hosts", device=v.label),
                           summary=f"{what}; with two hosts and no line rate known, a link slow both ways reads the same",
                           remedy="give --line-rate-gbit-s, or measure three hosts or more",
                           details={"reference_gbyte_s": ref, "line_rate_known": False})
    else:
        what = f"{every} of {n} hosts over {v.label} within {1 - margin:.0%} of the fleet reference {ref * 1000:.1f} MB/s"
    if has_cap:
        what += f", and at or above {capability.WARN_FRACTION:.0%} of its path's line rate"
    return Finding(check=pmx.check_id(v.prefix, "pairs"), status=PASS,
                   component=Component(kind="node", name="all hosts", device=v.label), summary=what,
                   details={"reference_gbyte_s": ref, "line_rate_known": has_cap})
