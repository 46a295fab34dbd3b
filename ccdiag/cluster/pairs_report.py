"""Rank 0's report of ``ccdiag bench pairs``: the matrices (whole or partial), their one judgement
each, loss, the interface each pair used, the ring order (and, with a fabric layout, the layout's
order beside the measured one).

Why its own module: the report is printed in every case, also when the budget ran out, a rank went
silent or a transfer never completed: then with the pairs that were measured, the ones that failed
(named as findings, never an empty cell under a PASS), the ones never measured and why. Each matrix
is judged once (:mod:`.judgement`): MPI's, with the line rate when one is known, and one TCP matrix
per subnet; the two over the same interface check each other before a link is accused. Loss comes
from the counters each leader read around its pairs (:mod:`.loss`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccdiag.cluster import capability, cpuuse, loss, verdict
from ccdiag.cluster import layout as layoutmod
from ccdiag.cluster import order as ordermod
from ccdiag.cluster import pairmatrix as pmx
from ccdiag.cluster.flowlimits import flow_limit
from ccdiag.cluster.judgement import View, judge
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Finding


def retests(results: dict) -> list[dict]:
    """Every direction measured a second time (:func:`ccdiag.cluster.pairs.retest`): into which host,
    from which, both figures; the matrix holds the better one."""
    rows = []
    for res in results.values():
        if not res or not res.get("leader"):
            continue
        for src, again in sorted((res.get("retest_gbyte_s") or {}).items()):
            rows.append({"src_host": src, "dst_host": res.get("host"),
                         "first_gbyte_s": (res.get("first_gbyte_s") or {}).get(src), "retest_gbyte_s": again})
    return sorted(rows, key=lambda r: (str(r["src_host"]), str(r["dst_host"])))


def format_retests(rows: list[dict]) -> str:
    def mb(v):
        return "-" if v is None else f"{v * 1000:.1f}"
    return "\n".join(f"# retested (flagged slow): {r['src_host']} -> {r['dst_host']} first {mb(r['first_gbyte_s'])} "
                     f"MB/s, again {mb(r['retest_gbyte_s'])} MB/s; the matrix keeps the better" for r in rows)


def used_ifaces(results: dict) -> dict[tuple[str, str], str]:
    """``(a, b)`` -> the interface that carried most of MPI's bytes on ``a`` while it measured with
    ``b`` (read from its counters), else the interface its kernel routes ``b``'s address through."""
    out: dict[tuple[str, str], str] = {}
    for res in results.values():
        if not res or not res.get("leader"):
            continue
        for peer in set(res.get("links") or {}) | set(res.get("used_iface") or {}):
            name = (res.get("used_iface") or {}).get(peer) or (res.get("links") or {}).get(peer)
            if name:
                out[(str(res.get("host")), peer)] = name
    return out


def link_label(used: dict[tuple[str, str], str]) -> str:
    """One name for the links MPI's matrix went over."""
    names = sorted({v for v in used.values() if v})
    if not names:
        return "unknown"
    return names[0] if len(names) == 1 else " | ".join(names)


def format_used(used: dict[tuple[str, str], str], hosts: list[str]) -> str:
    """The interface each pair used, per pair; one line when every pair used the same one."""
    names = {v for v in used.values() if v}
    if len(names) == 1:
        return f"# interface used by every pair (bytes counted on each host): {names.pop()}"
    idx = {h: i for i, h in enumerate(hosts)}
    lines = ["# interface used per pair (bytes counted on each host; a / b: each end's)"]
    for a in hosts:
        for b in hosts:
            if idx[a] < idx[b] and ((a, b) in used or (b, a) in used):
                x, y = used.get((a, b)) or "?", used.get((b, a)) or "?"
                lines.append(f"#   {a} <-> {b}: {x if x == y else f'{x} / {y}'}")
    return "\n".join(lines)


