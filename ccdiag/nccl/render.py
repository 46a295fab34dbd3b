"""The recommendation as a file to source, an ``/etc/nccl.conf``, or text for a terminal.

The env file is written so that ``ccdiag check --env-file`` reads it back to the same settings
(``export NAME='value'``; values never need more than single quotes). Experiments and removals are
comments: nothing in the file changes a job unless a person uncomments it.
"""

from __future__ import annotations

import shlex

from ccdiag.nccl.knobs import DEFAULT, EXPERIMENT, INFO, REMOVE, SET, Recommendation


def _comment(text: str, width: int = 96) -> list[str]:
    words, lines, line = text.split(), [], "#"
    for w in words:
        if len(line) + 1 + len(w) > width:
            lines.append(line)
            line = "#"
        line += " " + w
    lines.append(line)
    return lines


def env_file(rec: Recommendation, header: str) -> str:
    out = _comment(header) + [""]
    for k in rec.knobs:
        if k.action == SET and k.value is not None:
            out += _comment(f"{k.name}: {k.reason} [confidence: {k.confidence}]")
            out.append(f"export {k.name}={shlex.quote(k.value)}")
            out.append("")
    for k in rec.knobs:
        if k.action == EXPERIMENT and k.value is not None:
            out += _comment(f"EXPERIMENT {k.name}: {k.reason}")
            out.append(f"# export {k.name}={shlex.quote(k.value)}")
            out.append("")
        elif k.action == REMOVE:
            out += _comment(f"REMOVE {k.name}: {k.reason}")
            out.append(f"unset {k.name}")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def nccl_conf(rec: Recommendation, header: str) -> str:
    """``/etc/nccl.conf``: NAME=value lines NCCL reads at start-up (2.23+ also ``$NCCL_CONF_FILE``)."""
    out = _comment(header) + [""]
    for k in rec.knobs:
        if k.action == SET and k.value is not None:
            out += _comment(f"{k.name}: {k.reason}")
            out.append(f"{k.name}={k.value}")
    for k in rec.knobs:
        if k.action == EXPERIMENT and k.value is not None:
            out += _comment(f"EXPERIMENT {k.name}: {k.reason}")
            out.append(f"#{k.name}={k.value}")
    return "\n".join(out).rstrip() + "\n"


TITLES = {SET: "set", DEFAULT: "leave to NCCL", EXPERIMENT: "experiment", REMOVE: "remove", INFO: "note"}


def text_rows(rec: Recommendation) -> list[list[str]]:
    order = (SET, REMOVE, INFO, DEFAULT, EXPERIMENT)
    rows = []
    for action in order:
        for k in rec.knobs:
            if k.action == action:
                rows.append([TITLES[action], k.name, k.value or "-", k.confidence, k.reason])
    return rows
