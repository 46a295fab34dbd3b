"""Rank 0's report of ``ccdiag bench pairs``: the matrix (whole or partial), its findings, the ring
order, the per-interface matrices.

Why its own module: the report is printed in every case, also when the budget ran out or a rank
went silent: then with the pairs that were measured, the ones missing and why, and exit 3. Findings
come from three places and each slow link is named once: absolute (each figure against its path's
line rate, :mod:`.capability`), relative (slow host vs slow link, :func:`.pairs.classify`), and
per interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccdiag.cluster import capability
from ccdiag.cluster import order as ordermod
from ccdiag.cluster import pairs as pm
from ccdiag.cluster.flowlimits import flow_limit
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Finding


def missing_pairs(m, hosts: list[str]) -> list[str]:
    """``a->b`` for every ordered pair the matrix has no figure for."""
    return [f"{hosts[i]}->{hosts[j]}" for i in range(len(hosts)) for j in range(len(hosts))
            if i != j and m[i][j] is None]


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


def link_label(results: dict) -> str:
    """One name for the links MPI's matrix went over, from what each leader found."""
    names = sorted({v for res in results.values() if res and res.get("leader") for v in (res.get("links") or {}).values()})
    if not names:
        return "unknown"
    return names[0] if len(names) == 1 else " | ".join(names)