def fold_loss(found: list[Finding], lost: list[Finding]) -> list[Finding]:
    """Loss on a host or pair already named slow is how it is slow (a shaper or policer drops what
    exceeds its rate): it joins that finding's evidence instead of standing as a second one."""
    import dataclasses

    slow_hosts = {f.details.get("host"): i for i, f in enumerate(found)
                  if f.status == FAIL and f.check in ("cluster.host_slow", "cluster.host_cpu_starved")}
    slow_pairs = {frozenset((f.details["a"], f.details["b"])): i for i, f in enumerate(found)
                  if f.status == FAIL and "a" in f.details and "b" in f.details}
    out = list(found)
    for f in lost:
        d = f.details
        members = {d.get("host")} if d.get("host") else {d.get("a"), d.get("b")}
        at = next((slow_hosts[h] for h in members if h in slow_hosts), None)
        if at is None and len(members) == 2:
            at = slow_pairs.get(frozenset(members))
        if at is None:
            out.append(f)
            continue
        host = out[at]
        out[at] = dataclasses.replace(host, summary=f"{host.summary}; and TCP resent segments on it ({f.summary})",
                                      evidence=host.evidence + f.evidence,
                                      details=dict(host.details, loss=f.details))
    return out


def layout_ring_order(layout: layoutmod.Layout, hosts: list[str], measured: list[str] | None,
                      slow: list[str]) -> tuple[dict, str]:
    """The ring order the fabric's layout recommends (each group's hosts consecutive), with how often
    the order measured from the matrix crosses between the layout's groups: the measured order follows
    this run's figures, the layout's the wiring a job's traffic will meet (a leaf's uplinks are shared
    with other jobs; the pairs here ran one at a time). Both are shown; neither overrides the other."""
    placement = layout.place(hosts)
    rec = layoutmod.ring_order(placement, hosts, slow)
    text = layoutmod.format_ring_order(rec)
    if measured:
        rec["measured_order_crossings"] = layoutmod.crossings(measured, placement.group_of())
        text += (f"\n# the measured order above crosses between the layout's groups "
                 f"{rec['measured_order_crossings']} times, the layout's {rec['crossings']}")
    return rec, text


