"""The two benchmark runs (allreduce, pairs) from rank bodies to rank 0's report.

Why separate from the click commands: the commands only parse options; this module is what
``bench/bench_allreduce.py`` and the tests reach through the CLI, and it is the one place where
per-rank raw results become tables, findings, a ring order and an exit code.
"""

from __future__ import annotations

import json
import sys

from ccdiag import __version__
from ccdiag.cluster import hops as hopmod
from ccdiag.cluster import verdict
from ccdiag.cluster.runner import RankOutcome, run_ranks
from ccdiag.core.findings import FAIL, SKIP, Finding


def _verdict(findings: list[Finding], outcome: RankOutcome, incomplete: bool = False) -> int:
    """A failure decides, whatever else could not be evaluated (:mod:`ccdiag.cluster.verdict`)."""
    return verdict.exit_code(findings, unevaluated=bool(outcome.missing or outcome.errors or incomplete))


def _doc(kind: str, outcome: RankOutcome, findings: list[Finding], code: int, **extra) -> dict:
    from ccdiag.report.document import findings_section

    return {"kind": kind, "tool": {"name": "ccdiag", "version": __version__}, "ranks": outcome.to_json(),
            "faults": outcome.fault_lines(), "findings": findings_section(findings),
            "verdict": {"exit_code": code, "failed": [f.summary for f in findings if f.status == FAIL]}, **extra}


def _emit(doc: dict, as_json: bool, text: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _fault_text(outcome: RankOutcome) -> str:
    lines = outcome.fault_lines()
    return "\n".join(f"ccdiag: {ln}" for ln in lines)


def _absolute_hops(trows: list[dict], relative: list[Finding], outcome: RankOutcome,
                   line_rate_gbit_s: float | None) -> list[Finding]:
    from ccdiag.cluster.capability import judge_hops
    from ccdiag.cluster.flowlimits import flow_limit

    failed = {(f.details.get("src_rank"), f.details.get("dst_rank")) for f in relative if f.status == FAIL}
    rows = [dict(r, relative_fail=(r["src_rank"], r["dst_rank"]) in failed) for r in trows]
    speeds = {r: i.get("speeds") or {} for r, i in outcome.idents().items()}
    limits = {r: flow_limit(i.get("provider")) for r, i in outcome.idents().items()}
    return judge_hops(rows, speeds, line_rate_gbit_s, limits)


def allreduce(sizes: list[int], iters: int, warmup: int, budget_s: float, as_json: bool,
              hostfile_out: str | None, margin: float, device: str, segment_bytes: int,
              line_rate_gbit_s: float | None = None) -> int:
    from ccdiag.cluster.sweep import SweepConfig, format_table, hop_records, merge, run_sweep

    cfg = SweepConfig(sizes_bytes=sizes, iters=iters, warmup=warmup, device=device, segment_bytes=segment_bytes)

    def body(comm, work, ident):
        from ccdiag.cluster.mpictx import right_neighbour_ident
        from ccdiag.cluster.route import link_to

        right = right_neighbour_ident(comm, ident, work)
        res = run_sweep(comm, cfg, work, reserve_s=0.02 * budget_s)
        # the link this rank's hop to the right really takes (its sender side), named here where
        # the kernel's routes are
        res["link_right"] = link_to(ident, right)
        return res

    def report(outcome: RankOutcome) -> int:
        results = outcome.results()
        n = outcome.size
        rows = merge(results, n) if results else []
        findings: list[Finding] = []
        hop_doc = None
        hop_text = ""
        size, recs = hop_records(results)
        if recs and len(recs) == n and n > 1:
            links = {r: res.get("link_right") or "unknown" for r, res in results.items()}
            trows = hopmod.hop_table(recs, outcome.idents(), n, lambda s, d: links.get(s.get("rank"), "unknown"))
            median, findings = hopmod.slow_hops(trows, margin)
            findings += _absolute_hops(trows, findings, outcome, line_rate_gbit_s)
            hop_doc = {"size_bytes": size, "median_gbyte_s": median, "margin": margin, "rows": trows}
            hop_text = hopmod.format_hops(trows, median, margin)
        code = _verdict(findings, outcome)
        skipped = sorted({s for d in results.values() for s in d.get("skipped_sizes", [])})
        notes = sorted({x for d in results.values() for x in d.get("notes", [])})
        if hostfile_out:
            from ccdiag.cluster.order import write_hostfiles

            idents = outcome.idents()
            hosts = [idents[r].get("host", "?") for r in sorted(idents)]
            write_hostfiles(hostfile_out, hosts, note="current rank order (run `pairs` for a recommended order)")
        doc = _doc("bench.allreduce", outcome, findings, code, sizes=rows, hops=hop_doc,
                   skipped_sizes=skipped, notes=notes,
                   config={"iters": iters, "warmup": warmup, "budget_s": budget_s, "device": device,
                           "segment_bytes": segment_bytes, "ranks": n})
        text = [format_table(rows, n)] if rows else []
        if skipped:
            text.append(f"# sizes left out to stay within the budget of {budget_s:g} s: "
                        f"{', '.join(map(str, skipped))}")
        text += [f"# {x}" for x in notes]
        if hop_text:
            text.append(hop_text)
        for f in findings:
            if f.status in (FAIL, SKIP):
                text.append(f"{f.status.upper()} {f.check}: {f.summary}")
        ft = _fault_text(outcome)
        if ft:
            text.append(ft)
        _emit(doc, as_json, "\n".join(text))
        return code

    return run_ranks(budget_s, body, report)
