"""The versioned JSON report: one document that support tickets, dashboards and scripts consume.

``schema_version`` follows semver: a minor bump only adds optional fields. The JSON Schema ships in
the package (``ccdiag/schema/report.schema.json``) and every report the tests produce is validated
against it. The ``run`` section holds what legitimately differs between a live run and the replay
of its snapshot (where the data came from, how long this run took); together with ``duration_s``
fields it is what :func:`strip_volatile` removes before comparing reports.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

from ccdiag import __version__
from ccdiag.core.actions import action_of
from ccdiag.core.findings import STATUSES, Finding, verdict_status
from ccdiag.core.readings import to_jsonable
from ccdiag.probes.registry import ProbeRun

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

SCHEMA_VERSION = "1.7.0"


def host_section(meta: dict) -> dict:
    keys = ("hostname", "kernel", "machine", "time", "time_epoch", "source", "synthesized", "description",
            "tool_version")
    host = {k: meta.get(k) for k in keys if k in meta}
    read = meta.get("bug_report")
    if isinstance(read, dict):  # --bug-report: how much of the file the verdict stands on
        summary: dict[str, Any] = {k: read[k] for k in ("file", "kind", "complete", "bytes_read", "generator_version")
                                   if k in read}
        summary["notes"] = [str(n) for n in read.get("notes") or []]
        host["bug_report"] = summary
    return host


def probes_section(runs: dict[str, ProbeRun]) -> dict:
    return {name: {"status": r.status, "duration_s": round(r.duration_s, 4), "error": r.error,
                   "data": to_jsonable(r.data)} for name, r in runs.items()}


def findings_section(findings: list[Finding]) -> list[dict]:
    """Each finding with its key and action; ``waived`` only on a waived one."""
    out = []
    for f in findings:
        item = {**to_jsonable(f), "key": f.key, "action": action_of(f)}
        if item.get("waived") is None:
            item.pop("waived", None)
        out.append(item)
    return out


def verdict_section(findings: list[Finding], exit_code: int) -> dict:
    counts = {s: 0 for s in STATUSES}
    for f in findings:
        counts[f.status] += 1
    from ccdiag.checks.causes import drain_reason, node_action

    return {"status": verdict_status(findings), "counts": counts, "exit_code": int(exit_code),
            "reason": drain_reason(findings), "action": node_action(findings)}


def build_report(kind: str, meta: dict, runs: dict[str, ProbeRun] | None = None, topology: Topology | dict[str, Any] | None = None,
                 findings: list[Finding] | None = None, exit_code: int | None = None,
                 run_info: dict | None = None, extra: dict | None = None) -> dict:
    """Assemble a report. ``topology`` is a :class:`Topology`, or its JSON already made (a dict)."""
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "tool": {"name": "ccdiag", "version": __version__},
        "host": host_section(meta),
        "run": dict(run_info or {}),
    }
    if runs is not None:
        report["probes"] = probes_section(runs)
    if topology is not None:
        report["topology"] = topology.to_json() if hasattr(topology, "to_json") else topology
    if findings is not None:
        report["findings"] = findings_section(findings)
        report["verdict"] = verdict_section(findings, exit_code if exit_code is not None else 0)
    if extra:
        report.update(extra)
    return report


#: above this many GPU pairs (64 GPUs), a check report counts the pairs that share the node's most
#: common level and figures instead of listing each (``expected_summary``); 256 GPUs have 32,640
#: pairs, 9 MB of a report. ``ccdiag topo --json`` lists every pair.
CHECK_P2P_MAX_PAIRS = 2016
_P2P_GROUP_KEYS = ("level", "gbyte_s", "current_gbyte_s", "usable", "blocked_by")


def summarise_pairs(topology: dict, max_pairs: int | None = None) -> dict:
    """``topology`` (its JSON) with the ``p2p`` entries of ``expected`` grouped when there are more
    than ``max_pairs``: the largest groups of identical values (level, capability, current figure,
    usable, blocked by) become ``expected_summary`` counts, largest first, until what stays
    listed fits ``max_pairs`` (default :data:`CHECK_P2P_MAX_PAIRS`). The odd pairs (a degraded
    link, a lost GPU's) stay listed whole."""
    max_pairs = CHECK_P2P_MAX_PAIRS if max_pairs is None else max_pairs
    expected = topology.get("expected") or []
    pairs = [e for e in expected if e.get("kind") == "p2p"]
    if len(pairs) <= max_pairs:
        return topology
    groups: dict[tuple, list[dict]] = {}
    for e in pairs:
        groups.setdefault(tuple(e.get(k) for k in _P2P_GROUP_KEYS), []).append(e)
    listed = len(pairs)
    summarised: set[tuple] = set()
    for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if listed <= max_pairs:
            break
        summarised.add(key)
        listed -= len(members)
    summary = []
    for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if key in summarised:
            first = members[0]
            summary.append({"kind": "p2p", "pairs": len(members), **dict(zip(_P2P_GROUP_KEYS, key)),
                            "example": {"a": first.get("a"), "b": first.get("b")}})
    kept = [e for e in expected
            if e.get("kind") != "p2p" or tuple(e.get(k) for k in _P2P_GROUP_KEYS) not in summarised]
    return {**topology, "expected": kept, "expected_summary": summary}


#: lists longer than this are serialised in slices of it (see :func:`dumps`)
_SLICE = 1000


def dumps(report: dict) -> str:
    """``report`` as :func:`ccdiag.core.output.json_text` writes it (without its last newline),
    the same text to the byte; a large report is serialised piece by piece (each top-level
    section, each probe, lists in slices): one ``json.dumps`` of a report of tens of MB holds the
    interpreter for a second under load, during which the deadline guard
    (:mod:`ccdiag.run.deadline`) could not act."""
    from ccdiag.core.output import PRETTY_MAX_BYTES, json_text

    text = _compact(report, 0)
    if len(text) <= PRETTY_MAX_BYTES:
        return json_text(report).rstrip("\n")
    return text


def _compact(value: Any, depth: int) -> str:
    """``json.dumps(value, sort_keys=True, default=str)``, in pieces down to ``depth`` 2."""
    if depth < 2 and type(value) is dict and all(type(k) is str for k in value):
        return "{" + ", ".join(f"{json.dumps(k)}: {_compact(v, depth + 1)}" for k, v in sorted(value.items())) + "}"
    if type(value) is list and len(value) > _SLICE:
        parts = (json.dumps(value[i:i + _SLICE], sort_keys=True, default=str)[1:-1]
                 for i in range(0, len(value), _SLICE))
        return "[" + ", ".join(parts) + "]"
    return json.dumps(value, sort_keys=True, default=str)


def load_schema() -> dict:
    text = resources.files("ccdiag").joinpath("schema/report.schema.json").read_text()
    return json.loads(text)


def validate(report: dict) -> None:
    """Raise ``jsonschema.ValidationError`` when ``report`` does not match the shipped schema."""
    import jsonschema

    jsonschema.validate(report, load_schema())


def strip_volatile(report: Any) -> Any:
    """The report without what differs between a run and the replay of its snapshot."""
    if isinstance(report, dict):
        return {k: strip_volatile(v) for k, v in report.items()
                if k not in ("run", "duration_s", "total_s", "age_s")}
    if isinstance(report, list):
        return [strip_volatile(v) for v in report]
    return report


def now_info(started: float, **extra: Any) -> dict:
    return dict({"duration_s": round(time.monotonic() - started, 4)}, **extra)