@dataclass
class PairsReport:
    size_bytes: int
    margin: float
    as_json: bool
    hostfile_out: str | None
    only_ifaces: list[str] = field(default_factory=list)
    line_rate_gbit_s: float | None = None
    budget_s: float = 0.0
    candidates: dict = field(default_factory=dict)
    layout: layoutmod.Layout | None = None  # the fabric's layout (--layout), read on rank 0

    def report(self, outcome) -> int:
        from ccdiag.cluster.benchrun import _doc, _emit, _fault_text

        results = outcome.results()
        res0 = results.get(0)
        found: list[Finding] = []
        extra: dict = {}
        text: list[str] = []
        incomplete = [f"rank {r} ({res.get('host')}): {res['incomplete']}" for r, res in sorted(results.items())
                      if res and res.get("incomplete")]
        if res0 and res0.get("matrix") is not None:
            found, extra, text = self._matrix_part(results, res0, outcome.idents())
        code = self._verdict(found, outcome, incomplete or extra.get("missing_pairs"))
        text += [f"{f.status.upper()} {f.check}: {f.summary}" for f in found if f.status in (FAIL, WARN, UNKNOWN, SKIP)]
        text += [f"{f.status.upper()} {f.check}: {f.summary}" for f in found if f.status == PASS]
        text += [f"ccdiag: measuring stopped: {x}" for x in incomplete]
        ft = _fault_text(outcome)
        if ft:
            text.append(ft)
        extra["incomplete"] = incomplete
        _emit(_doc("bench.pairs", outcome, found, code, **extra), self.as_json, "\n".join(text))
        return code

    @staticmethod
    def _verdict(found: list[Finding], outcome, incomplete) -> int:
        # judged: MPI's matrix held to something (the per-interface matrices only add to it)
        judged = any(f.status in (PASS, WARN, FAIL) and not f.check.startswith("cluster.iface_") for f in found)
        return verdict.exit_code(found, unevaluated=bool(outcome.missing or outcome.errors or incomplete),
                                 judged=judged)

    def _matrix_part(self, results: dict, res0: dict, idents: dict) -> tuple[list[Finding], dict, list[str]]:
        hosts = res0["hosts"]
        if len(hosts) < 2:
            f = Finding(check="cluster.pairs", status=SKIP, component=Component(kind="node", name=hosts[0] if hosts else "?"),
                        summary=f"every rank runs on one host ({', '.join(hosts)}): no pair of hosts to measure",
                        remedy="run one rank per host across hosts (mpirun --map-by ppr:1:node, srun --ntasks-per-node=1)")
            return [f], {"hosts": hosts}, []
        used = used_ifaces(results)
        mpi, tcp_views = self._views(results, hosts, used, idents)
        found, cls = judge(mpi, self.margin)
        found = self._loss(found, results, hosts, mpi)
        missing = pmx.missing_pairs(mpi.m, hosts, mpi.failed)
        carried = [[(0.0 if v is None and i != j else v) for j, v in enumerate(row)] for i, row in enumerate(mpi.m)]
        rec = ordermod.recommend(carried, hosts, cls["slow_hosts"]) if not missing else None
        extra = self._extra(results, res0, mpi, cls, rec, missing, used)
        text = [pmx.format_matrix(mpi.m, hosts, mpi.label, self.size_bytes, len(res0["rounds"]), mpi.failed),
                format_used(used, hosts)]
        if extra["retests"]:
            text.append(format_retests(extra["retests"]))
        text.append(self._budget_text(extra["budget"]))
        if missing:
            text.append(f"# not measured (the run was cut short): {', '.join(missing)}")
        found += self._ifaces(tcp_views, res0, extra, text)
        if rec is not None:
            text.append(ordermod.format_recommendation(rec))
            self._hostfiles(rec, res0, extra, text)
        if self.layout is not None:
            measured = rec["order"] if rec is not None else None
            extra["layout_ring_order"], lines = layout_ring_order(self.layout, hosts, measured, cls["slow_hosts"])
            text.append(lines)
        return found, extra, text

    def _views(self, results: dict, hosts: list[str], used: dict, idents: dict) -> tuple[View, list]:
        """MPI's matrix and each subnet's TCP matrix as views to judge; the two over the same
        interface check each other."""
        label = link_label(used)
        ident_of = {(idents.get(r) or {}).get("host"): idents.get(r) or {} for r in idents}
        mpi = View(hosts=hosts, m=pmx.merge_matrix(results, hosts), label=label,
                   failed=pmx.failed_directions(results, hosts), mtus=self._mtus(ident_of, hosts, label),
                   retested={(r["src_host"], r["dst_host"]): (r["first_gbyte_s"], r["retest_gbyte_s"])
                             for r in retests(results)},
                   cpu=self._cpu(results))
        mpi.cap, mpi.cap_note = self._capability(results, hosts, used, ident_of)
        self.candidates = {res.get("host"): res.get("candidates", []) for res in results.values()
                           if res and res.get("leader")}
        tcp_views = [(mat, self._tcp_view(mat, ident_of)) for mat in pmx.iface_matrices(results, hosts)]
        for _, view in tcp_views:
            view.cpu = mpi.cpu  # a rank held off the CPU receives and sends slowly over TCP too
        same = [v for mat, v in tcp_views if mat["label"] == label]  # the subnet MPI's interface is on
        if len(same) == 1:
            mpi.other, same[0].other = same[0], mpi
        return mpi, tcp_views

    def _loss(self, found: list[Finding], results: dict, hosts: list[str], mpi: View) -> list[Finding]:
        """Loss from the counters of MPI's exchanges, folded into a slow host or link it explains,
        and the RDMA ports' own loss counters."""
        # a pair whose transfer never completed resent into the void: its failure says it, not loss
        stuck = {frozenset(k) for k in mpi.failed}
        lost = loss.findings({k: v for k, v in self._per_pair_counters(results).items() if frozenset(k) not in stuck},
                             hosts, mpi.label, self._per_pair_counters(results, "retest_counters"))
        return fold_loss(found, lost) + loss.rdma_findings({res.get("host"): res.get("run_counters")
                                                            for res in results.values() if res and res.get("leader")})

    def _extra(self, results: dict, res0: dict, mpi: View, cls: dict, rec, missing: list, used: dict) -> dict:
        """The JSON document's part for MPI's matrix and what was read beside it."""
        leaders = [res for res in results.values() if res and res.get("leader")]
        return {"hosts": mpi.hosts, "iface": mpi.label, "size_bytes": self.size_bytes, "rounds": res0["rounds"],
                "matrix_gbyte_s": mpi.m, "classification": cls, "ring_order": rec, "missing_pairs": missing,
                "failed_transfers": [dict(e, src_host=s, dst_host=d) for (s, d), e in sorted(mpi.failed.items())],
                "used_iface": [{"a": a, "b": b, "iface": v} for (a, b), v in sorted(used.items())],
                "sizes_used_bytes": {res.get("host"): res.get("size_bytes") for res in leaders},
                "retests": retests(results),
                "budget": self._budget_doc(results),
                "cpu": {h: dict(t, available_fraction=cpuuse.available_fraction(t)) for h, t in mpi.cpu.items()},
                "counters": {res.get("host"): {"pairs": res.get("counters"), "run": res.get("run_counters"),
                                               "tcp_steps": res.get("tcp_steps_counters")} for res in leaders}}

    @staticmethod
    def _mtus(ident_of: dict, hosts: list[str], iface: str) -> dict:
        return {h: ((ident_of.get(h) or {}).get("mtus") or {}).get(iface) for h in hosts}

    @staticmethod
    def _cpu(results: dict) -> dict:
        """Each host's rank's CPU tally over all its exchanges."""
        out = {}
        for res in results.values():
            if not res or not res.get("leader") or not res.get("cpu"):
                continue
            total = cpuuse.CpuTally()
            for t in res["cpu"].values():
                if t:
                    total.add(cpuuse.CpuTally(**t))
            out[res.get("host")] = total.to_json()
        return out

    def _capability(self, results: dict, hosts: list[str], used: dict, ident_of: dict) -> tuple[list | None, str | None]:
        links: dict = {}
        speeds, limits = {}, {}
        for (a, b), v in used.items():
            links.setdefault(a, {})[b] = v
        for h in hosts:
            ident = ident_of.get(h) or {}
            speeds[h] = ident.get("speeds") or {}
            limits[h] = flow_limit(ident.get("provider"))
        cap = capability.path_capability(hosts, links, speeds, self.line_rate_gbit_s,
                                         {h: lim.gbit_s for h, lim in limits.items() if lim})
        line = capability.path_capability(hosts, links, speeds, self.line_rate_gbit_s)
        # a cloud's flow limit below some path's line rate is said in each finding it shapes
        note = next((lim.source for lim in limits.values() if lim), None) if cap != line else None
        return (cap if any(c for row in cap for c in row if c) else None), note

    @staticmethod
    def _per_pair_counters(results: dict, key: str = "counters") -> dict:
        return {(res.get("host"), peer): d for res in results.values() if res and res.get("leader")
                for peer, d in (res.get(key) or {}).items()}

    @staticmethod
    def _budget_doc(results: dict) -> dict:
        """How the budget was shared: each round's share (the leaders' largest), the retest rounds
        that ran, the rounds that started without every rank."""
        leaders = [res for res in results.values() if res and res.get("leader")]
        shares = [max(x) for x in zip(*[res.get("round_share_s") or [] for res in leaders])] if leaders else []
        return {"round_share_s": shares, "retest_rounds": max((res.get("retest_rounds") or 0 for res in leaders), default=0),
                "late_rounds": sorted({r for res in leaders for r in res.get("late_rounds") or []})}

    @staticmethod
    def _budget_text(b: dict) -> str:
        shares = ", ".join(f"{s:.1f}" for s in b["round_share_s"])
        line = (f"# budget: each round's share {shares} s (a transfer not done by the end of its pair's share failed); "
                f"{b['retest_rounds']} retest round(s) in the last share")
        if b["late_rounds"]:
            line += f"; round(s) {', '.join(map(str, b['late_rounds']))} started without every rank"
        return line

    def _tcp_view(self, mat: dict, ident_of: dict) -> View:
        retested = {}
        for r in mat["rows"]:
            if "retest_mbyte_s" in r:
                first = r.get("first_mbyte_s")
                first = 0.0 if first is None and r.get("first_error") else first
                again = r.get("retest_mbyte_s")
                retested[(r["src_host"], r["dst_host"])] = (None if first is None else first / 1000,
                                                           None if again is None else again / 1000)
        mtus = {h: ((ident_of.get(h) or {}).get("mtus") or {}).get(mat["ifaces"].get(h)) for h in mat["hosts"]}
        return View(hosts=mat["hosts"], m=mat["matrix_gbyte_s"], label=f"{mat['label']} ({mat['net']})",
                    prefix="cluster.iface", failed=mat["failed"], mtus=mtus, retested=retested, transport="TCP")

    def _ifaces(self, tcp_views: list, res0: dict, extra: dict, text: list[str]) -> list[Finding]:
        found, nets = [], []
        for mat, view in tcp_views:
            ifs, icls = judge(view, self.margin)
            for f in ifs:
                # the interface by its name on the host named (it may differ between hosts), and the subnet
                f.details.update(net=mat["net"], iface=mat["ifaces"].get(f.details.get("host"), mat["label"]))
            found += ifs
            nets.append({"net": mat["net"], "iface": mat["label"], "hosts": mat["hosts"], "ifaces": mat["ifaces"],
                         "matrix_mbyte_s": [[None if v is None else round(v * 1000, 3) for v in row]
                                            for row in mat["matrix_gbyte_s"]],
                         "classification": icls,
                         "pairs": [{k: r.get(k) for k in ("src_host", "dst_host", "src_iface", "dst_iface",
                                                          "src_addr", "dst_addr", "bytes", "mbyte_s", "error",
                                                          "small_ok", "share_s", "first_mbyte_s", "retest_mbyte_s",
                                                          "first_error") if k in r} for r in mat["rows"]]})
            text.append(pmx.format_matrix(mat["matrix_gbyte_s"], mat["hosts"], f"{mat['label']} ({mat['net']}, TCP)",
                                          self.size_bytes, len(res0["rounds"]), mat["failed"]))
            failed = pmx.format_iface_rows(mat["rows"])
            if failed:
                text.append(failed)
        extra["ifaces"] = {"only": self.only_ifaces, "networks": nets, "candidates": self.candidates}
        if not nets:
            text.append("# no candidate interface shared a subnet between hosts: no per-interface matrix"
                        + (f" (--iface {', '.join(self.only_ifaces)})" if self.only_ifaces else ""))
        return found

    def _hostfiles(self, rec: dict, res0: dict, extra: dict, text: list[str]) -> None:
        if not self.hostfile_out:
            return
        written = ordermod.write_hostfiles(self.hostfile_out, rec["order"], slots=res0.get("slots", {}),
                                           note=f"ring order by ccdiag: predicted bottleneck "
                                                f"{rec['predicted_busbw_gbyte_s'] * 1000:.1f} MB/s")
        extra["hostfiles"] = written
        text.append(f"# hostfiles written: {', '.join(written)}")
