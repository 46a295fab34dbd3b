"""``ccdiag compare REPORT...``: outliers among many hosts' JSON reports; the diff of two.

Thin: options, then :mod:`ccdiag.cluster.compare`. Reports are ``ccdiag check --json`` documents
(files or directories of ``*.json``, e.g. ``ccdiag cluster check --reports-dir``), read one at a
time. Exit: 1 outliers, versions apart within a machine type (``--policy``: from its
known-good set) or differences, whatever else is wrong; else 2 bad input (fewer than two
readable reports, or an unreadable file: named, the rest still compared); else 3 a report without
GPU data (its GPUs were not compared) or nothing the reports share; else 0 nothing stands out.
"""

from __future__ import annotations

import json
import sys

import click

from ccdiag.commands.examples import epilog
from ccdiag.core.errors import InputError
from ccdiag.core.exitcodes import ExitCode


@click.command(name="compare", epilog=epilog("compare"))
@click.argument("reports", nargs=-1, required=True, metavar="REPORT...")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option("--z", "z", type=click.FloatRange(1, 1000), default=5.0, show_default=True,
              help="A number this many robust deviations (1.4826 x MAD, at least the metric's tolerance) "
                   "from the fleet median is an outlier.")
@click.option("--diff/--no-diff", "force_diff", default=None,
              help="Two reports: a diff (the default for exactly two); more: outliers.")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True,
              help="Text output: at most this many outlier lines.")
@click.option("--policy", "policy_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Hold each machine type to its known-good versions in this policy ([[known_good]] tables, "
                   "from `ccdiag policy init`) instead of its hosts' majority.")
def command(reports, as_json, z, force_diff, limit, policy_file):
    """Name the hosts whose reports stand out from the fleet (no baseline file needed), and per machine
    type every host whose versions (driver, CUDA, VBIOS, ConnectX firmware, NCCL, fabric manager, kernel,
    nccl.conf) differ, with both values."""
    from ccdiag.cluster import compare
    from ccdiag.cluster.drift import DriftFleet

    paths = list(compare.report_paths(reports))
    if not paths:
        raise InputError("no reports: the directories given hold no *.json files")
    if (force_diff is None and len(paths) == 2) or force_diff:
        return _diff(compare, paths, as_json, limit)
    drift = DriftFleet(_known_good(policy_file))
    fleet = compare.scan(paths, also=drift.add_report)
    if fleet.hosts < 2:
        for u in fleet.unreadable:
            click.echo(f"ccdiag: unreadable: {u}", err=True)
        raise InputError(f"need at least two readable reports, got {fleet.hosts}")
    outs = fleet.outliers(z)
    drifts = drift.drifts()
    no_gpu = fleet.without_gpu_data()
    code = _code(any(o.get("gating", True) for o in outs) or bool(drifts), bool(fleet.unreadable),
                 not fleet.keys or bool(no_gpu))
    if as_json:
        _emit_json({"kind": "compare.fleet", "reports": fleet.hosts, "keys": len(fleet.keys), "z": z,
                    "unreadable": fleet.unreadable, "outliers": outs, "hosts": _by_host(outs), "drift": drifts,
                    "without_gpu_data": no_gpu, "exit_code": code})
    else:
        from ccdiag.cluster.drift import lines as drift_lines

        sys.stdout.write("\n".join(_fitted(_fleet_lines(fleet, outs, limit, no_gpu) + drift_lines(drifts, limit)))
                         + "\n")
    for u in fleet.unreadable:
        click.echo(f"ccdiag: left out: {u}", err=True)
    return code


def _code(failed: bool, unreadable: bool, unevaluated: bool) -> int:
    """An outlier decides (exit 1) whatever else is wrong, as in every command across hosts
    (:mod:`ccdiag.cluster.verdict`); else an unreadable report is bad input (2, each named); else
    a report whose GPUs were not compared (no NVML data) or nothing compared at all is 3."""
    if failed:
        return int(ExitCode.FAIL)
    if unreadable:
        return int(ExitCode.USAGE)
    return int(ExitCode.UNEVALUATED if unevaluated else ExitCode.OK)


