"""The terminal form of benchmark results (ccdiag.commands.bench_render) on SYNTHESIZED results: the
worst figure first and at most MAX_ROWS of them, the problems before the passes, NOT MEASURED when
no benchmark could run, and nothing wider than the terminal outside the figure tables."""

from __future__ import annotations

from ccdiag.bench.result import BenchResult, Measurement
from ccdiag.commands.bench_render import MAX_ROWS, result_lines
from ccdiag.core.findings import Component, Finding


def _figure(i: int, ratio: float | None) -> Measurement:
    return Measurement("h2d", "host", f"GPU{i}", gbyte_s=10.0 + i, ratio=ratio, status="pass")


def test_figures_come_worst_first_and_stop_at_max_rows():
    ms = [_figure(i, 0.5 + i / 100) for i in range(MAX_ROWS + 3)] + [_figure(99, None), _figure(98, 0.1)]
    lines = result_lines([BenchResult("h2d", "ran", measurements=ms, duration_s=1.0)], 0, "node1")
    rows = [line for line in lines if line.startswith("  ") and "GB/s" in line]
    assert len(rows) == MAX_ROWS and "GPU98" in rows[0] and "GPU0 " in rows[1]
    assert not any("GPU99" in r for r in rows)  # no ratio: last, past the cut
    assert f"  ... {len(ms) - MAX_ROWS} more (--json lists every figure)" in lines
    assert lines[1] == f"h2d       ran: {len(ms)} figure(s) in 1.0 s"


def test_problems_come_before_passes_and_every_line_fits():
    found = [Finding("bench.h2d", "pass", Component("gpu", "GPU0", gpu=0), "h2d at 88 % of its link"),
             Finding("bench.h2d", "fail", Component("gpu", "GPU1", gpu=1), "h2d at 12 % of its link " * 6),
             Finding("bench.h2d", "warn", Component("gpu", "GPU2", gpu=2), "h2d at 70 % of its link")]
    res = BenchResult("h2d", "ran", reason="the reason it stopped early, said at some length " * 4, findings=found)
    lines = result_lines([res], 1, "node1", width=60)
    assert all(len(line) <= 60 for line in lines)
    fail, warn, ok = (next(i for i, line in enumerate(lines) if word in line)
                      for word in ("12 %", "70 %", "PASS bench.h2d"))
    assert fail < warn < ok


def test_nothing_could_run_says_not_measured_with_the_reasons():
    lines = result_lines([BenchResult("h2d", "skip", reason="no GPU here"),
                          BenchResult("ib_write", "skip", reason="no RDMA device")], 3, None)
    assert lines[0].startswith("NOT MEASURED: no benchmark can run here (node unknown)")
    assert lines[1:] == ["h2d       skip: no GPU here", "ib_write  skip: no RDMA device"]
