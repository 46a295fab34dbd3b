"""The pairwise matrices of ``bench pairs`` as rank 0 builds them: MPI's and one per subnet (TCP).

Why its own module: the measuring (:mod:`.pairs`) runs on every rank, this runs on rank 0 only,
from the leaders' results. m[i][j] is GB/s from host i to host j as host j's leader measured its
receive; a transfer that did not complete is not a figure (None there) but a failed direction,
kept apart (:func:`failed_directions`), so an empty cell is never read as a pass nor as a slow
figure, and :mod:`.transfers` names it.

Slow host vs slow link is the project's one rule, :func:`ccdiag.core.outliers.classify`: each
pair's figure is its slower direction, the reference is the median of the hosts' own median pair
bandwidths (one bad host cannot drag it down), and a pair below ``1 - margin`` of it is slow. A
host is named only when at least one pair without it is fine. Fewer than three measured hosts, or a
reference of nothing, cannot be compared: ``reference_gbyte_s`` is None.
"""

from __future__ import annotations

from ccdiag.core import outliers
from ccdiag.core.findings import FAIL, UNKNOWN, Component, Evidence, Finding


def check_id(prefix: str, name: str) -> str:
    """``cluster.host_slow`` on MPI's matrix (prefix ``cluster``), ``cluster.iface_host_slow`` on a
    subnet's TCP matrix (prefix ``cluster.iface``)."""
    return f"cluster.{name}" if prefix == "cluster" else f"{prefix}_{name}"


def merge_matrix(results: dict[int, dict], hosts: list[str]) -> list[list[float | None]]:
    """m[i][j]: GB/s from host i to host j, as host j's leader measured its receive."""
    idx = {h: i for i, h in enumerate(hosts)}
    m: list[list[float | None]] = [[None] * len(hosts) for _ in hosts]
    for res in results.values():
        if not res or not res.get("leader"):
            continue
        j = idx.get(res["host"])
        for src, v in (res.get("into_gbyte_s") or {}).items():
            if j is not None and src in idx and v is not None:
                m[idx[src]][j] = v
    return m


def failed_directions(results: dict[int, dict], hosts: list[str]) -> dict[tuple[str, str], dict]:
    """``(src, dst)`` -> what is known of an MPI transfer that did not complete in its share: from
    the receiver (``failed_into``) or, when the receiver never reported (its answers queue behind
    the transfer that is stuck), from the sender (``failed_out``)."""
    out: dict[tuple[str, str], dict] = {}
    for res in results.values():
        if not res or not res.get("leader"):
            continue
        me = str(res.get("host"))
        for src, e in (res.get("failed_out") or {}).items():
            out.setdefault((me, src), dict(e))
        for src, e in (res.get("failed_into") or {}).items():
            out[(src, me)] = dict(e)
    known = set(hosts)
    return {k: v for k, v in out.items() if k[0] in known and k[1] in known}


def measured_pairs(m, hosts: list[str]) -> set[tuple[str, str]]:
    """Pairs (plan order) with a figure in both directions."""
    n = len(hosts)
    return {(hosts[a], hosts[b]) for a in range(n) for b in range(a + 1, n)
            if m[a][b] is not None and m[b][a] is not None}


def missing_pairs(m, hosts: list[str], failed: dict | None = None) -> list[str]:
    """``a->b`` for every ordered pair with no figure that did not fail either: never measured."""
    return [f"{hosts[i]}->{hosts[j]}" for i in range(len(hosts)) for j in range(len(hosts))
            if i != j and m[i][j] is None and (hosts[i], hosts[j]) not in (failed or {})]


def pair_figures(m, hosts: list[str]) -> dict[tuple[str, str], float]:
    """Each measured pair's figure: its slower direction. Pairs never measured (a run cut short) or
    whose transfers failed are left out, never taken for slow ones."""
    n = len(hosts)
    return {(hosts[a], hosts[b]): min(vals) for a in range(n) for b in range(a + 1, n)
            if (vals := [v for v in (m[a][b], m[b][a]) if v is not None])}