def _known_good(policy_file: str | None) -> tuple:
    if not policy_file:
        return ()
    from ccdiag.inputs.policy import load_policy

    return load_policy(policy_file).known_good


def _by_host(outs: list[dict]) -> dict[str, int]:
    by_host: dict[str, int] = {}
    for o in outs:
        for h in o["hosts"]:
            by_host[h] = by_host.get(h, 0) + 1
    return dict(sorted(by_host.items(), key=lambda kv: (-kv[1], kv[0])))


def _fleet_lines(fleet, outs: list[dict], limit: int, no_gpu: list[str]) -> list[str]:
    by_host = _by_host(outs)
    gating = [o for o in outs if o.get("gating", True)]
    lines = [f"{fleet.hosts} reports, {len(fleet.keys)} facts compared: {len(gating)} outlier(s), "
             f"{len(outs) - len(gating)} momentary reading(s) apart, on {len(by_host)} host(s)"]
    lines += [f"  {h}: {k} outlier(s)" for h, k in list(by_host.items())[:20]]
    for o in outs[:limit]:
        more = f" (+{o['count'] - len(o['hosts'])} more)" if o["count"] > len(o["hosts"]) else ""
        extra = f", robust z {o['robust_z']}" if o.get("robust_z") else ""
        note = "" if o.get("gating", True) else " [a momentary reading: reported, not failing]"
        lines.append(f"  {o['key']}: {', '.join(o['hosts'])}{more} has {o['value']!r}; fleet "
                     f"{o['fleet']!r} ({o['kind']}{extra}){note}")
    if len(outs) > limit:
        lines.append(f"  ... {len(outs) - limit} more (--limit, --json)")
    if no_gpu:
        lines.append(f"  no GPU data (NVML probe failed or no driver), GPUs not compared: {', '.join(no_gpu[:20])}"
                     + (f" (+{len(no_gpu) - 20} more)" if len(no_gpu) > 20 else ""))
    lines += [f"  unreadable: {u}" for u in fleet.unreadable]
    return lines


def _diff(compare, paths: list[str], as_json: bool, limit: int) -> int:
    if len(paths) != 2:
        raise InputError(f"--diff needs exactly two reports, got {len(paths)}")
    bad, docs = [], []
    for p in paths:
        try:
            docs.append(compare.load(p))
        except ValueError as exc:
            bad.append(str(exc))
    if bad:
        raise InputError("; ".join(bad))
    a, b = docs
    rows = compare.diff(a, b)
    ha, hb = compare.host_of(a, paths[0]), compare.host_of(b, paths[1])
    # two reports that agree but hold no GPU data compared nothing of their GPUs: never OK
    no_gpu = [h for h, d in ((ha, a), (hb, b)) if compare.flatten(d).get("gpu_data") == "missing"]
    code = _code(bool(rows), False, bool(no_gpu))
    if as_json:
        _emit_json({"kind": "compare.diff", "a": ha, "b": hb, "differences": rows, "without_gpu_data": no_gpu,
                    "exit_code": code})
    else:
        lines = [f"{len(rows)} difference(s) between {ha} (a) and {hb} (b)"]
        lines += [f"  {r['key']}: a={r['a']!r} b={r['b']!r}" for r in rows[:limit]]
        if len(rows) > limit:
            lines.append(f"  ... {len(rows) - limit} more (--limit, --json)")
        if no_gpu:
            lines.append(f"  no GPU data (NVML probe failed or no driver), GPUs not compared: {', '.join(no_gpu)}")
        sys.stdout.write("\n".join(_fitted(lines)) + "\n")
    return code


def _fitted(lines: list[str]) -> list[str]:
    """The text lines wrapped to the terminal (or $COLUMNS, or 80), continuations indented."""
    from ccdiag.core.textfit import text_width, wrap_lines

    return wrap_lines(lines, text_width())


def _emit_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
