"""Rank 0's report of ``ccdiag bench locate``: what was named, how many rounds and tests it took, the
layout used, and the ring order the layout recommends.

The findings are ``bench pairs``' own kinds: ``cluster.host_slow`` (a host slow with every peer it
was measured with, confirmed against known-good hosts) and ``cluster.link_slow`` (a pair slow while
both hosts are fine elsewhere; or a group's uplinks, when every slow pair crosses out of one group
that is fine inside), ``cluster.pairs`` for a pass or for what could not be judged. The exit codes
are pairs': 1 when something failed; 3 when nothing failed but a rank went silent, the budget cut
the search short, or a suspect was left unconfirmed; 0 when every host was screened and nothing
was slow.
"""

from __future__ import annotations

from ccdiag.cluster import layout as layoutmod
from ccdiag.cluster.locate import DIRECT, Outcome
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, Component, Evidence, Finding

SOURCE = "ccdiag bench locate"


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f} MB/s"


def findings(out: Outcome, hosts: list[str], margin: float, group_kind: str = "group") -> list[Finding]:
    ref = out.reference_gbyte_s.get(DIRECT)
    fl = out.floor_gbyte_s.get(DIRECT)
    effort = f"{out.rounds} rounds, {out.tests} tests"
    found: list[Finding] = []
    if not out.judged:
        return [Finding(check="cluster.pairs", status=UNKNOWN, component=Component(kind="node", name="all hosts"),
                        summary=f"no verdict: {out.why_not or 'nothing was measured'} ({effort})",
                        remedy="run over at least three hosts with one rank each, within a budget that holds the "
                               "screen (two rounds)")]
    for h in out.slow_hosts:
        mine = sorted((v, p) for p, v in out.pair_gbyte_s.items() if h in p)
        med = mine[len(mine) // 2][0] if mine else None
        peers = [p[0] if p[1] == h else p[1] for _, p in mine]
        found.append(Finding(
            check="cluster.host_slow", status=FAIL, component=Component(kind="node", name=h),
            summary=(f"host {h} is slow with every peer it was measured with ({len(mine)}: {', '.join(peers[:6])}"
                     f"{', ...' if len(peers) > 6 else ''}), known-good hosts included: median {_mb(med)} vs "
                     f"{_mb(ref)} for the fleet ({effort})"),
            evidence=tuple(Evidence(f"{p[0]}<->{p[1]}", round(v, 6), SOURCE) for v, p in mine[:8])
            + (Evidence("fleet reference", round(ref or 0.0, 6), "median of the hosts' medians in the screen"),),
            expected=f">= {_mb(fl)} ({1 - margin:.0%} of the fleet reference)", expected_source="locate screen and --margin",
            remedy=f"look at {h} itself: its NIC (speed, errors, shaping), its cable and switch port, its CPU load; "
                   f"drain it or run without it (the ring order below leaves it out)",
            details={"host": h, "median_gbyte_s": med, "reference_gbyte_s": ref,
                     "pairs": [{"a": p[0], "b": p[1], "gbyte_s": v} for v, p in mine]}))
    for a, b in out.slow_links:
        v = out.pair_gbyte_s.get((a, b), out.pair_gbyte_s.get((b, a)))
        found.append(Finding(
            check="cluster.link_slow", status=FAIL,
            component=Component(kind="host_link", name=f"{a} <-> {b}", peer=b),
            summary=(f"link {a} <-> {b} is slow while both hosts are fine with their other peers: {_mb(v)} vs "
                     f"{_mb(ref)}, slow each time it was measured ({effort})"),
            evidence=(Evidence(f"{a}<->{b}", round(v or 0.0, 6), SOURCE),
                      Evidence("fleet reference", round(ref or 0.0, 6), "median of the hosts' medians in the screen")),
            expected=f">= {_mb(fl)}", expected_source="locate screen and --margin",
            remedy=f"check the path between {a} and {b} (routing, a switch or uplink between them, per-flow "
                   f"shaping); put them apart in the ring order",
            details={"a": a, "b": b, "gbyte_s": v, "reference_gbyte_s": ref}))
    for name, pairs in out.slow_uplinks.items():
        figs = [(out.pair_gbyte_s.get(p, out.pair_gbyte_s.get((p[1], p[0]))), p) for p in pairs]
        between = " <-> " in name
        what = (f"the path between {group_kind}s {name}" if between else f"the uplinks of {group_kind} {name}")
        found.append(Finding(
            check="cluster.link_slow", status=FAIL,
            component=Component(kind="fabric_link", name=f"{name} uplinks" if not between else name),
            summary=(f"{what} are slow: {len(pairs)} pairs crossing out of it are slow alone "
                     f"({', '.join(f'{p[0]}<->{p[1]} {_mb(v)}' for v, p in figs[:4])}) while its hosts are fine inside "
                     f"it, vs {_mb(ref)} ({effort})"),
            evidence=tuple(Evidence(f"{p[0]}<->{p[1]}", round(v or 0.0, 6), SOURCE) for v, p in figs[:8]),
            expected=f">= {_mb(fl)}", expected_source="locate screen and --margin",
            remedy=(f"check the links from {name} up to the spines (errors, speed, a link down, ECMP), and the spine "
                    f"ports they land on; a flow keeps its path, so only the flows hashed onto the bad one are slow"),
            details={"group": name, "between_groups": between, "pairs": [{"a": p[0], "b": p[1], "gbyte_s": v}
                                                                          for v, p in figs]}))
    if out.unconfirmed:
        found.append(Finding(
            check="cluster.pairs", status=UNKNOWN, component=Component(kind="node", name=", ".join(out.unconfirmed[:8])),
            summary=(f"{len(out.unconfirmed)} suspect host(s) not confirmed: {', '.join(out.unconfirmed[:8])}"
                     f"{' ...' if len(out.unconfirmed) > 8 else ''}: "
                     + (out.stopped or "no known-good host to measure them against")),
            remedy="run again with a larger --budget or --max-tests, or measure them with `ccdiag bench pairs`",
            details={"hosts": out.unconfirmed}))
    if not found:
        n = len(hosts)
        found.append(Finding(
            check="cluster.pairs", status=PASS, component=Component(kind="node", name="all hosts"),
            summary=(f"no slow host or link among {n} hosts: every screened pair within {margin:.0%} of "
                     f"{_mb(ref)} ({effort}, {out.host_tests} host-tests; every pair would be {n * (n - 1) // 2})")))
    return found


def verdict(found: list[Finding], outcome, incomplete: bool) -> int:
    if any(f.status == FAIL for f in found):
        return int(ExitCode.FAIL)
    if outcome.missing or outcome.errors or incomplete or any(f.status == UNKNOWN for f in found):
        return int(ExitCode.UNEVALUATED)
    return int(ExitCode.OK)


def format_rounds(out: Outcome) -> str:
    lines = [f"# locate: {out.rounds} rounds, {out.tests} tests ({out.host_tests} host-tests)"]
    for e in out.log:
        whys: dict[str, int] = {}
        for t in e["tests"]:
            whys[t["why"]] = whys.get(t["why"], 0) + 1
        kinds = ", ".join(f"{n} {w}" for w, n in whys.items())
        slow = e.get("slow_pairs") or []
        lines.append(f"#   round {e['round']}: {kinds}; slow pairs so far: {len(slow)}")
    if out.dismissed:
        lines.append(f"# {out.dismissed} pairs slow only in the rings across groups were fine alone in their group's "
                     f"retests: the screen's load, not a fault")
    return "\n".join(lines)


class LocateReport:
    def __init__(self, cfg: dict):
        self.cfg = cfg

    def report(self, outcome) -> int:
        from ccdiag.cluster.benchrun import _doc, _emit, _fault_text

        results = outcome.results()
        res0 = results.get(0) or {}
        incomplete = [f"rank {r} ({res.get('host')}): {res['incomplete']}" for r, res in sorted(results.items())
                      if res and res.get("incomplete")]
        out: Outcome | None = res0.get("outcome")
        search = res0.get("search") or {}
        hosts = res0.get("hosts") or []
        text: list[str] = []
        extra: dict = {"config": {k: v for k, v in self.cfg.items() if k != "layout_obj"}}
        if out is None:
            found = [Finding(check="cluster.pairs", status=UNKNOWN, component=Component(kind="node", name="all hosts"),
                             summary="no verdict: the search never started (see the faults below)")]
        else:
            placement = search.get("placement")
            kind = placement.kind if placement is not None else "group"
            found = findings(out, hosts, self.cfg["margin"], kind)
            extra.update(hosts=hosts, search=out.to_json(), layout=self._layout_doc(search, hosts),
                         pairs=[{"a": a, "b": b, "gbyte_s": v} for (a, b), v in sorted(out.pair_gbyte_s.items())])
            text.append(self._layout_text(search, hosts))
            text.append(format_rounds(out))
            if search.get("cut"):
                text.append(f"# {search['cut']} timed runs were cut at their share of the budget: their hops count at "
                            f"most their bytes over that time")
            extra["cut_runs"] = search.get("cut", 0)
            rec = self._ring_order(search, hosts, out.slow_hosts)
            if rec:
                extra["ring_order"] = rec
                text.append(layoutmod.format_ring_order(rec))
                text += self._hints(search, rec, res0, extra)
            if len(hosts) < 2:
                found = [Finding(check="cluster.pairs", status=UNKNOWN, component=Component(kind="node", name="all hosts"),
                                 summary=f"every rank runs on one host ({', '.join(hosts)}): no pair of hosts to test",
                                 remedy="run one rank per host (mpirun --map-by ppr:1:node, srun --ntasks-per-node=1)")]
        code = verdict(found, outcome, bool(incomplete))
        text += [f"{f.status.upper()} {f.check}: {f.summary}" for f in found]
        text += [f"ccdiag: measuring stopped: {x}" for x in incomplete]
        ft = _fault_text(outcome)
        if ft:
            text.append(ft)
        extra["incomplete"] = incomplete
        _emit(_doc("bench.locate", outcome, found, code, **extra), self.cfg["as_json"], "\n".join(t for t in text if t))
        return code

    @staticmethod
    def _layout_doc(search: dict, hosts: list[str]) -> dict:
        lay, pl = search.get("layout"), search.get("placement")
        groups = search.get("groups") or []
        loc_names = search.get("group_names") or []
        doc = {"format": getattr(lay, "fmt", None) or "none (⌈√N⌉ groups of consecutive ranks)",
               "sources": list(getattr(lay, "sources", ()) or ()), "notes": list(getattr(lay, "notes", ()) or ())
               + list(search.get("notes") or []), "screening_groups": groups, "group_names": loc_names}
        if pl is not None:
            doc.update(group_kind=pl.kind, groups={g.name: list(g.hosts) for g in pl.groups},
                       unplaced=list(pl.unplaced), matched={k: v for k, v in pl.layout_name.items() if k != v})
        return doc

    @staticmethod
    def _layout_text(search: dict, hosts: list[str]) -> str:
        lay, pl = search.get("layout"), search.get("placement")
        groups = search.get("groups") or []
        if pl is None or lay is None:
            lines = [f"# no layout: {len(groups)} groups of consecutive ranks (⌈√N⌉ for {len(hosts)} hosts)"]
        else:
            lines = [f"# layout: {lay.fmt} from {', '.join(lay.sources)}: {len(pl.groups)} {pl.kind} groups, "
                     f"{len(hosts) - len(pl.unplaced)} of {len(hosts)} hosts placed"]
            if pl.unplaced:
                lines.append(f"# not in the layout (screened as a group of their own): {', '.join(pl.unplaced[:10])}")
        lines += [f"# {n}" for n in list(getattr(lay, "notes", ()) or ())[:6] + list(search.get("notes") or [])]
        return "\n".join(lines)

    @staticmethod
    def _ring_order(search: dict, hosts: list[str], slow: list[str]) -> dict | None:
        pl = search.get("placement")
        if pl is None or len(hosts) < 3:
            return None
        return layoutmod.ring_order(pl, hosts, slow)

    def _hints(self, search: dict, rec: dict, res0: dict, extra: dict) -> list[str]:
        lines = ["# NCCL chains the hosts of a job in rank order, so the hostfile's order is the ring's order across "
                 "hosts (NCCL_TOPO_FILE describes one node's PCIe and NVLink and has no say between hosts)"]
        lay = search.get("layout")
        if lay is not None and lay.fmt == "slurm-tree":
            lines.append("# Slurm: a job that fits one leaf switch can ask for one (sbatch/srun --switches=1)")
        if lay is not None and lay.fmt == "slurm-block":
            lines.append("# Slurm: a job can ask for whole blocks (sbatch/srun --segment=<block size>)")
        path = self.cfg.get("hostfile_out")
        if path:
            from ccdiag.cluster.order import write_hostfiles

            order = rec.get("without_slow_hosts", {}).get("order") or rec["order"]
            written = write_hostfiles(path, order, slots=res0.get("slots") or {},
                                      note=f"ring order from the layout: {rec['crossings']} hops between groups")
            extra["hostfiles"] = written
            lines.append(f"# hostfiles written: {', '.join(written)} (mpirun --hostfile; SLURM_HOSTFILE with srun "
                         f"--distribution=arbitrary)")
        return lines