@dataclass
class PairsReport:
    size_bytes: int
    margin: float
    as_json: bool
    hostfile_out: str | None
    only_ifaces: list[str] = field(default_factory=list)
    line_rate_gbit_s: float | None = None
    budget_s: float = 0.0

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
        text += [f"{f.status.upper()} {f.check}: {f.summary}" for f in found if f.status in (FAIL, UNKNOWN, SKIP)]
        text += [f"ccdiag: measuring stopped: {x}" for x in incomplete]
        ft = _fault_text(outcome)
        if ft:
            text.append(ft)
        extra["incomplete"] = incomplete
        _emit(_doc("bench.pairs", outcome, found, code, **extra), self.as_json, "\n".join(text))
        return code

    @staticmethod
    def _verdict(found: list[Finding], outcome, incomplete) -> int:
        if any(f.status == FAIL for f in found):
            return int(ExitCode.FAIL)
        # judged: MPI's matrix held to something (the per-interface matrices only add to it)
        judged = any(f.status in (PASS, WARN) and not f.check.startswith("cluster.iface_") for f in found)
        if outcome.missing or outcome.errors or incomplete or not judged:
            return int(ExitCode.UNEVALUATED)
        return int(ExitCode.OK)

    def _matrix_part(self, results: dict, res0: dict, idents: dict) -> tuple[list[Finding], dict, list[str]]:
        hosts = res0["hosts"]
        if len(hosts) < 2:
            f = Finding(check="cluster.pairs", status=SKIP, component=Component(kind="node", name=hosts[0] if hosts else "?"),
                        summary=f"every rank runs on one host ({', '.join(hosts)}): no pair of hosts to measure",
                        remedy="run one rank per host across hosts (mpirun --map-by ppr:1:node, srun --ntasks-per-node=1)")
            return [f], {"hosts": hosts}, []
        matrix = pm.merge_matrix(results, hosts)
        label = link_label(results)
        found, cls = self._judge(matrix, hosts, label, results, idents)
        missing = missing_pairs(matrix, hosts)
        rec = ordermod.recommend(matrix, hosts, cls["slow_hosts"]) if not missing else None
        extra = {"hosts": hosts, "iface": label, "size_bytes": self.size_bytes, "rounds": res0["rounds"],
                 "matrix_gbyte_s": matrix, "classification": cls, "ring_order": rec, "missing_pairs": missing,
                 "sizes_used_bytes": {res.get("host"): res.get("size_bytes") for res in results.values()
                                      if res and res.get("leader")},
                 "retests": retests(results)}
        text = [pm.format_matrix(matrix, hosts, label, self.size_bytes, len(res0["rounds"]))]
        if extra["retests"]:
            text.append(format_retests(extra["retests"]))
        if missing:
            text.append(f"# not measured (the run was cut short): {', '.join(missing)}")
        found += self._ifaces(results, hosts, res0, extra, text)
        if rec is not None:
            text.append(ordermod.format_recommendation(rec))
            self._hostfiles(rec, res0, extra, text)
        return found, extra, text

    def _judge(self, matrix, hosts: list[str], label: str, results: dict, idents: dict) -> tuple[list, dict]:
        """Absolute findings, then relative ones for pairs not already named; and the classification."""
        cls = pm.classify(matrix, hosts, self.margin)
        links, speeds, limits = {}, {}, {}
        for r, res in results.items():
            if res and res.get("leader"):
                links[res.get("host")] = res.get("links") or {}
                speeds[res.get("host")] = (idents.get(r) or {}).get("speeds") or {}
                limits[res.get("host")] = flow_limit((idents.get(r) or {}).get("provider"))
        cap = capability.path_capability(hosts, links, speeds, self.line_rate_gbit_s,
                                         {h: lim.gbit_s for h, lim in limits.items() if lim})
        line = capability.path_capability(hosts, links, speeds, self.line_rate_gbit_s)
        # a cloud's flow limit below some path's line rate is said in each finding it shapes
        note = next((lim.source for lim in limits.values() if lim), None) if cap != line else None
        absolute, named = capability.judge(matrix, cap, hosts, cls["slow_hosts"], label, note)
        rel = pm.findings(cls, hosts, label, self.margin)
        idx = {h: i for i, h in enumerate(hosts)}
        keep = []
        for f in rel:
            d = f.details
            if f.check == "cluster.link_slow" and (min(idx[d["a"]], idx[d["b"]]), max(idx[d["a"]], idx[d["b"]])) in named:
                continue  # the absolute finding names this link already
            if (f.status in (PASS, UNKNOWN) and len(hosts) < 3) or (f.status == PASS and absolute):
                continue  # two hosts have no fleet to compare with; an absolute finding speaks instead
            keep.append(f)
        if not absolute and len(hosts) < 3:
            keep.append(Finding(check=capability.CHECK_ID, status=PASS if any(any(c) for c in cap) else UNKNOWN,
                                component=Component(kind="node", name="all hosts", device=label),
                                summary=("both directions within their path's line rate" if any(any(c) for c in cap)
                                         else "two hosts and no known line rate: nothing to compare the figure with; "
                                              "give --line-rate-gbit-s")))
        elif not absolute:
            keep.append(Finding(check=capability.CHECK_ID, status=PASS,
                                component=Component(kind="node", name="all hosts", device=label),
                                summary="every pair within its path's line rate"))
        return absolute + keep, cls

    def _ifaces(self, results: dict, hosts: list[str], res0: dict, extra: dict, text: list[str]) -> list[Finding]:
        found, nets = [], []
        for mat in pm.iface_matrices(results, hosts):
            icls, ifs = pm.iface_findings(mat, self.margin)
            # two hosts on a subnet have no fleet to compare with: their "within the median" is no verdict
            found += [f for f in ifs if not (f.status in (PASS, UNKNOWN) and len(mat["hosts"]) < 3)]
            nets.append({"net": mat["net"], "iface": mat["label"], "hosts": mat["hosts"], "ifaces": mat["ifaces"],
                         "matrix_mbyte_s": [[None if v is None else round(v * 1000, 3) for v in row]
                                            for row in mat["matrix_gbyte_s"]],
                         "classification": icls,
                         "pairs": [{k: r.get(k) for k in ("src_host", "dst_host", "src_iface", "dst_iface",
                                                          "src_addr", "dst_addr", "bytes", "mbyte_s", "error",
                                                          "first_mbyte_s", "retest_mbyte_s", "first_error")
                                    if k in r} for r in mat["rows"]]})
            text.append(pm.format_matrix(mat["matrix_gbyte_s"], mat["hosts"], f"{mat['label']} ({mat['net']}, TCP)",
                                         self.size_bytes, len(res0["rounds"])))
            failed = pm.format_iface_rows(mat["rows"])
            if failed:
                text.append(failed)
        cands = {res.get("host"): res.get("candidates", []) for res in results.values() if res.get("leader")}
        extra["ifaces"] = {"only": self.only_ifaces, "candidates": cands, "networks": nets}
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
