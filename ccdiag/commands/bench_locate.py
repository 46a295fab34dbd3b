"""``ccdiag bench locate``: the slow host or link among many, in a few rounds of ring tests.

Thin: options, the layout read before MPI starts (a bad file is exit 2 with its line, on rank 0,
before any rank waits on another), then :mod:`ccdiag.cluster.locate_mpi`. Runs as MPI ranks under
mpirun or srun, one rank per host; rank 0 prints. Exit codes as ``bench pairs``: 0 nothing slow,
1 a slow host or link named, 2 bad options or layout, 3 no verdict (a rank silent, the budget cut
the search short, a suspect left unconfirmed).
"""

from __future__ import annotations

import click

from ccdiag.commands.examples import epilog
from ccdiag.core.errors import InputError


@click.command(name="locate", epilog=epilog("bench locate"))
@click.option("--layout", "layout", multiple=True, metavar="FILE",
              help="The fabric's layout: a Slurm topology.conf, `kubectl get nodes -o json` (or -o yaml, or "
                   "`kubectl describe nodes`), ibnetdiscover output, or one ccdiag report/snapshot per host for "
                   "NVLink domains; `nvml` reads each host's NVLink domain live. Default: ⌈√N⌉ groups of ranks.")
@click.option("--layout-format", "layout_format", type=click.Choice(["auto", "slurm", "k8s", "ibnetdiscover", "nvlink"]),
              default="auto", show_default=True, help="The layout's format when its content does not say.")
@click.option("--size", "size", default="4M", show_default=True, metavar="BYTES",
              help="What each hop carries per timed run (a ring of n hosts holds n of these, 256 MiB at most).")
@click.option("--runs", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Timed runs of each ring each way round; the fastest counts.")
@click.option("--segment", "segment", default="1M", show_default=True, help="Pipelining segment of the ring.")
@click.option("--max-tests", "max_tests", type=click.IntRange(1, 1_000_000), default=None, metavar="N",
              help="At most this many tests (rings run); suspects left then are said, not named.")
@click.option("--margin", type=click.FloatRange(0.05, 0.95), default=0.5, show_default=True,
              help="A pair below (1 - MARGIN) x the fleet's median is slow.")
@click.option("--budget", type=click.FloatRange(2, 3600), default=120, show_default=True, metavar="S",
              help="Wall-clock budget of the whole run; every wait ends by it.")
@click.option("--hostfile-out", "hostfile_out", metavar="FILE",
              help="Write the ring order the layout recommends (slow hosts left out): FILE (OpenMPI hostfile) "
                   "and FILE.slurm (SLURM_HOSTFILE for srun --distribution=arbitrary).")
@click.option("--json", "as_json", is_flag=True, help="Rank 0 prints one JSON document.")
def locate(layout, layout_format, size, runs, segment, max_tests, margin, budget, hostfile_out, as_json):
    """Find the slow host or link among many in a few rounds: rings per leaf (or NVLink domain, or
    ⌈√N⌉ groups), rings across them, each suspect confirmed against known-good hosts."""
    from ccdiag.cluster import locate_mpi
    from ccdiag.cluster.ring import parse_size

    try:
        size_bytes, seg_bytes = parse_size(size), parse_size(segment)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    paths = list(layout)
    layout_obj = None
    if paths and paths != ["nvml"]:
        if "nvml" in paths:
            raise InputError("--layout nvml reads NVML on every host; it takes no file beside it")
        rank = locate_mpi.launcher_rank()
        if rank in (None, 0):  # only rank 0 uses it: another host need not see the file
            from ccdiag.cluster.layout_read import read_layout

            layout_obj = read_layout(paths, layout_format)
    cfg = {"layout": paths, "layout_format": layout_format, "layout_obj": layout_obj, "size_bytes": size_bytes,
           "segment_bytes": seg_bytes, "runs": runs, "max_tests": max_tests, "margin": margin, "budget_s": budget,
           "hostfile_out": hostfile_out, "as_json": as_json}
    return locate_mpi.run(cfg)
