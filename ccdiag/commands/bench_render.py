"""The terminal form of benchmark results: a verdict line, then per benchmark what ran (or why it
could not), its figures against their expected values, a GPU matrix for peer copies, and the
findings that name a component, root cause first."""

from __future__ import annotations

from typing import Any

import click

from ccdiag.core.findings import PASS, STATUS_RANK
from ccdiag.core.output import sanitize
from ccdiag.report.render import MAX_WIDTH, detail_lines, verdict_line, wrap_line

#: figures listed per benchmark before "... N more" (JSON always has them all)
MAX_ROWS = 24


def _fig(m: Any) -> str:
    if m.error:
        return f"error: {m.error}"
    if m.gbyte_s is None:
        return "no figure"
    e = m.expected
    s = f"{m.gbyte_s:8.1f} GB/s"
    if m.ratio is not None and e is not None and e.gbyte_s:
        s += f"  {m.ratio:4.0%} of {e.gbyte_s:.1f} ({e.bottleneck_desc or e.level or 'path'})"
    elif m.ratio is not None:
        s += f"  {m.ratio:4.0%} of the peers' median"
    if m.latency_us is not None:
        s += f"  latency {m.latency_us:.1f} us"
    return f"{s}  {m.status}"


def matrix_lines(ms: list[Any], op: str | None = None, direction: str = "uni") -> list[str]:
    """GPU x GPU figures of one kind of peer copy (GB/s, and % of the path); ``op``: the most
    common one-way operation when not given."""
    if op is None:
        ops = [m.op for m in ms if m.direction == direction and m.op != "staged"]
        op = max(set(ops), key=ops.count) if ops else "write"
    cells = {(m.src, m.dst): m for m in ms if m.op == op and m.direction == direction and m.gbyte_s is not None}
    gpus = sorted({a for a, _ in cells} | {b for _, b in cells}, key=lambda g: (len(g), g))
    if len(gpus) < 2:
        return []
    out = [f"  {op} {direction} GB/s (% of path)  rows: source, columns: destination",
           "  " + " " * 6 + "".join(f"{g:>13}" for g in gpus)]
    for a in gpus:
        row = f"  {a:6}"
        for b in gpus:
            m = cells.get((a, b))
            if a == b or m is None:
                row += f"{'-':>13}"
            else:
                pct = f"({m.ratio:.0%})" if m.ratio is not None else ""
                row += f"{m.gbyte_s:7.1f}{pct:>6}"
        out.append(row)
    return out


def result_lines(results: list[Any], exit_code: int, hostname: str | None, width: int = MAX_WIDTH) -> list[str]:
    """The report's lines. Findings (summary, evidence, expectation, remedy) wrap within ``width``
    columns the way ``ccdiag check`` wraps them; figure rows and GPU matrices are tables and stay
    whole, since a wrapped row would no longer line up with its header. Every line comes escaped
    for a terminal (it quotes what was read), once: findings before they are wrapped, the rest here."""
    findings = [f for r in results for f in r.findings]
    if results and all(r.outcome == "skip" for r in results):
        lines = [f"NOT MEASURED: no benchmark can run here (node {hostname or 'unknown'}); the reasons follow"]
    else:
        lines = [verdict_line(findings, exit_code, hostname)]
    for r in results:
        head = f"{r.name:9} {r.outcome}"
        if r.reason:
            head += f": {r.reason}"
        elif r.measurements:
            head += f": {len(r.measurements)} figure(s) in {r.duration_s:.1f} s"
        lines.append(head)
        if r.name == "p2p" or r.name.startswith("import:") and any(m.bench == "p2p" for m in r.measurements):
            lines += matrix_lines([m for m in r.measurements if m.bench == "p2p"])
        shown = list(r.measurements)
        shown.sort(key=lambda m: (m.ratio if m.ratio is not None else 9.0))
        for m in shown[:MAX_ROWS]:
            lines.append(f"  {m.label:28} {m.op:10} {m.direction:5} {_fig(m)}")
            if m.note and m.status != PASS:
                lines.append(f"  {'':28} {m.note}")
        if len(shown) > MAX_ROWS:
            lines.append(f"  ... {len(shown) - MAX_ROWS} more (--json lists every figure)")
    lines = [sanitize(line) for line in lines]
    problems = sorted((f for f in findings if f.status != PASS), key=lambda f: STATUS_RANK.get(f.status, 9))
    if problems:
        lines.append("")
        for f in problems:
            lines += [part for text in detail_lines(f) for part in wrap_line(sanitize(text), width)]
    passes = [f for f in findings if f.status == PASS]
    if passes:
        lines.append("")
        lines += [part for f in passes for part in wrap_line(sanitize(f"PASS {f.check}: {f.summary}"), width)]
    return lines


def print_results(results: list[Any], exit_code: int, hostname: str | None) -> None:
    import shutil
    import sys

    width = MAX_WIDTH
    if sys.stdout.isatty():
        width = max(40, min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns))
    for line in result_lines(results, exit_code, hostname, width):
        click.echo(line)


def bench_status_line(results: list[Any]) -> str:
    """One line for `check --bench`: which benchmarks ran, and why the others did not (a verdict
    that silently left the benchmarks out would read as if they had passed)."""
    if not results:
        return "benchmarks: not run: no time was left for the bench stage (raise --timeout)"
    ran = [r for r in results if r.outcome != "skip"]
    skipped = [r for r in results if r.outcome == "skip"]
    reasons: dict[str, list[str]] = {}
    for r in skipped:
        reasons.setdefault(r.reason or "no reason given", []).append(r.name)
    why = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in reasons.items())
    if not ran:
        return sanitize(f"benchmarks: none ran here ({why})")
    head = f"benchmarks: {len(ran)} ran ({', '.join(f'{r.name} {r.outcome}' for r in ran)})"
    return sanitize(head + (f", {len(skipped)} skipped ({why})" if skipped else ""))
