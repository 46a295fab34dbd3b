"""The ``nvidia-smi topo`` probe: runs ``topo -m`` and ``topo -p2p r|w|n|a`` and keeps the parsed
matrices.

The text itself is read elsewhere, one job per module: :mod:`ccdiag.probes._smi_topo_parse` reads the
grid, :mod:`ccdiag.probes._smi_topo_repair` mends what copying damaged, and
:mod:`ccdiag.probes._smi_topo_render` lays matrices out again and compares them. Their public names
are re-exported here, so ``from ccdiag.probes.smi_topo import parse_topo_matrix`` keeps working for
the commands that read pastes (``ccdiag topo --from-smi``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ccdiag.core.readings import ReadError
from ccdiag.host.door import NOT_RUN_UNDER_ROOT, Host
from ccdiag.probes._smi_topo_parse import (
    EXTRA_COLUMNS, P2PMatrix, TopoMatrix, parse_topo_cpu_query, parse_topo_matrix, parse_topo_p2p,
)
from ccdiag.probes._smi_topo_render import cells_equal, render_matrix, rows_for_table
from ccdiag.probes._smi_topo_text import (
    MAX_DEVICES, MAX_LINE_CHARS, MAX_LINES, MAX_TEXT_BYTES, QUOTE_LIMIT, TopoParseError, check_bounds,
)
from ccdiag.probes.registry import ProbeUnavailable, probe

__all__ = [
    "NAME", "TIMEOUT_S", "COMMAND_TIMEOUT_S", "P2P_MODES", "EXTRA_COLUMNS", "MAX_DEVICES", "MAX_LINE_CHARS",
    "MAX_LINES", "MAX_TEXT_BYTES", "QUOTE_LIMIT", "P2PMatrix", "SmiTopoObservation", "TopoMatrix",
    "TopoParseError", "cells_equal", "check_bounds", "collect", "parse_topo_cpu_query", "parse_topo_matrix",
    "parse_topo_p2p", "render_matrix", "rows_for_table",
]

NAME = "smi_topo"
TIMEOUT_S = 25.0

#: per-command deadline; a wedged GPU makes nvidia-smi hang, and each later call would hang too
COMMAND_TIMEOUT_S = 10.0
#: the ``topo -p2p`` capabilities collect() asks for: read, write, nvlink, atomics
P2P_MODES = ("r", "w", "n", "a")


@dataclass(frozen=True)
class SmiTopoObservation:
    """What the probe read: the matrix (None when its command failed or its text was refused), the
    p2p matrices by mode letter, one line per command run, and what went wrong, per command."""

    matrix: TopoMatrix | None = None
    p2p: dict[str, P2PMatrix] = field(default_factory=dict)
    commands: tuple[str, ...] = ()
    errors: tuple[ReadError, ...] = ()


def _command_error(res, source: str) -> ReadError | None:
    if res.timed_out:
        return ReadError(source, "timeout", res.describe())
    if res.error is not None:
        return ReadError(source, "command", res.describe())
    if res.rc != 0:
        said = (res.stderr.strip() or res.stdout.strip()).splitlines()
        detail = f": {said[0]}" if said else ""
        return ReadError(source, "command", res.describe() + detail)
    return None


@probe(order=70, what="nvidia-smi topology")
def collect(host: Host) -> SmiTopoObservation:
    """Run ``nvidia-smi topo -m`` and ``topo -p2p r|w|n|a`` and parse them.

    After a command times out the rest are not run (recorded as ``skipped``): a wedged GPU makes
    every nvidia-smi call hang, and four more hangs would outlast this probe's deadline.
    """
    commands: list[str] = []
    errors: list[ReadError] = []
    matrix: TopoMatrix | None = None
    p2p: dict[str, P2PMatrix] = {}
    started = time.monotonic()
    plan = [("m", ["nvidia-smi", "topo", "-m"])] + [(k, ["nvidia-smi", "topo", "-p2p", k]) for k in P2P_MODES]
    hung = False
    for key, argv in plan:
        source = " ".join(argv)
        if hung:
            errors.append(ReadError(source, "skipped", "not run: an earlier nvidia-smi command timed out"))
            continue
        remaining = TIMEOUT_S - 1.0 - (time.monotonic() - started) if host.live else COMMAND_TIMEOUT_S
        res = host.run(argv, timeout=max(1.0, min(COMMAND_TIMEOUT_S, remaining)))
        commands.append(res.describe())
        if res.error == "not found":
            raise ProbeUnavailable("nvidia-smi not found")
        if res.error == NOT_RUN_UNDER_ROOT:
            raise ProbeUnavailable("nvidia-smi is not run under --root (a copied tree is read from its files only)")
        err = _command_error(res, source)
        if err is not None:
            errors.append(err)
            hung = hung or res.timed_out
            continue
        try:
            if key == "m":
                matrix = parse_topo_matrix(res.stdout)
            else:
                p2p[key] = parse_topo_p2p(res.stdout, mode=key)
        except TopoParseError as exc:
            errors.append(ReadError(source, "parse", str(exc)))
    return SmiTopoObservation(matrix=matrix, p2p=p2p, commands=tuple(commands), errors=tuple(errors))
