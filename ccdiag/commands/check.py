"""``ccdiag check``: is this node fit to run a job, and if not, what exactly is broken?

Made to run in a Slurm prolog or ``HealthCheckProgram``: bounded by ``--timeout`` (default 30 s,
inside Slurm's 60 s), one verdict line first, one line per failure, and an exit code scripts can
branch on:

* ``0``: no failure (warnings allowed unless ``--strict``). Also a box with no NVIDIA GPU on its
  PCI bus and no policy expecting one: the GPU checks skip, and skipping is not failing. A problem
  the policy waives (``[[waiver]]``) does not fail the node; a waiver that lapsed raises a warning.
* ``1``: a failure (or, with ``--strict``, a warning). A GPU node without a working driver fails.
* ``2``: bad usage or input (unreadable ``--replay`` snapshot, malformed ``--policy`` or
  ``--env-file``, a ``--gpu`` the node does not have).

``--gpu`` narrows the verdict to one GPU (:mod:`ccdiag.run.gpuselect`): its findings, the bridges
above it, the node-wide findings and the roots these follow from, under the same rule.
* ``3``: no verdict: a probe timed out, a check could not be evaluated, or the deadline came first
  (and nothing had failed; a failure already found still gives ``1``).
"""

from __future__ import annotations

import os
import socket
import sys
import time

import click

from ccdiag.commands.examples import epilog
from ccdiag.run.checkrun import DEFAULT_DEADLINE_S, DEFAULT_WINDOW_S, close_host, evaluate
from ccdiag.commands.snapshot import default_name
from ccdiag.commands.common import bug_report_option, host_options, make_host
from ccdiag.core.errors import InputError
from ccdiag.core.exitcodes import ExitCode
from ccdiag.host.door import HostReadError, RecordingHost
from ccdiag.inputs.envfile import load_env_file
from ccdiag.inputs.policy import load_policy
from ccdiag.report.fallback import json_document, no_verdict, verdict_report, verdict_text
from ccdiag.run.checkrun import QUICK_BENCH_S
from ccdiag.run.deadline import NoGuard, arm
from ccdiag.run.stages import Budget, report_reserve_s



#: above this many GPUs and NICs, check's JSON carries the GPU rows of the all-pairs level matrix
#: only (3,000 NICs make 9 million cells); ``ccdiag topo --json`` always has the whole matrix
CHECK_MATRIX_MAX_ENDS = 512

