"""What ``ccdiag check`` prints when its deadline comes before its own output is ready.

Why: a prolog reads one document (``--json``) or one verdict, and an exit code, within
``--timeout``. When the deadline guard (:mod:`ccdiag.run.deadline`) has to act, what it writes is
prepared here, at each step of the run, so that acting costs nothing:

* before the verdict (opening the snapshot, probing, judging): a report whose one finding,
  ``check.deadline`` (unknown), names the step the deadline interrupted; exit 3;
* once the verdict is known but the report is not yet written (a node with thousands of devices
  has a report of tens of MB): the verdict (counted over every finding) with the findings that are
  problems, without the passing ones, the topology and the probe data (``run.omitted`` says so);
  the verdict's own exit code (a failure found stays a failure).

As text, the same in the terminal's quiet form: the verdict line and one line per problem.
"""

from __future__ import annotations

from typing import Any

from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import UNKNOWN, Component, Finding
from ccdiag.report.document import build_report, dumps
from ccdiag.report.render import UNWRAPPED, render_text

#: the sections a report written at the deadline leaves out (the largest, and not the verdict)
LARGE_SECTIONS = ("topology", "probes")


def deadline_finding(deadline_s: float, step: str) -> Finding:
    """The unknown finding of a run whose deadline came while it was ``step``."""
    return Finding(
        check="check.deadline", status=UNKNOWN, component=Component("node", "ccdiag"),
        summary=f"the {deadline_s:g}s deadline came while {step}; no verdict",
        expected=f"a verdict within {deadline_s:g}s",
        remedy="Re-run with a larger --timeout; if it recurs, attach `ccdiag snapshot` output to a bug report.")


def no_verdict(step: str, deadline_s: float, as_json: bool, *, replayed_from: str | None = None,
               hostname: str | None = None) -> tuple[str, int]:
    """(text, exit code) for a deadline that came while ``step``, before any verdict."""
    finding = deadline_finding(deadline_s, step)
    code = int(ExitCode.UNEVALUATED)
    if not as_json:
        return render_text([finding], code, hostname, timed_out=True, quiet=True, width=UNWRAPPED), code
    run_info = {"replayed_from": replayed_from, "duration_s": round(deadline_s, 4), "deadline_s": deadline_s,
                "timed_out": True, "omitted": {"sections": ["probes", "topology"], "why": f"no verdict: {step}"}}
    meta = {"hostname": hostname} if hostname else {}
    return dumps(build_report("check", meta, findings=[finding], exit_code=code, run_info=run_info)) + "\n", code


def verdict_report(findings: list[Finding], exit_code: int, meta: dict, run_info: dict, extra: dict) -> dict:
    """The report of a known verdict, cheap to build on a node of any size: the verdict section
    counted over every finding, the findings that are problems (fail, warn, unknown) listed, the
    passing and skipped ones counted only; no topology, no probe data (``run.omitted`` says so)."""
    from ccdiag.report.document import verdict_section

    problems = [f for f in findings if f.status in _PROBLEMS]
    report = build_report("check", meta, findings=problems, exit_code=exit_code, run_info=run_info, extra=extra)
    report["verdict"] = verdict_section(findings, exit_code)
    report["run"] = dict(report.get("run") or {}, omitted={
        "sections": list(LARGE_SECTIONS) + ["findings that passed or were skipped"],
        "why": f"the deadline came before the whole report was written; the verdict counts every finding, "
               f"and the {len(problems)} problems are listed (`ccdiag topo --json` and a longer --timeout give "
               f"the rest)"})
    return report


_PROBLEMS = ("fail", "warn", "unknown")


def verdict_text(findings: list[Finding], exit_code: int, hostname: str | None, timed_out: bool,
                 strict: bool) -> str:
    """The quiet terminal verdict: the verdict line and one line per problem (unwrapped, as a
    piped ``--quiet`` prints it: a prolog's log keeps each problem as one record)."""
    return render_text(findings, exit_code, hostname, timed_out, quiet=True, strict=strict, width=UNWRAPPED)


def json_document(report: dict[str, Any]) -> str:
    """``report`` as the text written on stdout."""
    return dumps(report) + "\n"


__all__ = ["LARGE_SECTIONS", "deadline_finding", "json_document", "no_verdict", "verdict_report", "verdict_text"]
