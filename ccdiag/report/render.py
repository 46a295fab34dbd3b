"""Terminal rendering of findings: the verdict first, then what to act on, then the rest, and on a
terminal the verdict again, last.

Made for the operator reading a Slurm log or a terminal at 3 a.m.: the first line is the verdict;
each root-cause problem is printed once, root causes first, under a grep-able heading (status, id,
component with UUID and BDF), with the findings that follow from it folded beneath
(:mod:`ccdiag.checks.causes`), then what is wrong, the evidence, what was expected and what to do.
Problems the policy waived follow, each once under a ``WAIVED`` heading with who waived it, why and
until when (:mod:`ccdiag.checks.waiving`). Passes are only counted. Every line fits 100 columns: long
evidence wraps between words, hanging under its label, and never splits a path, address or UUID
(``--quiet`` piped into a log is the exception: one whole line per problem). Values are printed as
values (``3 -> 57``, ``yes``, ``not read``), never as Python reprs. Plain text; colour is added by
:func:`print_result` only on a TTY.

On a terminal (``terminal=True``) the details scroll by, so the report ends with a summary the last
screen holds: one line per root problem (status, action, check, component, how many follow from
it), one per waived problem, and the verdict line again; the passed list folds to one line. Piped
output and ``--quiet`` keep their form: the verdict first, every line whole for a log or a ticket.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.actions import action_of
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WAIVED, WARN, Evidence, Finding

VERDICT_WORD = {ExitCode.OK: "OK", ExitCode.FAIL: "FAIL", ExitCode.UNEVALUATED: "UNKNOWN"}
STATUS_WORD = {FAIL: "FAIL", WARN: "WARN", UNKNOWN: "UNKNOWN", WAIVED: "WAIVED", SKIP: "SKIP", PASS: "PASS"}
STYLE = {FAIL: "bold red", WARN: "yellow", UNKNOWN: "magenta", WAIVED: "cyan", SKIP: "dim", PASS: "green"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def verdict_line(findings: list[Finding], exit_code: int, hostname: str | None, timed_out: bool = False,
                 strict: bool = False) -> str:
    """``FAIL: 1 failed (+32 folded), 1 warning (node hgx-01)``: root problems are counted; the
    findings that follow from them (folded beneath their root, :mod:`ccdiag.checks.causes`) are
    counted beside, so one NVSwitch down reads as one failure, not 33."""
    counts = Counter(f.status for f in findings if not f.caused_by or f.status in (PASS, SKIP))
    folded = sum(1 for f in findings if f.caused_by and f.status in (FAIL, WARN, UNKNOWN))
    code = ExitCode(exit_code) if exit_code in {int(c) for c in ExitCode} else ExitCode.INTERNAL
    word = VERDICT_WORD.get(code, "ERROR")
    if code == ExitCode.OK and counts[WARN]:
        word = "WARN"
    parts = [f"{counts[FAIL]} failed" + (f" (+{folded} folded)" if folded else "")]
    waived = sum(1 for f in findings if f.status == WAIVED and not (f.waived or {}).get("with"))
    if waived:
        parts.append(f"{waived} waived")
    if counts[WARN]:
        parts.append(_plural(counts[WARN], "warning"))
    if counts[UNKNOWN]:
        parts.append(f"{counts[UNKNOWN]} unknown")
    if code != ExitCode.FAIL:
        parts.append(f"{counts[PASS]} passed")
        if counts[SKIP]:
            parts.append(f"{counts[SKIP]} skipped")
    tail = f" (node {hostname or 'unknown'})"
    if timed_out:
        tail += ", deadline reached"
    if strict and code == ExitCode.FAIL and not counts[FAIL] and counts[WARN]:
        tail += ", warnings fail with --strict"
    return f"{word}: {', '.join(parts)}{tail}"


def short_remedy(remedy: str | None) -> str | None:
    """The remedy's first sentence (whole: never cut mid-sentence), lower-cased start."""
    if not remedy:
        return None
    first = remedy.strip().split("\n")[0]
    m = _SENTENCE_END.search(first)
    if m:
        first = first[:m.start()]
    first = first.rstrip(".")
    return first[:1].lower() + first[1:] if first[:2] != first[:2].upper() else first


