"""``ccdiag bench``: measure what the node's links deliver and judge every figure against its path.

``ccdiag bench [NAME...]`` runs the named benchmarks (all by default), ``ccdiag bench list`` says
which can run here and why not, ``ccdiag bench import FILE...`` judges nvbandwidth /
p2pBandwidthLatencyTest / nccl-tests / perftest outputs users already have (against this node, a
``--replay`` snapshot, or, when the file's GPUs are not the node's, the hardware catalogue picked
by the GPU names in the file). Exit codes: 0 every figure within range, 1 a figure failed (or
warned, with ``--strict``), 2 bad usage or an unreadable/unparseable file, 3 nothing could be
measured here (every benchmark skipped, with the reasons printed), nothing measured could be judged
(UNKNOWN, with the reason and what would make it judgeable), or a benchmark ran out of its budget.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ccdiag.commands.examples import epilog
from ccdiag.commands.common import host_options, make_host
from ccdiag.commands.common import try_write_report
from ccdiag.core.errors import InputError

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology


class BenchGroup(click.Group):
    """``ccdiag bench NAME...`` runs benchmarks; a first word that is a subcommand runs it instead."""

    def resolve_command(self, ctx, args):
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return "run", self.commands["run"], args

    def format_usage(self, ctx, formatter):
        formatter.write_usage("ccdiag bench", "[NAME...] [OPTIONS] | list | import FILE... | allreduce | pairs | locate")


@click.group(name="bench", cls=BenchGroup, invoke_without_command=True, epilog=epilog("bench"),
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def group(ctx):
    """Measure the node's links and judge every figure against the topology.

    NAMES: h2d, d2h, p2p, d2d, hbm, gemm, ib_write (default: all). Exit 0 ok, 1 a figure failed, 2 bad input,
    3 nothing could be measured here (each skip says why) or the budget ran out.

    Across hosts, as MPI ranks under mpirun or srun: `ccdiag bench allreduce`, `ccdiag bench pairs`,
    `ccdiag bench locate`."""
    if ctx.invoked_subcommand is None:
        return ctx.invoke(run_command)


def _load_policy(policy_file):
    if not policy_file:
        return None
    from ccdiag.inputs.policy import load_policy

    return load_policy(policy_file)


@dataclass(frozen=True)
class Observed:
    """What the benchmarks are judged against: the probes' runs, the topology, the host's metadata."""

    runs: dict
    topology: Topology
    meta: dict

    @property
    def hostname(self) -> str | None:
        return self.meta.get("hostname")


def _observe(replay, root, deadline_s: float):
    """The node's topology, read by the same probes and builder as `ccdiag topo` (no check runs:
    nothing here is judged but the benchmarks). The host is closed before any engine starts, so
    NVML is not held while CUDA child processes work."""
    from ccdiag.commands.topo import topology_probes
    from ccdiag.run.observe import observe

    host = make_host(replay, root)
    obs = observe(host, topology_probes(), time.monotonic() + deadline_s, close=True)
    return host, Observed(obs.runs, obs.topology, obs.meta)


def _progress():
    """A progress line on stderr when it is a terminal; None otherwise."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ccdiag.core.output import console

    prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                    console=console(stderr=True), transient=True)
    task = prog.add_task("benchmarks", total=None)

    def tick(bench: str, what: str) -> None:
        prog.update(task, description=f"{bench}: {what}")

    return prog, tick


@group.command(name="run", epilog=epilog("bench run"))
@click.argument("names", nargs=-1)
@host_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report on stdout.")
@click.option("-o", "--output", metavar="FILE", help="Also write the JSON report to FILE.")
@click.option("--budget", type=click.FloatRange(1, 3600), default=300.0, show_default=True, metavar="S",
              help="Seconds for all the benchmarks together; each stops when its share runs out.")
@click.option("--size", "size_bytes", type=click.IntRange(4096, 1 << 36), metavar="BYTES",
              help="Bytes per copy (default 256 MiB; quick 32 MiB; ib_write 8 MiB messages).")