def _save_failure_snapshot(host: RecordingHost, result, directory: str, env: dict | None,
                           env_source: str | None) -> str:
    """Write what this failing run read to ``directory``; returns the path.

    The NCCL settings judged (from ``--env-file`` when given) are stored as the snapshot's
    environment, so its replay reaches the same verdict."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {directory}: {exc.strerror or exc}") from None
    snap = host.snapshot(window_s=result.window_s, probes={n: r.status for n, r in result.runs.items()},
                         recorded_probes=list(result.runs), verdict=result.status,
                         env_source=env_source or "environment")
    if env is not None:
        snap.environ = dict(env)
    if result.topology is not None:
        # the NCCL settings this node should run with, as judged from what this run read
        from ccdiag.nccl.recommend import recommend

        from ccdiag.nccl.present import JUDGED_PREFIXES

        judged = env if env is not None else {k: v for k, v in host.environ().items() if k.startswith(JUDGED_PREFIXES)}
        snap.meta["nccl"] = recommend(result.topology, result.runs, env=judged,
                                      env_source=env_source or "environment").to_json()
    path = os.path.join(directory, default_name(snap.meta.get("hostname") or socket.gethostname()))
    try:
        snap.save(path)
    except OSError as exc:
        raise InputError(f"cannot write snapshot {path}: {exc.strerror or exc}") from None
    return path


@click.command(name="check", epilog=epilog("check"))
@host_options
@bug_report_option
@click.option("--policy", "policy_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Hold the node to this policy (TOML, from `ccdiag policy init`).")
@click.option("--env-file", "env_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="KEY=VALUE lines (NCCL_* ...) to judge instead of this process's environment.")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=DEFAULT_DEADLINE_S, show_default=True,
              metavar="S", help="Deadline for the whole run; a probe still running then is reported unknown.")
@click.option("--window", type=click.FloatRange(0, 600), default=DEFAULT_WINDOW_S, show_default=True,
              metavar="S", help="Read error counters again after S seconds and judge their change "
                                "(live only; a replayed snapshot uses its recorded window).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report on stdout.")
@click.option("-o", "--output", "output", metavar="FILE", help="Also write the JSON report to FILE.")
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1).")
@click.option("--snapshot-on-fail", "snapshot_dir", metavar="DIR",
              help="When the verdict is a failure, save a snapshot of what was read to DIR (live only).")
@click.option("--only", "only", multiple=True, metavar="PREFIX",
              help="Only checks whose id starts with PREFIX (repeatable), e.g. --only pcie --only gpu.ecc.")
@click.option("--textfile", "textfile_dir", metavar="DIR",
              help="Also write the verdict and metrics atomically to DIR/ccdiag.prom for node_exporter's "
                   "textfile collector.")
@click.option("-q", "--quiet", is_flag=True, help="Only the verdict and the problem lines.")
@click.option("--load-links/--no-load-links", "load_links", default=True, show_default=True,
              help="Keep each GPU's PCIe link busy with short host-to-device copies (CuPy) while link speeds "
                   "are read, so an idle GPU's power-saving downclock is not mistaken for a slow link.")
@click.option("--gpu", "gpu", metavar="GPU",
              help="Judge one GPU: an index, UUID or PCI address as NVML or nvidia-smi print it; the verdict and "
                   "exit code are its findings' and those of what affects it (the node, the bridges above it).")
@click.option("--bench", "bench", type=click.Choice(["quick"]), default=None,
              help="Add a short, bounded run of the benchmarks that can run here (`ccdiag bench --quick`) to the "
                   "verdict; it takes its own share of --timeout.")
@click.option("--reuse-pass", "reuse_state", metavar="STATE", type=click.Path(dir_okay=False),
              help="When the health loop's STATE (/var/lib/ccdiag/health.json) holds a pass still valid under the "
                   "same policy, skip what it covered (link loading, the counter window, --bench) and still read "
                   "every probe; says which pass it reused.")
def command(replay, root, policy_file, env_file, timeout, window, as_json, output, strict, snapshot_dir, only,
            textfile_dir, quiet, load_links, gpu, bench, reuse_state=None, bug_report=None):
    """Judge this node (or a snapshot) and exit 0 ok, 1 failed, 2 bad input, 3 could not evaluate."""
    # --timeout bounds the whole run from the process's start: start-up, opening the host or
    # snapshot, the evaluation, the report; at the deadline the guard writes what is ready
    guard = arm(timeout)
    started = guard.started
    guard.set_fallback(*no_verdict("opening the snapshot" if replay or bug_report else "reading the node", timeout,
                                   as_json, replayed_from=replay or bug_report), "the deadline came before a verdict")
    policy = load_policy(policy_file) if policy_file else None
    _refuse_unknown_waived_checks(policy)
    env = load_env_file(env_file) if env_file else None
    env_source = f"env file {env_file}" if env_file else None
    _refuse_unknown_prefixes(only)
    reused = _reused_pass(reuse_state, policy_file, env_file, strict) if reuse_state else None
    if reused is not None and reused.ok:
        load_links, window, bench = False, 0.0, None
    spelling = _parsed_gpu(gpu)
    record = _records_failures(snapshot_dir, replay or bug_report)
    # a bug report is read within a third of --timeout; probing and judging it get the rest
    host = make_host(replay, root, record=record, bug_report=bug_report, deadline=started + timeout / 3)
    replay = replay or bug_report
    guard.set_fallback(*no_verdict("probing and judging", timeout, as_json, replayed_from=replay),
                       "the deadline came before a verdict")
    budget = _budget(host, timeout, started, bench, reporting=any((as_json, output, textfile_dir)))
    result, snap_path = _judge_and_keep(host, policy, env, env_source, budget=budget, window=window, strict=strict,
                                        only=only, load_links=load_links and not replay, bench=bench,
                                        snapshot_dir=snapshot_dir if record else None)
    # what was read (a replayed snapshot: the largest thing held on a node with thousands of
    # devices) is not needed for the report: let it go before the report is built
    del host
    if textfile_dir:  # the node's metrics, whole, also with --gpu
        _write_textfile(textfile_dir, result)
    selection = None
    if spelling is not None:
        result, selection = _select_gpu(result, spelling)
    _fallback_with_verdict(guard, result, replay, snap_path, selection, as_json, strict)
    text = _json_text(result, replay, snap_path, selection, reused) if as_json or output else None
    unwritten = _try_write_text(text, output) if output else None
    guard.claim()
    _print_verdict(result, text if as_json else None, selection, quiet=quiet, strict=strict, bench=bench)
    _say_aside(snap_path, unwritten)
    sys.stdout.flush()
    guard.finish(int(result.exit_code))
    return int(result.exit_code)


def _parsed_gpu(gpu: str | None):
    """``--gpu`` as spelled, parsed before the node is read so that a malformed one is refused first."""
    if gpu is None:
        return None
    from ccdiag.run.gpuselect import parse_gpu

    return parse_gpu(gpu)


def _records_failures(snapshot_dir: str | None, from_file: str | None) -> bool:
    """Whether to record what is read for ``--snapshot-on-fail``: only live, as a file's data is already
    saved (said on stderr when asked for anyway)."""
    if snapshot_dir and from_file:
        click.echo("ccdiag: --snapshot-on-fail ignored: the data already comes from a file", err=True)
    return bool(snapshot_dir) and not from_file


def _budget(host, timeout: float, started: float, bench: str | None, *, reporting: bool) -> Budget:
    """The deadline's shares: the benchmarks' when ``--bench`` runs them, the report's (which grows with the
    node's PCI functions) when one is written."""
    return Budget.plan(timeout, bench_s=QUICK_BENCH_S if bench else 0.0, start=started, began=time.monotonic(),
                       report_s=report_reserve_s(timeout, _pci_functions(host)) if reporting else 0.0)


