"""The health loop's state as Prometheus series, written as a node_exporter textfile.

``ccdiag-health.prom`` sits beside ``ccdiag.prom`` (the check timer's) in the textfile directory:
the validity window (``ccdiag_last_pass_timestamp_seconds``, ``ccdiag_verdict_valid_until_seconds``),
every run's outcome, the drain cap as last counted, the ladder's rung per open root cause and every
remediation step. The series are declared in :mod:`ccdiag.exporters.spec` with the exporter's, so
the alert rules and the docs see one list. A value never recorded is left out, never zero.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from ccdiag.core.actions import RANK
from ccdiag.core.output import write_atomic
from ccdiag.exporters import spec as S
from ccdiag.health.state import OUTCOMES, HealthState

FILENAME = "ccdiag-health.prom"
#: step outcomes always exported for each rung with a step (so an alert's rate() sees the first one)
STEP_OUTCOMES = ("ok", "failed", "timeout", "not_started", "report_only", "held")


class _Static:
    def __init__(self, fams: list[Metric]):
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


def _family(name: str) -> Any:
    sp = S.BY_NAME[name]
    cls = CounterMetricFamily if sp.type == S.COUNTER else GaugeMetricFamily
    return cls(sp.family_name, sp.help, labels=list(sp.labels))


def families(st: HealthState) -> list[Metric]:
    out: list[Metric] = []

    def gauge(name: str, value: float | None) -> None:
        if value is None:
            return
        fam = _family(name)
        fam.add_metric([], float(value))
        out.append(fam)

    gauge("ccdiag_last_pass_timestamp_seconds", st.last_pass)
    gauge("ccdiag_verdict_valid_until_seconds", st.valid_until)
    at = st.last_run.get("at")
    gauge("ccdiag_health_last_run_timestamp_seconds", at if isinstance(at, (int, float)) else None)
    outcome = st.last_run.get("outcome")
    if outcome in OUTCOMES:
        fam = _family("ccdiag_health_last_run_outcome")
        for o in OUTCOMES:
            fam.add_metric([o], 1.0 if o == outcome else 0.0)
        out.append(fam)
    if st.runs:
        fam = _family("ccdiag_health_runs_total")
        for o in OUTCOMES:
            fam.add_metric([o], float(st.runs.get(o, 0)))
        out.append(fam)
    cap = st.cap or {}
    if "held" in cap:
        gauge("ccdiag_health_drain_held", 1.0 if cap.get("held") else 0.0)
    if isinstance(cap.get("total"), int) and cap.get("source") not in ("none", "error"):
        gauge("ccdiag_health_fleet_nodes", cap["total"])
        gauge("ccdiag_health_fleet_nodes_out", cap.get("out"))
        gauge("ccdiag_health_fleet_nodes_out_limit", cap.get("limit"))
    open_roots = [(k, r) for k, r in sorted(st.ladder.items()) if stepped_open(r)]
    if open_roots:
        fam = _family("ccdiag_health_ladder_action")
        for key, record in open_roots:
            fam.add_metric([str(record.get("check", "")), str(record.get("component", "")), key],
                           float(RANK.get(str(record.get("action")), 0)))
        out.append(fam)
    if st.steps:
        fam = _family("ccdiag_remediation_steps_total")
        for action in sorted(st.steps):
            for o in sorted(set(STEP_OUTCOMES) | set(st.steps[action])):
                fam.add_metric([action, o], float(st.steps[action].get(o, 0)))
        out.append(fam)
        last = _family("ccdiag_remediation_last_step_timestamp_seconds")
        for action in sorted(st.last_step):
            last.add_metric([action], st.last_step[action])
        out.append(last)
    return out


def stepped_open(record: dict) -> bool:
    """Whether a ladder record is a root still failing (not cleared or remedied since its last failure)."""
    from ccdiag.health.ladder import stepped_since_failure

    return isinstance(record.get("last_failed"), (int, float)) and stepped_since_failure(record) is None


def render(st: HealthState) -> bytes:
    return generate_latest(_Static(families(st)))  # type: ignore[arg-type]


def write(directory: str, st: HealthState) -> str:
    """Write the state's series atomically to ``directory/ccdiag-health.prom`` (readable by node_exporter)."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"textfile directory {directory} does not exist")
    path = os.path.join(directory, FILENAME)
    write_atomic(path, render(st), mode=0o644)
    return path


__all__ = ["FILENAME", "families", "render", "write"]