@click.option("--iters", type=click.IntRange(1, 100000), metavar="N", help="Timed rounds (default 5; quick 3).")
@click.option("--quick", is_flag=True, help="Short, bounded figures (the ones `check --bench quick` adds).")
@click.option("--policy", "policy_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Thresholds from a policy file (bench_<kind>_warn_fraction / _fail_fraction).")
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1).")
def run_command(names, replay, root, as_json, output, budget, size_bytes, iters, quick, policy_file, strict):
    """Run benchmarks on this node (the default: `ccdiag bench [NAME...]` means `ccdiag bench run [NAME...]`)."""
    from ccdiag.bench.registry import BenchContext
    from ccdiag.bench.runner import exit_code, resolve, run_benchmarks

    bad = [n for n in names if n.startswith("-")]
    if bad:
        raise click.UsageError(f"no such option: {bad[0]}")
    try:
        names = resolve(names)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    policy = _load_policy(policy_file)
    t0 = time.monotonic()
    host, observed = _observe(replay, root, deadline_s=min(30.0, budget))
    prog, tick = _progress()
    ctx = BenchContext(host=host, topology=observed.topology, runs=observed.runs, policy=policy,
                       size_bytes=size_bytes, iters=iters, quick=quick, progress=tick,
                       deadline=t0 + budget)
    if prog is not None:
        with prog:
            results = run_benchmarks(names, ctx)
    else:
        results = run_benchmarks(names, ctx)
    code = exit_code(results, strict)
    doc = None
    if as_json or output:
        doc = bench_report(observed, results, code, replay, time.monotonic() - t0)
    unwritten = try_write_report(doc, output) if output else None
    if as_json:
        from ccdiag.core.output import emit_json

        emit_json(doc)
    else:
        from ccdiag.commands.bench_render import print_results

        print_results(results, int(code), observed.hostname)
    if unwritten:  # the results are printed and the exit code stays the measurement's
        click.echo(f"ccdiag: {unwritten} (the results are on stdout)", err=True)
    return int(code)


def bench_report(observed, results, code, replay, duration_s: float) -> dict:
    from ccdiag.report.document import build_report

    findings = [f for r in results for f in r.findings]
    return build_report("bench", observed.meta, topology=observed.topology, findings=findings,
                        exit_code=int(code), run_info={"replayed_from": replay, "duration_s": round(duration_s, 3)},
                        extra={"bench": [r.to_json() for r in results]})


@group.command(name="list", epilog=epilog("bench list"))
@host_options
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def list_command(replay, root, as_json):
    """Each benchmark, what it measures, and whether it can run here (and why not)."""
    from ccdiag.bench.registry import BenchContext
    from ccdiag.bench.shipped import load_all

    host, observed = _observe(replay, root, deadline_s=20.0)
    ctx = BenchContext(host=host, topology=observed.topology, runs=observed.runs)
    rows = [(b.name, b.what, b.applicable(ctx)) for b in load_all().values()]
    if as_json:
        from ccdiag.core.output import emit_json

        emit_json([{"name": n, "what": w, "runnable": why is None, "reason": why} for n, w, why in rows])
        return 0
    from ccdiag.core.output import sanitize
    from ccdiag.core.textfit import text_width, wrap

    width = text_width()
    pad = " " * 12  # under the text after the name
    for n, w, why in rows:
        for line in wrap(sanitize(w), width, indent=pad, first=f"{n:9} {'can run' if why is None else 'skip'}: "):
            click.echo(line)
        if why:
            for line in wrap(sanitize(why), width, indent=pad + "  ", first=f"{pad}why not: "):
                click.echo(line)
    return 0


@group.command(name="import", epilog=epilog("bench import"))
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--replay", metavar="FILE", type=click.Path(dir_okay=False),
              help="Judge against the topology of this snapshot (default: this node).")
@click.option("--root", default="/", show_default=True, metavar="DIR", help="Read sysfs under DIR instead of /: its files only (no NVML, no commands).")
@click.option("--from-smi", "from_smi", metavar="FILE", type=click.Path(dir_okay=False),
              help="Place the figures on a pasted `nvidia-smi topo -m` (levels only: no link rates, no ratios).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report on stdout.")
