"""The exit code of `ccdiag bench` and `bench import` (ccdiag.bench.runner.exit_code) on SYNTHESIZED
results: a failure is 1; OK needs something judged, never only something read; a pasted support
file (nvidia-smi -q, dcgmi diag) has no figures and is judged by its findings alone."""

from __future__ import annotations

import pytest

from ccdiag.bench.result import BenchResult, Measurement
from ccdiag.bench.runner import exit_code
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import Component, Finding

OK, FAIL, UNEVALUATED = ExitCode.OK, ExitCode.FAIL, ExitCode.UNEVALUATED


def _finding(status: str) -> Finding:
    return Finding("bench.x", status, Component("node", "node"), f"a {status} finding")


def _file(*statuses: str) -> BenchResult:
    """A support file judged by its findings (it gives no figure)."""
    return BenchResult("import:nvidia-smi-q", "ran", findings=[_finding(s) for s in statuses],
                       params={"judged_by_findings": True})


def _bench(outcome: str = "ran", figure_status: str | None = "pass", *statuses: str) -> BenchResult:
    ms = [] if figure_status is None else [Measurement("h2d", "host", "GPU0", gbyte_s=50.0, status=figure_status)]
    return BenchResult("h2d", outcome, measurements=ms, findings=[_finding(s) for s in statuses])


@pytest.mark.parametrize("results, strict, want", [
    ([_file("pass")], False, OK),
    ([_file("warn", "unknown")], False, OK),  # a warning is a judgement; the unknown does not undo it
    ([_file("pass", "unknown")], True, UNEVALUATED),  # strict: an unknown finding leaves it unjudged
    ([_file("unknown")], False, UNEVALUATED),  # read, nothing judged
    ([_file()], False, UNEVALUATED),
    ([_file("warn")], True, FAIL),  # strict: a warning fails
    ([_file("fail")], False, FAIL),
])
def test_a_file_judged_by_its_findings_alone(results, strict, want):
    assert exit_code(results, strict) == want


@pytest.mark.parametrize("results, strict, want", [
    ([_bench()], False, OK),
    ([_bench(figure_status="unknown")], False, UNEVALUATED),  # a figure read but held to nothing
    ([_bench(figure_status=None)], False, UNEVALUATED),  # nothing measured
    ([_bench(), _bench("timeout")], False, UNEVALUATED),  # one ran out of time
    ([_bench(), _bench("error", None)], False, UNEVALUATED),
    ([_bench("ran", "pass", "unknown")], False, OK),
    ([_bench("ran", "pass", "unknown")], True, UNEVALUATED),
    ([_bench(), _file("unknown")], True, UNEVALUATED),  # strict sees the file's unknown too
    ([_bench(figure_status=None), _file("pass")], False, UNEVALUATED),  # the figures decide beside a file
    ([_bench("timeout", "pass", "fail")], False, FAIL),  # a failure outranks the time running out
])
def test_benchmarks_with_figures_need_one_judged(results, strict, want):
    assert exit_code(results, strict) == want