def _judge_and_keep(host, policy, env, env_source, *, budget, window, strict, only, load_links, bench,
                    snapshot_dir: str | None):
    """The result, and the path of the failure snapshot saved to ``snapshot_dir`` when the node failed (None
    when not asked or not failed); the host is closed whatever happens."""
    result = None
    snap_path = None
    try:
        result = _judge(host, policy, env, env_source, budget=budget, window=window, strict=strict, only=only,
                        load_links=load_links, bench=bench)
        if snapshot_dir and result.exit_code == ExitCode.FAIL:
            assert isinstance(host, RecordingHost)
            snap_path = _save_failure_snapshot(host, result, snapshot_dir, env, env_source)
    finally:
        close_host(host, result=result)
    return result, snap_path


def _json_text(result, replay: str | None, snap_path: str | None, selection: dict | None, reused) -> str:
    """The JSON report's text, with the health loop's pass it reused."""
    doc = _report(result, replay, snap_path, selection)
    if reused is not None:
        doc["reused_pass"] = reused.to_json()
    return json_document(doc)


def _print_verdict(result, json_text: str | None, selection: dict | None, *, quiet: bool, strict: bool,
                   bench: str | None) -> None:
    """The verdict on stdout: the JSON report's text when ``--json`` asked for it, else the terminal's lines
    (with the benchmarks' status line)."""
    if json_text is not None:
        _emit(json_text)
        return
    from ccdiag.report.render import print_result

    from ccdiag.run.gpuselect import scope_text

    print_result(result.findings, result.exit_code, result.hostname, result.timed_out, quiet, strict,
                 waivers=result.waivers, scope=scope_text(selection["gpu_node"]) if selection else None)
    if bench:
        from ccdiag.commands.bench_render import bench_status_line

        click.echo(bench_status_line(result.bench))


def _say_aside(snap_path: str | None, unwritten: str | None) -> None:
    """On stderr, after the verdict: where the failure snapshot went, and a report that could not be written
    (the verdict is printed and the exit code stays the node's)."""
    if snap_path:
        click.echo(f"ccdiag: failure snapshot written to {snap_path}", err=True)
    if unwritten:
        click.echo(f"ccdiag: {unwritten} (the verdict is on stdout)", err=True)


def _reused_pass(state: str, policy_file: str | None, env_file: str | None, strict: bool):
    """The health loop's pass this check may lean on (ccdiag/health/reuse.py), said on stderr."""
    from ccdiag.health.reuse import reusable_pass

    reused = reusable_pass(state, policy_file, env_file, strict)
    click.echo(f"ccdiag: {reused.line()}", err=True)
    return reused


def _pci_functions(host) -> int:
    """How many PCI functions the host lists (0 when it lists none): what the report's size follows."""
    try:
        return len(host.list_dir("/sys/bus/pci/devices"))
    except HostReadError:
        return 0


def _refuse_unknown_prefixes(only) -> None:
    """An ``--only`` prefix no check id starts with is bad input: it would silently judge nothing."""
    if not only:
        return
    from ccdiag.checks import load_all

    names = list(load_all())
    unmatched = [p for p in only if not any(n.startswith(p) for n in names)]
    if unmatched:
        raise InputError(f"--only {unmatched[0]}: no check id starts with it "
                         f"(checks: {', '.join(sorted(names)) or 'none installed'})")


def _judge(host, policy, env, env_source, *, budget, window, strict, only, load_links, bench):
    """The evaluation, with ``--bench quick``'s benchmarks in their own share of the deadline."""
    result = evaluate(host, policy, window_s=window, deadline_s=budget.deadline_s, env=env, env_source=env_source,
                      strict=strict, only=only or None, load_links=load_links, budget=budget,
                      release_files=not bench)
    if bench:
        from ccdiag.run.checkrun import add_benchmarks

        result = add_benchmarks(result, host)
    return result


