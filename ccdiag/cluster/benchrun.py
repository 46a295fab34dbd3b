"""The two benchmark runs (allreduce, pairs) from rank bodies to rank 0's report.

Why separate from the click commands: the commands only parse options; this module is what
``bench/bench_allreduce.py`` and the tests reach through the CLI, and it is the one place where
per-rank raw results become tables, findings, a ring order and an exit code.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from ccdiag import __version__
from ccdiag.cluster import hops as hopmod
from ccdiag.cluster import verdict
from ccdiag.cluster.runner import RankOutcome, run_ranks
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Finding

if TYPE_CHECKING:
    from ccdiag.cluster.mpictx import Deadline


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


def _hop_judgement(trows: list[dict], margin: float, outcome: RankOutcome,
                   line_rate_gbit_s: float | None) -> tuple[float, list[Finding]]:
    """One judgement of the ring's hops: relative (the ring's median; between two hosts, the other
    direction) always, the line rate where one is known; a hop the line rate fails keeps that
    finding alone (never a PASS beside it); with no rate known for a network hop, one SKIP says so."""
    from ccdiag.cluster.capability import CHECK_ID, judge_hops
    from ccdiag.cluster.flowlimits import flow_limit

    median, relative = hopmod.slow_hops(trows, margin)
    failed = {(f.details.get("src_rank"), f.details.get("dst_rank")) for f in relative if f.status == FAIL}
    rows = [dict(r, relative_fail=(r["src_rank"], r["dst_rank"]) in failed) for r in trows]
    speeds = {r: i.get("speeds") or {} for r, i in outcome.idents().items()}
    limits = {r: flow_limit(i.get("provider")) for r, i in outcome.idents().items()}
    absolute = judge_hops(rows, speeds, line_rate_gbit_s, limits)
    named = {(f.details.get("src_rank"), f.details.get("dst_rank")) for f in absolute}
    found = [f for f in relative if not (f.status == PASS and (f.details.get("src_rank"), f.details.get("dst_rank")) in named)]
    net = [r for r in trows if r["src_host"] != r["dst_host"]]
    unknown = [r for r in net if not ((speeds.get(r["src_rank"]) or {}).get(r["iface"]) or line_rate_gbit_s)]
    ends = {r["src_host"] for r in net} | {r["dst_host"] for r in net}
    if len(ends) == 2 and unknown and not any(f.status == FAIL for f in found + absolute):
        # two hosts, directions that agree, no line rate: a link slow both ways reads the same
        found = [f for f in found if f.status != PASS] + [Finding(
            check=hopmod.CHECK_ID, status=UNKNOWN, component=Component(kind="node", name=", ".join(sorted(ends))),
            summary=(f"the two directions between {' and '.join(sorted(ends))} agree, but with two hosts and no line "
                     f"rate known a link slow both ways reads the same (a one-way shaper slows the other way too)"),
            remedy="give --line-rate-gbit-s, or run across three or more hosts")]
    if unknown:
        found.append(Finding(
            check=CHECK_ID, status=SKIP, component=Component(kind="node", name="all hosts"),
            summary=(f"no line rate known for {len(unknown)} of {len(net)} network hop(s) (virtual interfaces report "
                     f"none): they were judged against each other only"),
            remedy="give --line-rate-gbit-s to also hold every hop to the line rate"))
    return median, found + absolute


def _hopcheck_findings(every: dict, outcome: RankOutcome, n: int) -> list[Finding]:
    """The hops that did not carry the check's small and large messages (:mod:`.hopcheck`), as
    findings on the hop or the host (:mod:`.transfers`)."""
    from ccdiag.cluster import hopcheck, transfers

    idents = outcome.idents()
    hosts = {r: (i or {}).get("host", f"rank {r}") for r, i in idents.items()}
    for r in range(n):
        hosts.setdefault(r, f"rank {r}")
    failed, ok = hopcheck.failed_hops(every, hosts, n)
    order = list(dict.fromkeys(hosts[r] for r in range(n)))
    links = {res.get("link_right") for res in outcome.results().values() if res} - {None}
    label = links.pop() if len(links) == 1 else "the ring's links"
    mtus: dict[str, int | None] = {str((i or {}).get("host")): ((i or {}).get("mtus") or {}).get(label)
                                   for i in idents.values()}
    found = transfers.findings(failed, ok, order, label, mtus)
    return [dataclasses.replace(f, check=f.check.replace("cluster.transfer_failed", "cluster.ring_hop_failed"))
            for f in found]


def allreduce(sizes: list[int], iters: int, warmup: int, budget_s: float, as_json: bool,
              hostfile_out: str | None, margin: float, device: str, segment_bytes: int,
              line_rate_gbit_s: float | None = None) -> int:
    from ccdiag.cluster import hopcheck
    from ccdiag.cluster.sweep import SweepConfig, format_table, hop_records, merge, run_sweep

    cfg = SweepConfig(sizes_bytes=sizes, iters=iters, warmup=warmup, device=device, segment_bytes=segment_bytes)
    # what rank 0 has so far, for the watchdog's report of a run stuck in MPI_Allreduce
    progress: dict = {}

    def body(comm, work: Deadline, ident: dict) -> dict:  # comm: an mpi4py communicator (untyped)
        from ccdiag.cluster.mpictx import right_neighbour_ident
        from ccdiag.cluster.route import link_to

        right = right_neighbour_ident(comm, ident, work)
        mine, every, go = hopcheck.run(comm, work)
        progress.update(hopcheck=every, size=comm.size)
        res: dict = {"hopcheck": mine, "link_right": link_to(ident, right), "right_host": right.get("host")}
        if not go:
            res["skipped"] = "a hop of the ring did not carry the check's messages: the sweep would wait on it"
            return res
        progress["sweep"] = res
        run_sweep(comm, cfg, work, reserve_s=0.02 * budget_s, out=res)
        return res

    def partial() -> str:
        """The watchdog's report: the hop check, and the sizes rank 0 finished, before the abort."""
        sweep = progress.get("sweep") or {}
        done = sorted(sweep.get("sizes") or {})
        lines = [f"# the run did not finish within its budget of {budget_s:g} s; what rank 0 has:"]
        every = progress.get("hopcheck")
        if every is not None:
            lines.append(f"# ring hop check: {len(every)} of {progress.get('size')} ranks answered, every hop carried "
                         f"a {hopcheck.LARGE_BYTES}-byte message" if all(v.get('large_in') for v in every.values())
                         else "# ring hop check: some hop did not carry its messages")
        for size in done:
            algos = sweep["sizes"][size]
            cells = ", ".join(f"{a} {v['time_s'] * 1e6:.1f} us" for a, v in algos.items() if isinstance(v, dict))
            lines.append(f"# {size} bytes done on rank 0: {cells}")
        stuck = [s for s in cfg.sizes_bytes if s not in done]
        if stuck:
            lines.append(f"# stopped at {stuck[0]} bytes (a blocking MPI_Allreduce or a rank that stopped answering); "
                         f"not measured: {', '.join(map(str, stuck))}")
        return "\n".join(lines)

    def report(outcome: RankOutcome) -> int:
        results = outcome.results()
        n = outcome.size
        findings: list[Finding] = []
        every = progress.get("hopcheck") or {}
        findings += _hopcheck_findings(every, outcome, n)
        rows = merge(results, n) if results else []
        hop_doc = None
        hop_text = ""
        size, recs = hop_records(results)
        if recs and len(recs) == n and n > 1:
            links = {r: res.get("link_right") or "unknown" for r, res in results.items()}
            trows = hopmod.hop_table(recs, outcome.idents(), n, lambda s, d: links.get(s.get("rank"), "unknown"))
            median, hop_findings = _hop_judgement(trows, margin, outcome, line_rate_gbit_s)
            findings += hop_findings
            hop_doc = {"size_bytes": size, "median_gbyte_s": median, "margin": margin, "rows": trows}
            hop_text = hopmod.format_hops(trows, median, margin)
        stuck = _stuck_transfers(results, outcome, n)
        findings += stuck
        incomplete = [f"rank {r}: {res['incomplete']}" for r, res in sorted(results.items()) if res.get("incomplete")]
        skipped_sweep = any(res.get("skipped") for res in results.values())
        code = _verdict(findings, outcome, bool(incomplete) or skipped_sweep)
        skipped = sorted({s for d in results.values() for s in d.get("skipped_sizes", [])})
        notes = sorted({x for d in results.values() for x in d.get("notes", [])})
        if hostfile_out:
            from ccdiag.cluster.order import write_hostfiles

            idents = outcome.idents()
            hosts = [idents[r].get("host", "?") for r in sorted(idents)]
            write_hostfiles(hostfile_out, hosts, note="current rank order (run `pairs` for a recommended order)")
        doc = _doc("bench.allreduce", outcome, findings, code, sizes=rows, hops=hop_doc,
                   skipped_sizes=skipped, notes=notes, hopcheck={str(k): v for k, v in sorted(every.items())},
                   incomplete=incomplete,
                   config={"iters": iters, "warmup": warmup, "budget_s": budget_s, "device": device,
                           "segment_bytes": segment_bytes, "ranks": n,
                           "hopcheck_share_s": hopcheck.share_s(budget_s)})
        text = [format_table(rows, n)] if rows else []
        if skipped_sweep:
            text.append("# the sweep was left out: a hop of the ring did not carry the check's messages (below)")
        if skipped:
            text.append(f"# sizes left out to stay within the budget of {budget_s:g} s: "
                        f"{', '.join(map(str, skipped))}")
        text += [f"# {x}" for x in notes]
        if hop_text:
            text.append(hop_text)
        for f in findings:
            if f.status in (FAIL, WARN, UNKNOWN, SKIP):
                text.append(f"{f.status.upper()} {f.check}: {f.summary}")
        text += [f"ccdiag: measuring stopped: {x}" for x in incomplete]
        ft = _fault_text(outcome)
        if ft:
            text.append(ft)
        _emit(doc, as_json, "\n".join(text))
        return code

    return run_ranks(budget_s, body, report, on_expire=partial)


