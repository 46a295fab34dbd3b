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


def make_host(replay: str | None, root: str = "/", record: bool = False) -> Host:
    """The host for a command: a replayed snapshot (an unusable one is a :class:`SnapshotError`, exit 2),
    a tree under ``root``, or the live machine (recording what it reads when ``record``)."""
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
