"""``allreduce`` and ``pairs``: the network benchmarks that run as MPI ranks (mpirun / srun).

Thin: options, then :mod:`ccdiag.cluster`; the ``ccdiag bench`` group holds these two commands
(``ccdiag bench allreduce``, ``ccdiag bench pairs``). Every rank runs the same command;
rank 0 prints the table (or with --json the one JSON document) and sets the exit code:
1 a slow, lossy or unreachable hop/host/link or a transfer that never completed (whatever else could
not be evaluated), else 3 a rank did not answer, the budget ran out or nothing was judged, else 0;
2 bad options.
"""

from __future__ import annotations

import json
import sys

import click

from ccdiag.commands.examples import epilog
from ccdiag.core.errors import InputError
from ccdiag.core.exitcodes import ExitCode


def _sizes(sizes: str | None, begin: str, end: str, factor: int) -> list[int]:
    from ccdiag.cluster.ring import parse_size, sweep_sizes

    try:
        if sizes:
            return [parse_size(s) for s in sizes.split(",") if s.strip()]
        return sweep_sizes(parse_size(begin), parse_size(end), factor)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _common(func):
    func = click.option("--line-rate-gbit-s", "line_rate_gbit_s", type=click.FloatRange(0.001, 100000),
                        default=None, metavar="GBIT",
                        help="Line rate of interfaces that report none (virtual NICs, containers): every figure "
                             "between hosts is held to it as well as to the others.")(func)
    func = click.option("--margin", type=click.FloatRange(0.05, 0.95), default=0.5, show_default=True,
                        help="A hop/pair below (1 - MARGIN) x the median is a finding.")(func)
    func = click.option("--hostfile-out", "hostfile_out", metavar="FILE",
                        help="Write the recommended host order: FILE (OpenMPI hostfile) and FILE.slurm "
                             "(SLURM_HOSTFILE for srun --distribution=arbitrary).")(func)
    func = click.option("--json", "as_json", is_flag=True, help="Rank 0 prints one JSON document.")(func)
    func = click.option("--budget", type=click.FloatRange(2, 3600), default=120, show_default=True, metavar="S",
                        help="Wall-clock budget of the whole run, shared out: each round of pairs (or each size) "
                             "gets its share, and a transfer not done within it is a finding.")(func)
    func = click.option("--warmup", type=click.IntRange(0, 1000), default=3, show_default=True)(func)
    func = click.option("--iters", type=click.IntRange(1, 100000), default=20, show_default=True)(func)
    func = click.option("-f", "--stepfactor", "factor", type=click.IntRange(2, 1024), default=2, show_default=True,
                        help="Multiply the size by this each step.")(func)
    func = click.option("-e", "--maxbytes", "end", default="64M", show_default=True, help="Largest size.")(func)
    func = click.option("-b", "--minbytes", "begin", default="1M", show_default=True, help="Smallest size.")(func)
    func = click.option("--sizes", metavar="LIST", help="Exact sizes instead of -b/-e/-f, e.g. 1M,16M,64M.")(func)
    return func


@click.command(name="allreduce", epilog=epilog("bench allreduce"))
@_common
@click.option("--device", type=click.Choice(["host", "gpu"]), default="host", show_default=True,
              help="Buffers in host memory (NumPy) or on the GPU (CuPy; also measures NCCL).")
@click.option("--segment", "segment", default="1M", show_default=True,
              help="Pipelining segment of the ring (each chunk is sent in pieces of this size).")
def allreduce(sizes, begin, end, factor, iters, warmup, budget, as_json, hostfile_out, margin, line_rate_gbit_s,
              device, segment):
    """Ring and halving-doubling allreduce vs MPI_Allreduce (and NCCL): busbw per size, per-hop table."""
    from ccdiag.cluster import benchrun
    from ccdiag.cluster.ring import parse_size

    size_list = _sizes(sizes, begin, end, factor)
    try:
        seg = parse_size(segment)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if device == "gpu":
        from ccdiag.cluster.sweep import gpu_skip_reason

        why = gpu_skip_reason()
        if why:
            click.echo(f"ccdiag: allreduce --device gpu skipped: {why}", err=True)
            return int(ExitCode.UNEVALUATED)
    return benchrun.allreduce(size_list, iters, warmup, budget, as_json, hostfile_out, margin, device, seg,
                              line_rate_gbit_s)


@click.command(name="pairs", epilog=epilog("bench pairs"))
@_common
@click.option("--iface", "only_ifaces", multiple=True, metavar="NAME",
              help="Measure the per-interface TCP matrix only over this interface (repeatable); "
                   "default: every interface that is up, IPv4-addressed and not loopback/container/bridge.")
@click.option("--layout", "layout", multiple=True, metavar="FILE",
              help="The fabric's layout (as `bench locate --layout` reads it: a Slurm topology.conf, kubectl "
                   "nodes, ibnetdiscover output, or one ccdiag report/snapshot per host): its ring order is "
                   "shown beside the measured one.")
@click.option("--layout-format", "layout_format", type=click.Choice(["auto", "slurm", "k8s", "ibnetdiscover", "nvlink"]),
              default="auto", show_default=True, help="The layout's format when its content does not say.")
def pairs(sizes, begin, end, factor, iters, warmup, budget, as_json, hostfile_out, margin, line_rate_gbit_s,
          only_ifaces, layout, layout_format):
    """Every host pair in N-1 rounds of disjoint pairs, over MPI and over TCP on each candidate
    interface: slow host vs slow link per interface, best ring order."""
    from ccdiag.cluster import pairs as pairmod

    size_list = _sizes(sizes, begin, end, factor)
    layout_obj = None
    if layout:
        from ccdiag.cluster.layout_read import read_layout
        from ccdiag.cluster.locate_mpi import launcher_rank

        if launcher_rank() in (None, 0):  # only rank 0 reports: another host need not see the file
            layout_obj = read_layout(list(layout), layout_format)
    return pairmod.run(size_list[-1], iters, warmup, budget, as_json, hostfile_out, margin, list(only_ifaces),
                       line_rate_gbit_s, layout=layout_obj)


def _emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