def classify(m, hosts: list[str], margin: float) -> dict:
    """Slow hosts (slow with every peer) apart from slow links (slow with one peer only), by
    :func:`ccdiag.core.outliers.classify` (see the module docstring)."""
    res = outliers.classify(pair_figures(m, hosts), fraction=1 - margin)
    idx = {h: i for i, h in enumerate(hosts)}
    links = [{"a": a, "b": b, "a_to_b_gbyte_s": m[idx[a]][idx[b]], "b_to_a_gbyte_s": m[idx[b]][idx[a]]}
             for a, b in res.slow_pairs]
    return {"reference_gbyte_s": res.reference, "floor_gbyte_s": res.floor,
            "host_median_gbyte_s": dict(res.member_medians),
            "slow_hosts": sorted(res.slow_members, key=idx.__getitem__), "slow_links": links}


def directions(m, hosts: list[str], margin: float) -> dict:
    """Two hosts have no fleet to compare with, but a pair's two directions run at once over the
    same path: one far below the other (a shaper, a bad transceiver, a full buffer on one side) is
    slow relative to it. The same margin as the fleet rule: below ``1 - margin`` of the faster."""
    ab, ba = m[0][1], m[1][0]
    if ab is None or ba is None or max(ab, ba) <= 0:
        return {"reference_gbyte_s": None, "floor_gbyte_s": None, "slow_hosts": [], "slow_links": [],
                "host_median_gbyte_s": {}}
    ref = max(ab, ba)
    floor = ref * (1 - margin)
    links = [{"a": hosts[0], "b": hosts[1], "a_to_b_gbyte_s": ab, "b_to_a_gbyte_s": ba}] if min(ab, ba) < floor else []
    return {"reference_gbyte_s": ref, "floor_gbyte_s": floor, "slow_hosts": [], "slow_links": links,
            "host_median_gbyte_s": {}, "rule": "directions"}


def relative_findings(cls: dict, hosts: list[str], iface: str, margin: float, prefix: str = "cluster") -> list[Finding]:
    """The slow hosts and slow links of a classification, or UNKNOWN when it had no reference."""
    ref, floor = cls["reference_gbyte_s"], cls["floor_gbyte_s"]
    if ref is None:
        return [Finding(check=check_id(prefix, "pairs"), status=UNKNOWN,
                        component=Component(kind="node", name="all hosts", device=iface),
                        summary=(f"no fleet reference over {iface}: fewer than three of {len(hosts)} hosts have a "
                                 "measured pair, or every measured pair carried nothing, so a slow host cannot be "
                                 "told from a slow link"),
                        remedy="measure at least three hosts; a transfer that failed is listed with the matrix")]
    two = cls.get("rule") == "directions"
    out = []
    for h in cls["slow_hosts"]:
        med = cls["host_median_gbyte_s"][h]
        out.append(Finding(
            check=check_id(prefix, "host_slow"), status=FAIL,
            component=Component(kind="node", name=h, device=iface),
            summary=(f"host {h} is slow with every peer over {iface}: median {med * 1000:.1f} MB/s per pair "
                     f"vs {ref * 1000:.1f} MB/s for the fleet"),
            evidence=(Evidence("median pair bandwidth", round(med, 6), "ccdiag pairs"),
                      Evidence("fleet reference", round(ref, 6), "median of every host's median")),
            expected=f">= {floor * 1000:.1f} MB/s ({1 - margin:.0%} of the fleet reference)",
            expected_source="pairwise matrix and --margin",
            remedy=f"look at {h} itself: its NIC {iface} (speed, errors, shaping), its switch port, its CPU load; "
                   f"drain it or run without it",
            details={"host": h, "iface": iface, "median_gbyte_s": med, "reference_gbyte_s": ref}))
    for link in cls["slow_links"]:
        a, b = link["a"], link["b"]
        ab, ba = link["a_to_b_gbyte_s"] or 0.0, link["b_to_a_gbyte_s"] or 0.0
        if two:
            slow, fast = ((a, b), (b, a)) if ab < ba else ((b, a), (a, b))
            summary = (f"link {a} <-> {b} over {iface}: {slow[0]}->{slow[1]} {min(ab, ba) * 1000:.1f} MB/s is "
                       f"{min(ab, ba) / ref:.0%} of {fast[0]}->{fast[1]} {ref * 1000:.1f} MB/s, measured at the same "
                       f"time over the same path")
            ref_what = "the faster direction"
        else:
            summary = (f"link {a} <-> {b} over {iface} is slow while both hosts are fine with their other peers: "
                       f"{a}->{b} {ab * 1000:.1f} MB/s, {b}->{a} {ba * 1000:.1f} MB/s vs {ref * 1000:.1f} MB/s")
            ref_what = "median of every host's median"
        out.append(Finding(
            check=check_id(prefix, "link_slow"), status=FAIL,
            component=Component(kind="host_link", name=f"{a} <-> {b} ({iface})", device=iface, peer=b),
            summary=summary,
            evidence=(Evidence(f"{a}->{b}", round(ab, 6), "ccdiag pairs"),
                      Evidence(f"{b}->{a}", round(ba, 6), "ccdiag pairs"),
                      Evidence("reference", round(ref, 6), ref_what)),
            expected=f">= {floor * 1000:.1f} MB/s", expected_source="pairwise matrix and --margin",
            remedy=f"check the path between {a} and {b} (routing, a switch or uplink between them, per-flow "
                   f"shaping, each end's errors); put them apart in the ring order (--hostfile-out)",
            details=dict(link, iface=iface)))
    return out


