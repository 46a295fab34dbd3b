"""node_exporter textfile output: one evaluation written as ``<dir>/ccdiag.prom``.

For nodes that already run node_exporter and would rather not run another listener: a timer runs
``ccdiag check --textfile /var/lib/prometheus/node-exporter`` and node_exporter's textfile
collector serves the result. The file carries the same metrics as the daemon (without the
daemon-only ones: collection age, interval, cycle count), so dashboards and alert rules work on
either; node_exporter's own ``node_textfile_mtime_seconds`` gives its age.

The file is written to a temporary name that does not end in ``.prom`` (the collector ignores it)
and renamed over the old one, so node_exporter never reads half a file. Its permissions follow the
caller's umask: it names hosts, GPUs and findings, so who may read it is the site's decision. No sample carries a
timestamp: the textfile collector refuses files that do.
"""

from __future__ import annotations

import os
import time
from typing import Any

from prometheus_client.exposition import generate_latest

from ccdiag.exporters import metrics as M
from ccdiag.exporters.collector import StaticCollector
from ccdiag.exporters.cycle import cycle_from_result
from ccdiag.core.output import write_atomic

DEFAULT_FILENAME = "ccdiag.prom"


def render_textfile(result: Any, completed_at: float | None = None) -> bytes:
    """The text a textfile gets for ``result`` (a :class:`ccdiag.run.checkrun.CheckResult`)."""
    cycle = cycle_from_result(result, time.time() if completed_at is None else completed_at)
    return generate_latest(StaticCollector(M.families(cycle)))


def write_textfile(directory: str, result: Any, *, filename: str = DEFAULT_FILENAME,
                   completed_at: float | None = None) -> str:
    """Write ``result`` atomically to ``directory/filename``; returns the path written.

    Raises ``OSError`` when the directory is missing or not writable (the caller reports it).
    """
    if not filename.endswith(".prom") or os.sep in filename:
        raise ValueError(f"textfile name {filename!r} must be a plain name ending in .prom")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"textfile directory {directory} does not exist")
    path = os.path.join(directory, filename)
    # the caller's umask decides who may read it (the check unit's UMask=0022 lets node_exporter)
    write_atomic(path, render_textfile(result, completed_at))
    return path