def _write_textfile(directory: str, result) -> None:
    from ccdiag.exporters.textfile import write_textfile

    try:
        write_textfile(directory, result)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot write textfile in {directory}: {getattr(exc, 'strerror', None) or exc}") from None


def _select_gpu(result, spelling):
    """The result narrowed to one GPU and what affects it, with its own exit code; and the report's
    ``selection`` (the node's own verdict kept beside it)."""
    import dataclasses

    from ccdiag.core.findings import verdict_status
    from ccdiag.run.checkrun import exit_code_for
    from ccdiag.run.gpuselect import findings_for_gpu, resolve_gpu, selection_json

    node = resolve_gpu(spelling, result.topology, result.hostname)
    kept = findings_for_gpu(result.findings, result.topology, node)
    selection = {"gpu": selection_json(spelling, node), "gpu_node": node,
                 "node_verdict": {"status": verdict_status(result.findings), "exit_code": int(result.exit_code)},
                 "left_out": len(result.findings) - len(kept)}
    code = exit_code_for(kept, result.timed_out, result.strict)
    return dataclasses.replace(result, findings=kept, exit_code=int(code)), selection


def _extra(result, snap_path: str | None, selection: dict | None) -> dict:
    """The check report's own sections (policy, waivers, the GPU selected, the failure snapshot, benchmarks)."""
    extra = {"policy": _policy_section(result.policy), "waivers": [o.to_json() for o in result.waivers]}
    if selection is not None:
        extra["selection"] = {k: v for k, v in selection.items() if k != "gpu_node"}
    if snap_path:
        extra["failure_snapshot"] = snap_path
    if result.bench:
        extra["bench"] = [b.to_json() for b in result.bench]
    return extra


def _report(result, replay: str | None, snap_path: str | None, selection: dict | None = None) -> dict:
    """The ``kind: check`` JSON report."""
    from ccdiag.report.document import build_report, summarise_pairs

    extra = _extra(result, snap_path, selection)
    topology = result.topology.to_json(max_matrix_ends=CHECK_MATRIX_MAX_ENDS) if result.topology else None
    topology = summarise_pairs(topology) if topology else None
    return build_report("check", result.meta, runs=result.runs, topology=topology,
                        findings=result.findings, exit_code=result.exit_code,
                        run_info=result.run_info(replay), extra=extra)


def _fallback_with_verdict(guard, result, replay: str | None, snap_path: str | None, selection: dict | None,
                           as_json: bool, strict: bool) -> None:
    """Once the verdict is known, the guard's fallback carries it: the verdict counted over every
    finding with the problems listed (cheap on a node of any size), or the quiet terminal verdict."""
    if isinstance(guard, NoGuard):
        return
    if as_json:
        core = verdict_report(result.findings, result.exit_code, result.meta, result.run_info(replay),
                              _extra(result, snap_path, selection))
        guard.set_fallback(json_document(core), result.exit_code,
                           "the deadline came before the whole report was written: the report carries the "
                           "verdict and every problem found")
    else:
        guard.set_fallback(verdict_text(result.findings, result.exit_code, result.hostname, result.timed_out,
                                        strict), result.exit_code, "the deadline came before the whole verdict was printed")


def _try_write_text(text: str, output: str) -> str | None:
    """Write the report's text to ``output`` atomically; why it could not be, or None."""
    from ccdiag.core.output import write_atomic

    try:
        write_atomic(output, text)
    except OSError as exc:
        return f"cannot write report {output}: {exc.strerror or exc}"
    return None


def _emit(text: str) -> None:
    from ccdiag.core.output import silence_stdout

    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


def _policy_section(policy) -> dict:
    from dataclasses import asdict

    return {"source": policy.source, "values": {k: v for k, v in asdict(policy).items() if k != "source"}}


def _refuse_unknown_waived_checks(policy) -> None:
    """A waiver of a check id that no check has: a typo that would excuse nothing (bad input, as an
    unknown ``--only`` prefix is). Benchmark findings (``bench.*``) are not registered checks."""
    if policy is None or not policy.waivers:
        return
    from ccdiag.checks import load_all
    from ccdiag.checks.waiving import LAPSED_CHECK

    names = set(load_all()) | {LAPSED_CHECK}
    for w in policy.waivers:
        if w.check not in names and not w.check.startswith("bench."):
            where = f"{policy.source}:{w.line}" if w.line else policy.source
            raise InputError(f"{where}: the waiver names check {w.check!r}, which no check has "
                             f"(`ccdiag check --json` lists the ids)")
