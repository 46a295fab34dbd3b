"""The recommendation as a file to source, an ``/etc/nccl.conf``, or text for a terminal.

The env file is written so that ``ccdiag check --env-file`` reads it back to the same settings
(``export NAME='value'``; values never need more than single quotes). Experiments and removals are
comments: nothing in the file changes a job unless a person uncomments it.
"""

from __future__ import annotations

import shlex
from typing import Callable

from ccdiag.nccl.knobs import DEFAULT, EXPERIMENT, INFO, REMOVE, SET, Knob, Recommendation


def _comment(text: str, width: int = 96) -> list[str]:
    words, lines, line = text.split(), [], "#"
    for w in words:
        if len(line) + 1 + len(w) > width:
            lines.append(line)
            line = "#"
        line += " " + w
    lines.append(line)
    return lines


def _settings_file(rec: Recommendation, header: str, line: Callable[[Knob], str], *, commented: str,
                   with_confidence: bool, remove: Callable[[Knob], str] | None, gap: list[str]) -> str:
    """One settings file in either syntax: settings first, then experiments commented out (``commented``
    prefixed to ``line``), then removals where the syntax has a way to say them."""
    out = _comment(header) + [""]
    for k in rec.knobs:
        if k.action == SET and k.value is not None:
            note = f" [confidence: {k.confidence}]" if with_confidence else ""
            out += _comment(f"{k.name}: {k.reason}{note}") + [line(k)] + gap
    for k in rec.knobs:
        if k.action == EXPERIMENT and k.value is not None:
            out += _comment(f"EXPERIMENT {k.name}: {k.reason}") + [commented + line(k)] + gap
        elif k.action == REMOVE and remove is not None:
            out += _comment(f"REMOVE {k.name}: {k.reason}") + [remove(k)] + gap
    return "\n".join(out).rstrip() + "\n"


def env_file(rec: Recommendation, header: str) -> str:
    """A file to source in a job script: ``export`` lines, ``unset`` for knobs to remove."""
    return _settings_file(rec, header, lambda k: f"export {k.name}={shlex.quote(k.value or '')}", commented="# ",
                          with_confidence=True, remove=lambda k: f"unset {k.name}", gap=[""])


def nccl_conf(rec: Recommendation, header: str) -> str:
    """``/etc/nccl.conf``: NAME=value lines NCCL reads at start-up (2.23+ also ``$NCCL_CONF_FILE``);
    it has no way to unset a variable, so removals appear only in the text and env outputs."""
    return _settings_file(rec, header, lambda k: f"{k.name}={k.value}", commented="#",
                          with_confidence=False, remove=None, gap=[])


TITLES = {SET: "set", DEFAULT: "leave to NCCL", EXPERIMENT: "experiment", REMOVE: "remove", INFO: "note"}


def text_rows(rec: Recommendation) -> list[list[str]]:
    order = (SET, REMOVE, INFO, DEFAULT, EXPERIMENT)
    rows = []
    for action in order:
        for k in rec.knobs:
            if k.action == action:
                rows.append([TITLES[action], k.name, k.value or "-", k.confidence, k.reason])
    return rows