#: the end of a sentence or clause: ". " or "; ", but not after "e.g." / "i.e." / "etc." / "vs."
#: and not inside parentheses (a remark in brackets belongs to its sentence)
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.;] (?![^(]*\))")


def value_text(value: object) -> str:
    """A value as a person reads it: ``3 -> 57`` for a counter's before/after, ``yes``/``no``,
    ``not read`` for an absent value, lists and mappings without brackets or quotes."""
    if value is None:
        return "not read"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        if set(value) == {"before", "after"}:
            return f"{value_text(value['before'])} -> {value_text(value['after'])}"
        return ", ".join(f"{k}={value_text(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(value_text(v) for v in value) or "none"
    return str(value)


def _evidence_text(ev: Evidence) -> str:
    return f"{ev.source}: {value_text(ev.value)}"


def one_line(f: Finding) -> str:
    """``FAIL gpu.lost GPU6 (GPU-..., 0000:...) lost on the bus [nvmlDeviceGetUUID(6): gpu_lost] -> reboot``."""
    line = f"{STATUS_WORD.get(f.status, f.status.upper())} {f.check} {f.component.label()} {f.summary}"
    if f.evidence:
        line += f" [{_evidence_text(f.evidence[0])}]"
    remedy = short_remedy(f.remedy)
    if remedy and f.status in (FAIL, WARN, UNKNOWN):
        line += f" -> {remedy}"
    return line


def detail_lines(f: Finding) -> list[str]:
    """Everything an operator needs beyond the one-liner: each piece of evidence with where it was
    read, what was expected and why, and the full remedy."""
    out = [f"{STATUS_WORD.get(f.status, f.status.upper())} {f.check}: {f.component.label()}"]
    out.append(f"    {f.summary}")
    for ev in f.evidence:
        out.append(f"    evidence: {ev.what} = {value_text(ev.value)}  ({ev.source})")
    if f.expected:
        src = f"  ({f.expected_source})" if f.expected_source else ""
        out.append(f"    expected: {f.expected}{src}")
    if f.remedy:
        out.append(f"    remedy:   {f.remedy}")
    if f.details.get("follows_waived"):
        out.append(f"    follows:  {f.details['follows_waived']}, which is waived; a waiver never covers another "
                   f"component")
    return out


def lapse_text(seconds: float | None) -> str:
    """``lapses in 2 days`` / ``lapses in 5 h`` / ``lapses today``."""
    if seconds is None:
        return ""
    if seconds >= 86400 * 1.5:
        return f"lapses in {seconds / 86400:.2g} days"
    if seconds >= 3600:
        return f"lapses in {seconds / 3600:.0f} h"
    return "lapses within the hour"


def waiver_text(f: Finding) -> str:
    """``fail, waived until 2026-12-04 by alice: cable on order (lapses in 2 days)``."""
    w = f.waived or {}
    lapsing = f" ({lapse_text(w.get('lapses_in_s'))})" if w.get("lapsing") else ""
    return f"{w.get('status', '?')}, waived until {w.get('until')} by {w.get('by')}: {w.get('reason')}{lapsing}"


def _waived_lines(f: Finding, findings: list[Finding], quiet: bool) -> list[tuple[str, str | None]]:
    """One waived finding a waiver names: its heading, the findings waived with it, what was found
    and the waiver (who, why, until when)."""
    style = STYLE[WAIVED]
    if quiet:
        return [(f"WAIVED {f.check} {f.component.label()} {f.summary} [{waiver_text(f)}]", style)]
    lines: list[tuple[str, str | None]] = [(f"WAIVED {f.check} {f.component.label()}", style)]
    folded = _folded_line(f, [g for g in findings if g.status == WAIVED and (g.waived or {}).get("with") == f.key])
    if folded:
        lines.append((folded, None))
    lines.append((f"    {f.summary}", None))
    lines.append((f"    waiver:   {waiver_text(f)}", None))
    return lines


#: components named on a folded line before "and N more"
FOLDED_NAMES = 6


def _folded_line(cause: Finding, problems: list[Finding]) -> str | None:
    """``  + 9 follow from it: gpu.clocks, gpu.ecc, ... GPU6 (unknown); gpu.count node (fail)``."""
    effects = [f for f in problems if f.caused_by == cause.key]
    if not effects:
        return None
    groups: dict[tuple[str, str], list[str]] = {}
    for f in effects:
        status = (f.waived or {}).get("status", f.status) if f.status == WAIVED else f.status
        groups.setdefault((f.component.name, status), []).append(f.check)
    # the same checks on many components (32 links behind one switch) read as one part
    by_checks: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for (name, status), checks in groups.items():
        by_checks.setdefault((tuple(checks), status), []).append(name)
    parts = []
    for (check_ids, status), names in by_checks.items():
        shown = ", ".join(names[:FOLDED_NAMES]) + (f" and {len(names) - FOLDED_NAMES} more" if len(names) > FOLDED_NAMES
                                                  else "")
        parts.append(f"{', '.join(check_ids)} {shown} ({status})")
    return f"  + {len(effects)} follow{'s' if len(effects) == 1 else ''} from it: " + "; ".join(parts)


def skip_lines(findings: Iterable[Finding]) -> list[str]:
    """One line per distinct reason for skipping: on a node without GPUs a dozen GPU checks skip
    for the same reason, and one line says so."""
    groups: dict[tuple[str, str], list[str]] = {}
    for f in findings:
        if f.status == SKIP and not f.caused_by:  # a skip that follows from a root is folded under it
            groups.setdefault((f.component.label(), f.summary), []).append(f.check)
    out = []
    for (label, summary), checks in groups.items():
        names = checks[0] if len(checks) == 1 else f"{checks[0]} (+{len(checks) - 1}: {', '.join(checks[1:])})"
        where = "" if label == "node" else f" {label}"
        out.append(f"SKIP {names}{where}: {summary}")
    return out


def pass_summary(findings: Iterable[Finding], status: str = PASS, width: int | None = None) -> str | None:
    """``passed: gpu.ecc x8, pcie.link x9, ...`` (check ids with how many components). ``width``: at
    most that many columns, the rest counted (``... and 24 more checks``), for a terminal where a
    12-line list would push the verdict off the screen."""
    counts = Counter(f.check for f in findings if f.status == status)
    if not counts:
        return None
    word = {PASS: "passed", SKIP: "skipped"}.get(status, status)
    items = [name if n == 1 else f"{name} x{n}" for name, n in sorted(counts.items())]
    head = f"{word} ({sum(counts.values())}): "
    text = head + ", ".join(items)
    if width is None or len(text) <= width:
        return text
    for shown in range(len(items) - 1, 0, -1):
        text = f"{head}{', '.join(items[:shown])}, ... and {len(items) - shown} more checks"
        if len(text) <= width:
            return text
    return f"{head}{len(items)} checks"


#: the widest line of the text report: it reads in a terminal, a Slurm log and a ticket alike
MAX_WIDTH = 100
#: a width no line reaches: ``--quiet`` piped into a log is never wrapped
UNWRAPPED = 1 << 20
#: continuation indent of a wrapped line, by how the line starts
_HANGING = (("    evidence: ", 14), ("    expected: ", 14), ("    remedy:   ", 14), ("    waiver:   ", 14),
            ("    follows:  ", 14), ("  + ", 6), ("    ", 6))


def wrap_line(text: str, width: int = MAX_WIDTH) -> list[str]:
    """``text`` in lines of at most ``width`` columns, never splitting a word, path, address or UUID,
    nor a command in backticks (a single token longer than the line stands whole on its own line);
    continuations hang under the line's label, always at least 6 columns deep, so a reader (or a
    test) can join them back: a report line never starts with more than 4 spaces."""
    from ccdiag.core.textfit import wrap

    if len(text) <= width:
        return [text]
    indent = next((n for prefix, n in _HANGING if text.startswith(prefix)), 6)
    lead = text[: len(text) - len(text.lstrip(" "))]
    return wrap(text[len(lead):], width, indent=" " * indent, first=lead)


def _root_lines(f: Finding, problems: list[Finding], quiet: bool) -> list[tuple[str, str | None]]:
    """One root finding, once: its heading, what follows from it, then summary, evidence, remedy."""
    style = STYLE[f.status]
    if quiet:
        return [(one_line(f), style)]
    lines: list[tuple[str, str | None]] = [(f"{STATUS_WORD.get(f.status, f.status.upper())} {f.check} "
                                            f"{f.component.label()}", style)]
    folded = _folded_line(f, problems)
    if folded:
        lines.append((folded, None))
    lines.extend((text, None) for text in detail_lines(f)[1:])
    return lines


def render_lines(findings: list[Finding], exit_code: int, hostname: str | None, timed_out: bool = False,
                 quiet: bool = False, strict: bool = False, width: int = MAX_WIDTH, terminal: bool = False,
                 waivers: Iterable = (), scope: str | None = None) -> list[tuple[str, str | None]]:
    """(text, style) lines of the terminal report, each finding once, root causes first, every line
    at most ``width`` columns. ``quiet``: the verdict and one line per root problem (and per waived
    one). ``terminal``: end with the summary (the roots, the waived, the verdict again) and fold the
    passed list to one line. ``waivers``: the run's waiver outcomes (a waiver that names nothing in
    the run is said so). ``scope``: what the verdict is about when not the whole node (``GPU3 ...``)."""
    verdict = verdict_line(findings, exit_code, hostname, timed_out, strict)
    if scope:
        verdict = f"{verdict}, {scope}"
    verdict_style = STYLE.get(_verdict_status(exit_code, findings))
    lines: list[tuple[str, str | None]] = [(verdict, verdict_style)]
    problems = [f for f in findings if f.status in (FAIL, UNKNOWN, WARN)]  # findings come sorted: fail first
    folded = problems + [f for f in findings if f.status == SKIP and f.caused_by]
    from ccdiag.checks.causes import ordered_roots
    from ccdiag.checks.waiving import waived_roots

    roots = ordered_roots(problems)
    for f in roots:
        if not quiet:
            lines.append(("", None))
        lines.extend(_root_lines(f, folded, quiet))
    excused = waived_roots(findings)
    for f in excused:
        if not quiet:
            lines.append(("", None))
        lines.extend(_waived_lines(f, findings, quiet))
    if not quiet:
        notes = unmatched_waiver_lines(waivers)
        if notes:
            lines.append(("", None))
            lines.extend((text, STYLE[WARN]) for text in notes)
        skipped = skip_lines(findings)
        if skipped:
            lines.append(("", None))
            lines.extend((text, STYLE[SKIP]) for text in skipped)
        passed = pass_summary(findings, width=width if terminal else None)
        if passed:
            lines.append((passed, STYLE[PASS]))
        if terminal:
            lines.append(("", None))
            lines.extend(summary_lines(roots, excused, findings))
            lines.append((verdict, verdict_style))
    from ccdiag.core.output import sanitize

    # findings quote what was read (host and device names, command output): escaped for a terminal
    return [(part, style) for text, style in lines for part in wrap_line(sanitize(text), width)]


#: root problems the summary names one per line before "and N more above" (a 40-line terminal
#: keeps the summary and the verdict on screen)
SUMMARY_ROOTS = 12


def summary_lines(roots: list[Finding], waived: list[Finding], findings: list[Finding]) -> list[tuple[str, str | None]]:
    """The end of a terminal report: ``summary: ...``, then each root problem in one line (status,
    action, check, component, ``(+N)`` findings that follow from it), then each waived one."""
    if not roots and not waived:
        return []
    from ccdiag.checks.causes import effects_of, node_action

    head = f"summary: {_plural(len(roots), 'root problem')}"
    if roots:
        head += f", the node's action: {node_action(findings)}"
    if waived:
        head += f", {len(waived)} waived"
    out: list[tuple[str, str | None]] = [(head, None)]
    for f in roots[:SUMMARY_ROOTS]:
        n = sum(1 for e in effects_of(f, findings) if e.status in (FAIL, WARN, UNKNOWN))
        more = f" (+{n})" if n else ""
        subject = f" {f.subject}" if f.subject else ""
        out.append((f"  {STATUS_WORD[f.status]:<7} {action_of(f):<11} {f.check} {f.component.name}{subject}{more}",
                    STYLE[f.status]))
    if len(roots) > SUMMARY_ROOTS:
        out.append((f"  ... and {len(roots) - SUMMARY_ROOTS} more root problems above", None))
    for f in waived[:SUMMARY_ROOTS]:
        w = f.waived or {}
        lapsing = f", {lapse_text(w.get('lapses_in_s'))}" if w.get("lapsing") else ""
        out.append((f"  {'WAIVED':<7} {f.check} {f.component.name}, until {w.get('until')}{lapsing}", STYLE[WAIVED]))
    if len(waived) > SUMMARY_ROOTS:
        out.append((f"  ... and {len(waived) - SUMMARY_ROOTS} more waived above", None))
    return out


def unmatched_waiver_lines(waivers: Iterable) -> list[str]:
    """A waiver whose check ran but which names no finding of it: most likely the component is
    spelled otherwise than ccdiag prints it, and the problem it was meant for still counts."""
    out = []
    for o in waivers:
        if getattr(o, "check_ran", False) and not getattr(o, "matched", 1) and o.state != "lapsed":
            w = o.waiver
            where = f" (policy line {w.line})" if w.line else ""
            out.append(f"NOTE the waiver of {w.names()}{where} names no finding of this run: spell the component "
                       f"as `ccdiag check` prints it")
    return out


def _verdict_status(exit_code: int, findings: list[Finding]) -> str:
    if exit_code == ExitCode.FAIL:
        return FAIL
    if exit_code == ExitCode.UNEVALUATED:
        return UNKNOWN
    return WARN if any(f.status == WARN for f in findings) else PASS


def render_text(findings: list[Finding], exit_code: int, hostname: str | None, timed_out: bool = False,
                quiet: bool = False, strict: bool = False, width: int = MAX_WIDTH, terminal: bool = False,
                waivers: Iterable = (), scope: str | None = None) -> str:
    return "\n".join(t for t, _ in render_lines(findings, exit_code, hostname, timed_out, quiet, strict, width,
                                                terminal=terminal, waivers=waivers, scope=scope)) + "\n"


def print_result(findings: list[Finding], exit_code: int, hostname: str | None, timed_out: bool = False,
                 quiet: bool = False, strict: bool = False, waivers: Iterable = (), scope: str | None = None) -> None:
    """Print on stdout, coloured only on a terminal (``ccdiag.core.output.console`` decides); on a
    terminal (not ``quiet``) the report ends with its summary and the verdict again."""
    from rich.text import Text

    from ccdiag.core.output import console

    out = console()
    from ccdiag.core.textfit import text_width

    width = min(MAX_WIDTH, text_width(piped=MAX_WIDTH))  # piped: $COLUMNS when set
    if quiet and not out.is_terminal:
        # a Slurm prolog logs each line it reads as one syslog record: piped, ``--quiet`` keeps its
        # promise of one line per problem, so a record is a whole finding to grep for
        width = UNWRAPPED
    for text, style in render_lines(findings, exit_code, hostname, timed_out, quiet, strict, max(width, 40),
                                    terminal=out.is_terminal and not quiet, waivers=waivers, scope=scope):
        out.print(Text(text, style=style or ""), soft_wrap=True)