@click.option("--policy", "policy_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Thresholds from a policy file.")
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1).")
@click.option("--perftest-unit", type=click.Choice(["MiB/sec", "Gb/sec"]), default=None,
              help="Bandwidth unit of perftest JSON files (their JSON does not say; Gb/sec with --report_gbits).")
@click.option("--gpu-pci-id", "gpu_pci_ids", multiple=True, metavar="ID",
              help="PCI device id of the files' GPUs (2b85 or 10de:2b85, from `lspci -nn -d 10de:`) where a file names them only "
                   "as 'NVIDIA Graphics Device'.")
def import_command(files, replay, root, from_smi, as_json, policy_file, strict, perftest_unit, gpu_pci_ids):
    """Judge nvbandwidth, p2pBandwidthLatencyTest, nccl-tests, perftest or bandwidthTest outputs.

    Against this node, or --replay SNAPSHOT; a file whose GPUs are not the node's is judged from the
    hardware catalogue (by the GPU names it prints), with --from-smi levels when given; several files
    are also compared with each other. Exit 0 ok, 1 failed, 2 bad input, 3 UNKNOWN: no figure could be
    judged (the reason is printed)."""
    from ccdiag.bench.filecompare import attach
    from ccdiag.bench.imports import MatrixTopology, NodeInfo, import_file
    from ccdiag.bench.runner import exit_code
    from ccdiag.benchparse.errors import BenchParseError
    from ccdiag.core.userfiles import read_user_text

    if from_smi and replay:
        raise click.UsageError("--from-smi and --replay both name a topology: give one")
    policy = _load_policy(policy_file)
    texts = []
    for f in files:
        texts.append((f, read_user_text(f, "benchmark output")))
    t0 = time.monotonic()
    observed = None
    node = NodeInfo()
    if from_smi:
        from ccdiag.probes.smi_topo import TopoParseError, parse_topo_matrix

        try:
            topology = MatrixTopology(parse_topo_matrix(read_user_text(from_smi, "nvidia-smi topo -m")))
        except TopoParseError as exc:
            raise InputError(f"{from_smi}: not an nvidia-smi topo -m matrix: {exc}") from None
    else:
        _, observed = _observe(replay, root, deadline_s=20.0)
        topology = observed.topology
        node = NodeInfo(observed.hostname, replayed=bool(replay))
    results = []
    for f, text in texts:
        try:
            results.append(import_file(text, topology, policy, f, perftest_unit, node=node,
                                       gpu_pci_ids=tuple(gpu_pci_ids)))
        except BenchParseError as exc:
            raise InputError(f"{f}: {exc}") from None
    results = attach(results)  # several files: the same figures compared across them
    code = exit_code(results, strict)  # UNKNOWN (3) when no figure could be judged
    if as_json:
        from ccdiag.core.output import emit_json

        meta = observed.meta if observed is not None else {}
        doc = bench_report(observed, results, code, replay, time.monotonic() - t0) if observed else \
            _matrix_report(meta, results, code, time.monotonic() - t0)
        emit_json(doc)
    else:
        from ccdiag.commands.bench_render import print_results

        print_results(results, int(code), observed.hostname if observed else f"the matrix in {from_smi}")
    return int(code)


def _matrix_report(meta, results, code, duration_s):
    from ccdiag.report.document import build_report

    findings = [f for r in results for f in r.findings]
    return build_report("bench", meta, findings=findings, exit_code=int(code),
                        run_info={"duration_s": round(duration_s, 3)},
                        extra={"bench": [r.to_json() for r in results]})


def _attach_mpi_commands() -> None:
    """``allreduce``, ``pairs`` and ``locate`` run as MPI ranks; their modules import mpi4py only when run."""
    from ccdiag.commands.bench_locate import locate
    from ccdiag.commands.bench_mpi import allreduce, pairs

    group.add_command(allreduce)
    group.add_command(pairs)
    group.add_command(locate)


_attach_mpi_commands()
command = group
