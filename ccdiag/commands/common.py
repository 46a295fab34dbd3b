"""Options shared by every command that reads a host (live, a tree under --root, or --replay)."""

from __future__ import annotations

import functools
import os
from typing import Callable

import click

from ccdiag.core.errors import InputError
from ccdiag.host.door import Host, LiveHost, RecordingHost, ReplayHost


def host_options(func: Callable) -> Callable:
    """Adds ``--replay FILE`` and ``--root DIR``."""

    @click.option("--replay", "replay", metavar="FILE", type=click.Path(dir_okay=False),
                  help="Read a snapshot instead of this machine.")
    @click.option("--root", default="/", show_default=True, metavar="DIR",
                  help="Read sysfs/procfs under DIR (a copied tree) instead of /: its files only (no NVML, no commands).")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def bug_report_option(func: Callable) -> Callable:
    """Adds ``--bug-report FILE``: judge the node an nvidia-bug-report log (or an nvidia-smi -q
    output) describes (:mod:`ccdiag.host.bugreport`)."""

    @click.option("--bug-report", "bug_report", metavar="FILE", type=click.Path(dir_okay=False),
                  help="Read the node from an nvidia-bug-report.log(.gz) (or an nvidia-smi -q output) instead "
                       "of this machine; what the report lacks is judged unknown.")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if kwargs.get("bug_report") and (kwargs.get("replay") or kwargs.get("root", "/") != "/"):
            raise InputError("--bug-report reads the node from the report: give it without --replay or --root")
        return func(*args, **kwargs)

    return wrapper


def make_host(replay: str | None, root: str = "/", record: bool = False, bug_report: str | None = None,
              deadline: float | None = None) -> Host:
    """The host for a command: a bug report rebuilt as a node (read until ``deadline``, a
    ``time.monotonic()``), a replayed snapshot (an unusable one is a :class:`SnapshotError`, exit 2),
    a tree under ``root``, or the live machine (recording what it reads when ``record``)."""
    if bug_report:
        from ccdiag.host.bugreport import open_bug_report

        return open_bug_report(bug_report, deadline)
    if replay:
        return ReplayHost(replay)
    if not os.path.isdir(root):
        raise InputError(f"--root {root}: not a directory")
    return RecordingHost(root) if record else LiveHost(root)


def try_write_report(doc: dict, output: str) -> str | None:
    """Write the report; the reason it could not be written, or ``None``. For commands whose
    verdict must not be lost to an unwritable ``--output``: they print it anyway, keep their exit
    code and say what failed."""
    try:
        write_report(doc, output)
    except InputError as exc:
        return str(exc)
    return None


def write_report(doc: dict, output: str) -> None:
    """Write a JSON report to ``output`` atomically; a path that cannot be written is bad input."""
    from ccdiag.core.output import write_atomic
    from ccdiag.report.document import dumps

    try:
        write_atomic(output, dumps(doc) + "\n")
    except OSError as exc:
        raise InputError(f"cannot write report {output}: {exc.strerror or exc}") from None