#: the phases of the ring, in order: a rank in an earlier one than the rest is behind them
RING_PHASES = ("ring reduce-scatter", "ring send", "ring allgather")


def _laggard(results: dict, waiting: dict[int, list[int]]) -> int | None:
    """In a cycle of waits (every waiting rank waits on another waiting rank, none on each other),
    the one rank in an earlier phase of the ring than all the others, if there is exactly one."""
    if len(waiting) < 3 or any(not set(on) <= set(waiting) for on in waiting.values()):
        return None
    if any(r in waiting.get(src, []) for r, on in waiting.items() for src in on):
        return None

    def phase(r: int) -> int:
        text = str(results[r].get("incomplete") or "")
        return next((i for i, p in enumerate(RING_PHASES) if p in text), len(RING_PHASES))

    first = min(phase(r) for r in waiting)
    behind = [r for r in waiting if phase(r) == first]
    return behind[0] if len(behind) == 1 and first < len(RING_PHASES) else None


def _stuck_transfers(results: dict, outcome: RankOutcome, n: int) -> list[Finding]:
    """A transfer the sweep waited on past its size's share, as a FAIL: two ranks each waiting on
    the other (their exchange never completed), once; or the end of a chain of waits (rank r waited
    on a rank that was not waiting itself). A rank waiting on one that waits on a third is the
    chain, not a fault of its own."""
    idents = {r: dict(i or {}) for r, i in outcome.idents().items()}
    for r, res in results.items():  # a rank that never answered is still known to its left neighbour
        if res.get("right_host") and "host" not in idents.get((r + 1) % n, {}):
            idents[(r + 1) % n] = {"host": res["right_host"]}
    # a rank whose deadline passed in a barrier (waiting on no peer) had finished its transfers: it
    # ends a chain of waits, it is not one
    waiting = {r: res["waiting_on"] for r, res in results.items() if res.get("incomplete") and res.get("waiting_on")}
    out = []
    lag = _laggard(results, waiting)
    if lag is not None:
        # every rank waits on another in a ring of waits: the one behind the others (still reducing
        # while they gather) waits on the transfer that never came
        waiting = {lag: waiting[lag]}
    for r, on in sorted(waiting.items()):
        for src in on:
            mutual = r in waiting.get(src, [])
            if mutual and src < r:
                continue  # named once, from the lower rank
            if src in waiting and not mutual:
                continue  # the chain goes on: src waited too; its own wait is the one named
            lo, hi = (min(src, r), max(src, r)) if mutual else (src, r)
            a = (idents.get(lo) or {}).get("host", f"rank {lo}")
            b = (idents.get(hi) or {}).get("host", f"rank {hi}")
            out.append(Finding(
                check="cluster.ring_transfer_stuck", status=FAIL,
                component=Component(kind="host_link", name=f"{a} -> {b}", peer=b),
                summary=(f"ranks {lo} ({a}) and {hi} ({b}) each waited on the other past their size's share of "
                         f"the budget: a transfer between them never completed ({results[r]['incomplete']})"
                         if mutual else
                         f"rank {hi} ({b}) waited on rank {lo} ({a}) past its size's share of the budget: "
                         f"{results[r]['incomplete']}"),
                remedy=f"check the link between {a} and {b} and that both ranks run; `ccdiag bench pairs` names "
                       f"a slow host or link",
                details={"src_rank": lo, "dst_rank": hi, "src_host": a, "dst_host": b, "mutual": mutual}))
    return out
