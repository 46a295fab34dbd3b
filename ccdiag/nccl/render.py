"""The recommendation as a file to source, an ``/etc/nccl.conf``, or text for a terminal.

The env file is correct shell: each value is quoted with :func:`shlex.quote`, except a value that
refers to another variable (``${NCCL_LIB_DIR}/tuner.txtpb``, as providers' profiles write), which is
written in double quotes so the reference expands (a variable the file itself sets is exported
before the line that uses it); no variable is written twice (a setting wins over an experiment or a
removal of the same name). ``nccl.conf`` is read by NCCL literally, without expansion: a reference to
a variable the file sets is substituted, any other reference is left out with a comment saying to
set it in the job's environment. Experiments and removals are comments: nothing in the file changes
a job unless a person uncomments it.
"""

from __future__ import annotations

import re
import shlex
from typing import Callable, Mapping

_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def refs(value: str) -> list[str]:
    """The variables a value refers to (``$NAME`` or ``${NAME}``)."""
    return [a or b for a, b in _REF.findall(value)]


def _double_quoted(value: str) -> str:
    """``value`` in double quotes with its ``$NAME``/``${NAME}`` references left to expand and every other
    character the shell would interpret inside double quotes escaped."""
    out, pos = [], 0
    for m in _REF.finditer(value):
        out.append(re.sub(r'(["\\`$])', r"\\\1", value[pos:m.start()]))
        out.append("${" + (m.group(1) or m.group(2)) + "}")
        pos = m.end()
    out.append(re.sub(r'(["\\`$])', r"\\\1", value[pos:]))
    return '"' + "".join(out) + '"'


def shell_assignment(name: str, value: str, settings: Mapping[str, str] | None = None) -> str:
    """``NAME=value`` as a shell assignment: single-quoted by shlex, or double-quoted where the value refers
    to a variable (so the reference expands, as the provider's profile meant)."""
    if refs(value):
        return f"{name}={_double_quoted(value)}"
    quoted = shlex.quote(value)
    return f"{name}={quoted if quoted.startswith(chr(39)) else chr(39) + value + chr(39)}"


def expand_refs(value: str, env: Mapping[str, str], keep: set[str] | frozenset[str] = frozenset()) -> str:
    """``value`` with each ``$NAME``/``${NAME}`` that ``env`` defines replaced by its value (bounded, so a
    cycle ends), except the names in ``keep``."""
    for _ in range(8):
        names = [r for r in refs(value) if r in env and r not in keep]
        if not names:
            break
        value = _REF.sub(lambda m: env[m.group(1) or m.group(2)] if (m.group(1) or m.group(2)) in env and
                         (m.group(1) or m.group(2)) not in keep else m.group(0), value)
    return value


def conf_value(value: str, settings: Mapping[str, str]) -> str | None:
    """``value`` for nccl.conf (read literally by NCCL): references to variables the same file sets are
    substituted; None when it refers to one it does not set (NCCL would read the text ``${...}``)."""
    missing = [r for r in refs(value) if r not in settings]
    if missing:
        return None
    for _ in range(8):  # a reference to a value that itself refers (bounded: no cycle runs forever)
        if not refs(value):
            break
        value = _REF.sub(lambda m: settings[m.group(1) or m.group(2)], value)
    return value


def _ordered(knobs: list[Knob]) -> list[Knob]:
    """Each set variable once, after the variables of this file it refers to."""
    by_name: dict[str, Knob] = {}
    for k in knobs:
        by_name.setdefault(k.name, k)
    out: list[Knob] = []
    placing: set[str] = set()

    def place(k: Knob) -> None:
        if k in out or k.name in placing:
            return
        placing.add(k.name)
        for r in refs(k.value or ""):
            if r in by_name:
                place(by_name[r])
        out.append(k)

    for k in by_name.values():
        place(k)
    return out

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
    sets = _ordered([k for k in rec.knobs if k.action == SET and k.value is not None])
    for k in sets:
        note = f" [confidence: {k.confidence}]" if with_confidence else ""
        out += _comment(f"{k.name}: {k.reason}{note}") + [line(k)] + gap
    written = {k.name for k in sets}
    for k in rec.knobs:
        if k.name in written:
            continue  # a variable is written once: the setting wins over an experiment or a removal
        written.add(k.name)
        if k.action == EXPERIMENT and k.value is not None:
            out += _comment(f"EXPERIMENT {k.name}: {k.reason}") + [commented + line(k)] + gap
        elif k.action == REMOVE and remove is not None:
            out += _comment(f"REMOVE {k.name}: {k.reason}") + [remove(k)] + gap
    return "\n".join(out).rstrip() + "\n"


def env_file(rec: Recommendation, header: str) -> str:
    """A file to source in a job script: ``export`` lines, ``unset`` for knobs to remove."""
    settings = rec.settings()
    return _settings_file(rec, header, lambda k: f"export {shell_assignment(k.name, k.value or '', settings)}",
                          commented="# ", with_confidence=True, remove=lambda k: f"unset {k.name}", gap=[""])


def nccl_conf(rec: Recommendation, header: str) -> str:
    """``/etc/nccl.conf``: NAME=value lines NCCL reads at start-up (2.23+ also ``$NCCL_CONF_FILE``);
    it has no way to unset a variable, so removals appear only in the text and env outputs."""
    settings = rec.settings()

    def line(k: Knob) -> str:
        value = conf_value(k.value or "", settings)
        if value is None:
            return (f"# {k.name} refers to {', '.join('$' + r for r in refs(k.value or ''))}, which NCCL does not "
                    f"expand in nccl.conf: set {k.name} in the job's environment instead")
        return f"{k.name}={value}"

    return _settings_file(rec, header, line, commented="#", with_confidence=False, remove=None, gap=[])


TITLES = {SET: "set", DEFAULT: "leave to NCCL", EXPERIMENT: "experiment", REMOVE: "remove", INFO: "note"}


def text_rows(rec: Recommendation) -> list[list[str]]:
    order = (SET, REMOVE, INFO, DEFAULT, EXPERIMENT)
    rows = []
    for action in order:
        for k in rec.knobs:
            if k.action == action:
                rows.append([TITLES[action], k.name, k.value or "-", k.confidence, k.reason])
    return rows