def format_matrix(m, hosts: list[str], iface: str, size_bytes: int, rounds: int,
                  failed: dict | None = None) -> str:
    """The matrix in MB/s; ``x`` a transfer that did not complete, ``-`` one never measured."""
    w = max(8, *(len(h) for h in hosts)) if hosts else 8
    corner = "from/to"
    lines = [f"# pairwise bandwidth (MB/s, row sends to column) over {iface}, {size_bytes} bytes, "
             f"{rounds} rounds of disjoint pairs" + ("; x: did not complete" if failed else ""),
             f"#{corner:<{w}} " + " ".join(f"{h:>{w}}" for h in hosts)]
    for i, h in enumerate(hosts):
        cells = []
        for j, v in enumerate(m[i]):
            if v is not None:
                cells.append(f"{v * 1000:>{w}.1f}")
            else:
                cells.append(f"{'x' if (h, hosts[j]) in (failed or {}) else '-':>{w}}")
        lines.append(f" {h:<{w}} " + " ".join(cells))
    return "\n".join(lines)


def iface_matrices(results: dict[int, dict], hosts: list[str]) -> list[dict]:
    """One matrix per subnet from the leaders' ``tcp_rows``: the hosts on it (in plan order), the
    interface each uses there, m[i][j] in GB/s from host i to host j (None for a transfer that did
    not complete, which is in ``failed``), and the label findings use (the interface name, or
    ``a|b`` when the hosts name it differently)."""
    rows = [r for res in results.values() if res and res.get("leader") for r in res.get("tcp_rows", [])]
    # a sender's row of a transfer that failed stands in only where its receiver reported nothing
    heard = {(r["net"], r["src_host"], r["dst_host"]) for r in rows if not r.get("sender_side")}
    rows = [r for r in rows if not r.get("sender_side") or (r["net"], r["src_host"], r["dst_host"]) not in heard]
    nets: dict[str, list[dict]] = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    out = []
    for net in sorted(nets):
        names: dict[str, str] = {}
        for r in nets[net]:
            names.setdefault(r["src_host"], r["src_iface"])
            names.setdefault(r["dst_host"], r["dst_iface"])
        on = [h for h in hosts if h in names]
        idx = {h: i for i, h in enumerate(on)}
        m: list[list[float | None]] = [[None] * len(on) for _ in on]
        failed: dict[tuple[str, str], dict] = {}
        for r in nets[net]:
            v = r["mbyte_s"]
            if v is not None:
                m[idx[r["src_host"]]][idx[r["dst_host"]]] = v / 1000
            else:
                failed[(r["src_host"], r["dst_host"])] = {"stage": r.get("error") or "did not complete",
                                                           "small_ok": r.get("small_ok"), "share_s": r.get("share_s"),
                                                           "bytes": r.get("bytes")}
        label = "|".join(sorted(set(names.values())))
        out.append({"net": net, "label": label, "hosts": on, "ifaces": {h: names[h] for h in on},
                    "matrix_gbyte_s": m, "failed": failed, "rows": nets[net]})
    return out


def format_iface_rows(rows: list[dict]) -> str:
    """The failed transfers, one line each (the matrix shows them as ``x``)."""
    return "\n".join(f"# {r['src_host']} ({r['src_addr']}) -> {r['dst_host']} ({r['dst_addr']}) over "
                     f"{r['dst_iface']}: {r['error']}" for r in rows if r.get("error"))
