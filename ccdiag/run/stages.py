"""One deadline split into stages: probing, judging, and (when asked for) benchmarking.

Why stages with their own shares: a prolog gets one deadline, and the stages compete for it. If the
probes could use all of it, a wedged GPU that hangs one probe would leave no time to judge what
the other probes already showed, and a node with a dead NIC would come back "could not evaluate"
(exit 3) instead of "failed" (exit 1). So the judging stage keeps a reserve the probes cannot
touch, and a benchmark stage, when present, has its own share after judging.

A command's deadline may begin before its evaluation (``check`` counts from the process's start:
opening a snapshot of a large node takes seconds), and a report still has to be written after it:
:meth:`Budget.plan` takes when the evaluation began and the report's reserve, and splits only
what lies between (:func:`report_reserve_s` sizes the reserve by the node's PCI functions).

Each stage ends at an absolute time. A stage that finishes early leaves its time to the stages
after it, because their ends do not move. A stage that *raises* is a bug in ccdiag, not a slow
node: :class:`StageError` carries the stage's name and the cause, and the command line turns it
into exit 4 with that one line (never "deadline reached").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

#: the judge reserve: this share of the deadline, at least JUDGE_MIN_S and at most JUDGE_MAX_S.
#: Judging the 8-GPU samples takes about 0.1 s on a 2-core machine (bench/bench_check.py); the
#: floor leaves an order of magnitude for larger nodes, the ceiling keeps long deadlines for probes.
JUDGE_SHARE = 0.1
JUDGE_MIN_S = 1.0
JUDGE_MAX_S = 5.0
#: time a stage running on a worker gets past its end before it is abandoned
GRACE_S = 0.5


class StageError(Exception):
    """A stage raised: a bug, reported as exit 4 naming the stage and the cause."""

    def __init__(self, stage: str, cause: BaseException):
        self.stage = stage
        self.cause = cause
        super().__init__(f"stage {stage} failed: {type(cause).__name__}: {cause}")


class StageTimeout(Exception):
    """A stage did not finish by its end (plus grace)."""

    def __init__(self, stage: str, budget_s: float):
        self.stage = stage
        self.budget_s = budget_s
        super().__init__(f"stage {stage} did not finish within {budget_s:.3g}s")


@dataclass(frozen=True)
class Budget:
    """Absolute ends (``time.monotonic()`` values) of each stage of one run.

    ``start`` <= ``began`` <= ``probe_end`` <= ``judge_end`` <= ``bench_end`` == ``deadline`` -
    ``report_s``. ``start`` is when the deadline began to count (for a command, the process's
    start), ``began`` when the evaluation did (after start-up and opening the host or snapshot);
    ``report_s`` is kept after the evaluation for building and writing the report. Build with
    :meth:`plan`."""

    start: float
    deadline: float
    probe_end: float
    judge_end: float
    bench_end: float
    began: float = 0.0
    report_s: float = 0.0

    @classmethod
    def plan(cls, deadline_s: float, bench_s: float = 0.0, start: float | None = None, *,
             began: float | None = None, report_s: float = 0.0) -> "Budget":
        """Split ``deadline_s`` from ``start`` (now): what ``began`` (now, or ``start``) leaves,
        less ``report_s`` for the report, goes to the evaluation; of that, benchmarks get ``bench_s``
        at the end, judging its reserve before that, probing the rest. A deadline too short for
        every share gives the judge its reserve first, then the probes, then the benchmarks."""
        start = time.monotonic() if start is None else start
        began = start if began is None else max(start, began)
        total = max(0.0, float(deadline_s))
        report = max(0.0, float(report_s))
        avail = max(0.0, total - (began - start) - report)
        reserve = min(avail, max(JUDGE_MIN_S, min(JUDGE_MAX_S, JUDGE_SHARE * avail)))
        bench = min(max(0.0, float(bench_s)), max(0.0, avail - reserve) / 2)
        probe = max(0.0, avail - reserve - bench)
        return cls(start, start + total, began + probe, began + probe + reserve, began + avail, began, report)

    def left(self, end: float) -> float:
        """Seconds from now until ``end`` (0 when passed)."""
        return max(0.0, end - time.monotonic())

    @property
    def deadline_s(self) -> float:
        return self.deadline - self.start

    def to_json(self) -> dict:
        began = max(self.began, self.start)
        out = {"deadline_s": round(self.deadline_s, 3), "probe_s": round(self.probe_end - began, 3),
               "judge_reserve_s": round(self.judge_end - self.probe_end, 3),
               "bench_s": round(self.bench_end - self.judge_end, 3)}
        if began > self.start or self.report_s:
            out.update(load_s=round(began - self.start, 3), report_reserve_s=round(self.report_s, 3))
        return out


#: the report's reserve: REPORT_RESERVE_S, at most REPORT_RESERVE_SHARE of the deadline (a short
#: deadline must still leave the probes most of their time)
REPORT_RESERVE_S = 2.0
REPORT_RESERVE_SHARE = 0.1
#: a node's report grows with its PCI functions (each one's links, AER counters, findings): the
#: reserve grows by this per function (a 3,000-NIC node has 6,216), at most REPORT_RESERVE_MAX_SHARE
#: of the deadline. Only the verdict with its problems must fit (the deadline guard writes that
#: when the whole report does not, ccdiag/report/fallback.py): a larger reserve would take the
#: time from the probes, and a verdict with fewer probes read (bench/bench_scale.py --busy 4)
REPORT_S_PER_PCI_FUNCTION = 0.0001
REPORT_RESERVE_MAX_SHARE = 0.3


def report_reserve_s(deadline_s: float, pci_functions: int = 0) -> float:
    """Seconds of ``deadline_s`` kept after the evaluation for building and writing a report on a
    node with ``pci_functions`` PCI functions."""
    return min(min(REPORT_RESERVE_S, REPORT_RESERVE_SHARE * deadline_s) + REPORT_S_PER_PCI_FUNCTION * pci_functions,
               REPORT_RESERVE_MAX_SHARE * deadline_s)


def run_stage(name: str, func: Callable[[], Any], end: float, grace_s: float = GRACE_S) -> Any:
    """Run ``func`` on a worker thread until ``end`` (+ ``grace_s``): its value, or
    :class:`StageError` if it raised, or :class:`StageTimeout` if it did not return in time (the
    worker is abandoned; stages are pure code over observations, so nothing is left half-written)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = func()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    worker = threading.Thread(target=work, name=f"ccdiag-{name}", daemon=True)
    worker.start()
    budget = max(0.0, end - time.monotonic())
    worker.join(budget + grace_s)
    if "error" in box:
        raise StageError(name, box["error"]) from box["error"]
    if "value" not in box:
        raise StageTimeout(name, budget)
    return box["value"]


__all__ = ["Budget", "StageError", "StageTimeout", "run_stage", "report_reserve_s", "JUDGE_SHARE", "JUDGE_MIN_S",
           "JUDGE_MAX_S"]
