"""``ccdiag cluster check``: the node check on every host of an MPI job, one cluster report.

Thin: options, then :mod:`ccdiag.cluster.gather` inside :func:`ccdiag.cluster.runner.run_ranks`
(deadlines, silent ranks, Abort only after the report). Run it as ranks: ``mpirun -np N
--map-by node ccdiag cluster check`` or ``srun --ntasks-per-node=1 ccdiag cluster check``.
Exit: 1 a host fails or differs from the majority (whatever else could not be evaluated), else 3 a
rank did not answer or a host could not be evaluated, else 0 every host passes and agrees
(:mod:`ccdiag.cluster.verdict`).
"""

from __future__ import annotations

import json
import sys

import click

from ccdiag.commands.examples import epilog


def _require_writable(path: str) -> None:
    """``--reports-dir`` that cannot be written is an input error (exit 2) before any rank works,
    never a run whose reports silently went nowhere."""
    import os
    import tempfile

    from ccdiag.core.errors import InputError

    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".ccdiag-write-test-"):
            pass
    except OSError as exc:
        raise InputError(f"--reports-dir {path}: cannot write there: {exc.strerror or exc}") from None


@click.group(name="cluster", epilog=epilog("cluster"))
def group():
    """Across hosts, as MPI ranks under mpirun or srun."""


@group.command(name="check", epilog=epilog("cluster check"))
@click.option("--timeout", type=click.FloatRange(1, 3600), default=30, show_default=True, metavar="S",
              help="Deadline of each host's node check.")
@click.option("--budget", type=click.FloatRange(2, 3600), default=60, show_default=True, metavar="S",
              help="Wall-clock budget of the whole cluster run; a rank silent by then is named.")
@click.option("--replay", metavar="PATTERN",
              help="Each host reads a snapshot instead of itself; {host} and {rank} are replaced.")
@click.option("--policy", "policy_file", metavar="FILE", help="Hold every host to this policy.")
@click.option("--reports-dir", metavar="DIR", help="Each host also writes its full JSON report to DIR/<host>.json.")
@click.option("--json", "as_json", is_flag=True, help="Rank 0 prints one JSON cluster report.")
def check(timeout, budget, replay, policy_file, reports_dir, as_json):
    """Every host's check, gathered on rank 0: which hosts fail and why, and what differs between them."""
    from ccdiag import __version__
    from ccdiag.cluster import gather, verdict
    from ccdiag.cluster.runner import run_ranks
    from ccdiag.core.findings import STATUS_RANK
    from ccdiag.report.document import findings_section

    if reports_dir:
        _require_writable(reports_dir)

    def body(comm, work, ident):
        return gather.check_body(comm, work, ident, replay, timeout, reports_dir, policy_file)

    def report(outcome) -> int:
        summaries = outcome.results()
        idents = outcome.idents()
        for r, h in (summaries.get(0) or {}).get("rank_hosts", {}).items():
            idents.setdefault(r, {"host": h})
        findings = gather.cluster_findings(summaries, outcome.missing, idents)
        findings.sort(key=lambda f: (STATUS_RANK.get(f.status, 9), f.check, f.component.name))
        code = gather.exit_code(findings, bool(outcome.missing or outcome.errors))
        hosts = {s["host"]: {k: v for k, v in s.items() if k not in ("leader", "rank_hosts")}
                 for s in summaries.values() if s and s.get("leader")}
        doc = {"kind": "cluster.check", "tool": {"name": "ccdiag", "version": __version__},
               "ranks": outcome.to_json(), "faults": outcome.fault_lines(), "hosts": hosts,
               "findings": findings_section(findings),
               "verdict": {"exit_code": code, "failed_hosts": sorted(h for h, s in hosts.items() if s.get("exit_code"))}}
        if as_json:
            sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
        else:
            bad = [f for f in findings if f.status != "pass"]
            n_ok = sum(1 for s in hosts.values() if s.get("exit_code") == 0)
            lines = [f"{verdict.word(code)}: {len(hosts)} hosts checked over {outcome.size} ranks, {n_ok} pass, "
                     f"{len(bad)} problem(s)"]
            for f in bad:
                lines.append(f"  {f.status.upper():7} {f.check}: {f.summary}")
                for x in f.details.get("failures", [])[:5] if f.check == "cluster.host_check" else []:
                    lines.append(f"          - {x}")
            lines += [f"  {x}" for x in outcome.fault_lines() if not x.startswith("rank ") or "did not" not in x]
            sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        return code

    return run_ranks(budget, body, report)
