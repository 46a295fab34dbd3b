"""``ccdiag snapshot``: record everything the probes read into one file that replays anywhere.

The file is what a support ticket carries: ``ccdiag check --replay FILE`` on any laptop gives the
verdict the node gave. ``--redact`` keeps only what the checks read, pseudonymises host names,
addresses, serials and GUIDs, and prints what it dropped.
"""

from __future__ import annotations

import os
import socket
import time

import click

from ccdiag.commands.examples import epilog
from ccdiag.run.checkrun import DEFAULT_WINDOW_S
from ccdiag.commands.common import bug_report_option, host_options, make_host
from ccdiag.core.errors import InputError
from ccdiag.core.exitcodes import ExitCode
from ccdiag.host.door import RecordingHost, ReplayHost
from ccdiag.core.output import console, emit_json
from ccdiag.run.observe import close_host, observe
from ccdiag.probes.registry import ALL_PROBES, resampled_probes
from ccdiag.report.document import build_report


def default_name(hostname: str | None) -> str:
    """``ccdiag-<short host>-<UTC time>.snap.tar.gz``: sorts by time, says where it came from."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"ccdiag-{(hostname or 'host').split('.')[0]}-{stamp}.snap.tar.gz"


def _file_mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise InputError(f"--mode {text}: expected permissions in octal, e.g. 0600 or 0640")
    return mode


@click.command(name="snapshot", epilog=epilog("snapshot"))
@host_options
@bug_report_option
@click.option("-o", "--output", "output", metavar="FILE",
              help="Snapshot file to write [default: ccdiag-<host>-<time>.snap.tar.gz].")
@click.option("--redact", is_flag=True, help="Keep only what the checks read (the allow-list in ccdiag/report/allowlist.py), "
              "pseudonymise host names, IP/MAC addresses, serials, GUIDs and GPU UUIDs, drop anything that looks "
              "like a secret, and print what was dropped.")
@click.option("--window", type=click.FloatRange(0, 600), default=DEFAULT_WINDOW_S, show_default=True, metavar="S",
              help="Read the counters again after S seconds (a second epoch), so rates can be judged on replay.")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=60.0, show_default=True, metavar="S",
              help="Bound on each sampling pass.")
@click.option("--probe", "probes", multiple=True, type=click.Choice(ALL_PROBES), help="Only these probes (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.option("--mode", "mode", default="0600", show_default=True, metavar="OCTAL",
              help="Permissions of the file written: the owner's only by default, since a snapshot carries "
                   "the kernel log, host names and serials (0640 to share it with a group).")
def command(replay: str | None, root: str, output: str | None, redact: bool, window: float, timeout: float,
            probes: tuple[str, ...], as_json: bool, mode: str, bug_report: str | None = None) -> int:
    """Record a snapshot of this machine (or re-write a snapshot given with --replay, e.g. to redact it).

    Exit 0 when the file was written (even if some probes found nothing: that is recorded too),
    2 on a bad argument or unreadable --replay file.
    """
    file_mode = _file_mode(mode)
    names = list(probes or ALL_PROBES)
    started = time.monotonic()
    host = make_host(replay, root, record=not replay and not bug_report, bug_report=bug_report,
                     deadline=started + timeout)
    replay = replay or bug_report
    runs = None
    if isinstance(host, ReplayHost):
        snap = host.snap
    else:
        assert isinstance(host, RecordingHost)
        # both passes and the window under one deadline: each pass gets --timeout, the window in full
        obs = observe(host, names, time.monotonic() + 2 * timeout + window, window_s=window,
                      resample=[n for n in resampled_probes() if n in names], fit_window=False)
        runs = obs.runs
        host.environ()
        snap = host.snapshot(window_s=window, probes={n: r.status for n, r in runs.items()},
                             recorded_probes=names)
        close_host(host, timed_out=obs.timed_out)
    counts: dict[str, int] = {}
    dropped_lines: list[str] = []
    if redact:
        from ccdiag.report.redact import redact_with_report

        snap, counts, dropped = redact_with_report(snap)
        dropped_lines = dropped.lines()
    path = output or default_name(snap.meta.get("hostname") or socket.gethostname())
    if os.path.isdir(path):
        path = os.path.join(path, default_name(snap.meta.get("hostname")))
    try:
        snap.save(path, file_mode)
    except OSError as exc:
        raise InputError(f"cannot write snapshot {path}: {exc.strerror or exc}") from None
    size = os.path.getsize(path)
    nfiles = sum(len(f) for f in snap.files.values())
    summary = {
        "path": path, "bytes": size, "files": nfiles, "links": len(snap.links), "commands": len(snap.commands),
        "nvml_calls": len(snap.nvml), "epochs": snap.epochs, "redacted": bool(redact),
        "redacted_values": counts, "probes": snap.meta.get("probes", {}),
    }
    if redact:
        summary["dropped"] = dropped_lines
    if as_json:
        emit_json(build_report("snapshot", snap.meta, runs=runs,
                               run_info={"replayed_from": replay,
                                         "duration_s": round(time.monotonic() - started, 4)},
                               extra={"snapshot": summary}))
    else:
        out = console()
        out.print(f"wrote {path} ({size / 1024:.0f} KiB: {nfiles} files, {len(snap.links)} links, "
                  f"{len(snap.commands)} commands, {len(snap.nvml)} NVML calls, {snap.epochs} epoch(s))")
        for name, status in sorted(summary["probes"].items()):
            out.print(f"  probe {name}: {status}")
        if redact:
            out.print("  redacted: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing found"))
            out.print(f"  dropped ({len(dropped_lines)}; not read by any check or looking like a secret; review "
                      f"before sending):" if dropped_lines else "  dropped: nothing", markup=False, highlight=False)
            for line in dropped_lines:
                out.print(f"    {line}", markup=False, highlight=False)
        out.print(f"replay with: ccdiag check --replay {path}")
    return int(ExitCode.OK)
