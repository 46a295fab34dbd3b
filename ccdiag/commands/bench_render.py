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
    if m.value is None:
        return "no figure"
    e = m.expected
    compute = m.tflops is not None
    s = f"{m.value:8.1f} {'TFLOPS' if compute else 'GB/s'}"
    cap = (e.tflops if compute else e.gbyte_s) if e is not None else None
    if m.ratio is not None and e is not None and cap:
        s += f"  {m.ratio:4.0%} of {cap:.1f} ({e.bottleneck_desc or e.level or 'path'})"
    elif m.ratio is not None:
        s += f"  {m.ratio:4.0%} of the peers' median"
    if m.latency_us is not None:
        s += f"  latency {m.latency_us:.1f} us"
    return f"{s}  {m.status}"


def matrix_lines(ms: list[Any], op: str | None = None, direction: str = "uni", width: int = MAX_WIDTH) -> list[str]:
    """GPU x GPU figures of one kind of peer copy (GB/s, and % of the path); ``op``: the most
    common one-way operation when not given. Wider than ``width`` (8 GPUs need 112 columns), the
    matrix splits into blocks of whole columns, each with the row labels."""
    from ccdiag.core.textfit import matrix_text

    if op is None:
        ops = [m.op for m in ms if m.direction == direction and m.op != "staged"]
        op = max(set(ops), key=ops.count) if ops else "write"
    cells = {(m.src, m.dst): m for m in ms if m.op == op and m.direction == direction and m.gbyte_s is not None}
    gpus = sorted({a for a, _ in cells} | {b for _, b in cells}, key=lambda g: (len(g), g))
    if len(gpus) < 2:
        return []

    def cell(a: str, b: str) -> str:
        m = cells.get((a, b))
        if a == b or m is None:
            return "-"
        return f"{m.gbyte_s:.1f}" + (f" ({m.ratio:.0%})" if m.ratio is not None else "")

    return matrix_text(gpus, gpus, [[cell(a, b) for b in gpus] for a in gpus], width, indent="  ",
                       title=f"{op} {direction} GB/s (% of path)  rows: source, columns: destination")


def _figure_lines(m: Any, label_w: int, op_w: int, width: int) -> list[str]:
    """One figure's row (label, operation, direction, figure against its expected value), the figure
    wrapped under itself when the row is wider than ``width``; then its note, when it did not pass."""
    from ccdiag.core.textfit import wrap

    prefix = sanitize(f"  {m.label:{label_w}} {m.op:{op_w}} {m.direction:5} ")
    hang = " " * (len(prefix) if width - len(prefix) >= 24 else 6)
    lines = wrap(sanitize(_fig(m)), width, indent=hang, first=prefix)
    if m.note and m.status != PASS:
        lines += wrap(sanitize(m.note), width, indent=" " * (label_w + 3) + "  ", first=" " * (label_w + 3))
    return lines


def _verdict(results: list[Any], findings: list[Any], exit_code: int, hostname: str | None) -> str:
    """The first line: the verdict, or that nothing could be measured when every benchmark skipped."""
    if results and all(r.outcome == "skip" for r in results):
        return f"NOT MEASURED: no benchmark can run here (node {hostname or 'unknown'}); the reasons follow"
    return verdict_line(findings, exit_code, hostname)


def _bench_head(r: Any) -> str:
    """``<name> <outcome>``: why it did not run, or how many figures it gave in how long."""
    head = f"{r.name:9} {r.outcome}"
    if r.reason:
        head += f": {r.reason}"
    elif r.measurements:
        head += f": {len(r.measurements)} figure(s) in {r.duration_s:.1f} s"
    return head


def _figure_table(ms: list[Any], width: int) -> list[str]:
    """The figures, worst against its expected value first, at most :data:`MAX_ROWS` of them."""
    shown = sorted(ms, key=lambda m: (m.ratio if m.ratio is not None else 9.0))
    label_w = min(28, max((len(m.label) for m in shown[:MAX_ROWS]), default=0))
    op_w = max((len(m.op) for m in shown[:MAX_ROWS]), default=0)
    lines = [line for m in shown[:MAX_ROWS] for line in _figure_lines(m, label_w, op_w, width)]
    if len(shown) > MAX_ROWS:
        lines.append(f"  ... {len(shown) - MAX_ROWS} more (--json lists every figure)")
    return lines


def _bench_lines(r: Any, width: int) -> list[str]:
    """One benchmark: its head line, how its file was read, its GPU matrix (peer copies), its figures."""
    lines = [_bench_head(r)]
    if r.params.get("read_as"):
        lines += wrap_line(f"  read as {r.params['read_as']}", width)
    if r.name == "p2p" or r.name.startswith("import:") and any(m.bench == "p2p" for m in r.measurements):
        lines += matrix_lines([m for m in r.measurements if m.bench == "p2p"], width=width)
    return lines + _figure_table(list(r.measurements), width)


def _finding_lines(findings: list[Any], width: int) -> list[str]:
    """The problems, worst first, each in full; then one line per pass."""
    lines: list[str] = []
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


def result_lines(results: list[Any], exit_code: int, hostname: str | None, width: int = MAX_WIDTH) -> list[str]:
    """The report's lines. Findings (summary, evidence, expectation, remedy) wrap within ``width``
    columns the way ``ccdiag check`` wraps them; figure rows and GPU matrices are tables and stay
    whole, since a wrapped row would no longer line up with its header. Every line comes escaped
    for a terminal (it quotes what was read), once: findings before they are wrapped, the rest here."""
    from ccdiag.core.textfit import wrap_lines

    findings = [f for r in results for f in r.findings]
    lines = [_verdict(results, findings, exit_code, hostname)]
    for r in results:
        lines += _bench_lines(r, width)
    lines = wrap_lines([sanitize(line) for line in lines], width)  # head lines with a long reason
    return lines + _finding_lines(findings, width)


def print_results(results: list[Any], exit_code: int, hostname: str | None) -> None:
    from ccdiag.core.textfit import text_width

    width = min(MAX_WIDTH, text_width(piped=MAX_WIDTH))  # piped: $COLUMNS when set, like `check`
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
